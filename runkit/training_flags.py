"""The checks of the flags that every experiment training a real model takes (MODEL, --steps, --minutes),
made before anything starts, so that a bad call fails in a second, not after a model conversion."""

from __future__ import annotations

import argparse


def check_model_and_length(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The training needs a length (--steps, --minutes, or both) and a MODEL that exists: parser.error otherwise."""
    if args.steps is None and args.minutes is None:
        parser.error("--steps, --minutes: give one, or both")
    if not args.model.exists():
        parser.error(f"model: no such file or folder: {args.model}")
