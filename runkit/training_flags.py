"""The checks of the flags that every experiment training a real model takes (MODEL, --steps, --minutes),
made before anything starts, so that a bad call fails in a second, not after a model conversion."""

from __future__ import annotations

import argparse

from rftkit.inputs.model_path import check_model


def check_model_and_length(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The training needs a length (--steps, --minutes, or both; parser.error otherwise) and a MODEL that is a GGUF
    file or an HF model folder (an InputError otherwise)."""
    if args.steps is None and args.minutes is None:
        parser.error("--steps, --minutes: give one, or both")
    check_model(args.model, "model", gguf=True)
