"""What the project's command lines share: help that shows each option's default, and one-line errors."""

from __future__ import annotations

import argparse
from pathlib import Path


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written (a script's docstring), and after each option's help its default,
    unless it has none (None, False, an empty list) or the help already names it. A default of 0 is
    one: it equals False, so it is told apart by identity."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or not has_default(action):
            return text
        return f"{text} (default: %(default)s)".strip()


def has_default(action: argparse.Action) -> bool:
    """Whether --help has a default to show for the action: not None, False, [] or SUPPRESS (0 and 0.0 are)."""
    return not (action.default is None or action.default is False or action.default is argparse.SUPPRESS
                or (isinstance(action.default, list) and action.default == []))


class ArgumentParser(argparse.ArgumentParser):
    """The project's command lines: HelpFormatter's --help, and a bad argument answered by one line,
    `error: <flag>: <what>`, and exit status 2, as every other bad input is (--help keeps the usage)."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str):
        message = message.removeprefix("argument ")  # argparse's "argument --limit: ..." names the flag anyway
        flag, _, what = message.partition(": ")
        if what.startswith((flag + " ", flag + ":")):  # a type's own message that names the flag, with its value
            message = what
        self.exit(2, f"error: {' '.join(message.split())}\n")


def at_least(lowest: float, kind: type = int, strictly: bool = False):
    """An argparse type: a number of `kind` (int or float) no smaller than `lowest`, or greater than it if
    `strictly`; NaN is refused too."""
    def parse(text: str):
        value = kind(text)  # argparse words a ValueError as "invalid int value: 'x'", by this function's name
        if not (value > lowest if strictly else value >= lowest):
            raise argparse.ArgumentTypeError(f"must be {'more than' if strictly else 'at least'} {lowest}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def above(lowest: float):
    """An argparse type: a number greater than `lowest` (seconds, minutes, rates, sizes)."""
    return at_least(lowest, float, strictly=True)


def step_range(lowest: int):
    """An argparse type: `A:B`, whole numbers with `lowest` <= A <= B, as the pair (A, B)."""
    def parse(text: str) -> tuple[int, int]:
        first, sep, last = text.partition(":")
        if not (sep and first.isdigit() and last.isdigit() and lowest <= int(first) <= int(last)):
            raise argparse.ArgumentTypeError(f"expected A:B, whole numbers with {lowest} <= A <= B, got {text}")
        return int(first), int(last)

    parse.__name__ = "step range"
    return parse


def labelled_path(text: str) -> tuple[str, Path]:
    """A command line's `LABEL=PATH`, both given, or a bare PATH labelled by its last part."""
    label, sep, path = text.partition("=")
    if sep and not (label.strip() and path.strip()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=PATH, both given, or PATH")
    return (label, Path(path)) if sep else (Path(text).name, Path(text))


def exit_now(code: int) -> None:
    """End the process with `code`, skipping the interpreter's teardown of every loaded module (slow once a
    launch has imported its stack). Output is flushed and atexit's handlers (logging's, Ray's) run first."""
    import atexit
    import os
    import sys

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
