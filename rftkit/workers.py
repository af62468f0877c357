"""Ray's worker_process_setup_hook for a launch: what every worker process of a run gets before it
imports Trinity, verl or vLLM. Each patch is applied when its module is imported (rftkit.patches.apply)."""

from __future__ import annotations

from rftkit.patches.apply import install
from rftkit.trainer import attention


def setup() -> None:
    """Every run: the `varlen` attention registered with transformers (rftkit.trainer.attention), and the patches
    that rftkit.patches declares for a run's workers and that the launch's environment switches on."""
    attention.worker_setup()
    install("worker")


def setup_colocated() -> None:
    """A run on one GPU: the above, and the patches for the engine beside the trainer (rftkit.patches, "colocated")."""
    setup()
    install("colocated")
