"""The checks of the flags that every experiment training a real model takes (MODEL, --steps, --minutes),
made before anything starts, so that a bad call fails in a second, not after a model conversion."""

from __future__ import annotations

import argparse


def check_model_and_length(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The training needs a length (--steps, --minutes, or both) and a MODEL that is a GGUF file or an HF model
    folder: parser.error otherwise."""
    if args.steps is None and args.minutes is None:
        parser.error("--steps, --minutes: give one, or both")
    if not args.model.exists():
        parser.error(f"model: no such file or folder: {args.model}")
    if args.model.is_dir() and not (args.model / "config.json").is_file():
        parser.error(f"model: {args.model}: no config.json in this folder; expected an HF model folder or a GGUF file")
    if args.model.is_file() and args.model.suffix != ".gguf":
        parser.error(f"model: {args.model}: expected a GGUF file (.gguf) or an HF model folder")
