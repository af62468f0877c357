"""The checks every experiment on a real model makes before anything starts: the flags of those that train
(MODEL, --steps, --minutes), and a CUDA GPU, so that a bad call fails in seconds, not after a model conversion."""

from __future__ import annotations

import argparse

from rftkit.inputs import InputError
from rftkit.inputs.model_path import check_model


def check_model_and_length(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The training needs a length (--steps, --minutes, or both; parser.error otherwise) and a MODEL that is a GGUF
    file or an HF model folder (an InputError otherwise)."""
    if args.steps is None and args.minutes is None:
        parser.error("--steps, --minutes: give one, or both")
    check_model(args.model, "model", gguf=True)


def require_cuda(what: str) -> None:
    """Refuse to go on where torch sees no CUDA GPU: `what` (vLLM, the trainer) would fail there after the
    model's conversion and a server's start."""
    import torch

    if not torch.cuda.is_available():
        raise InputError(f"{what} needs a CUDA GPU; this machine has none (docs/gpu.md)")
