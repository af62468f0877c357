"""Ray's worker_process_setup_hook for a launch: what every worker process of a run gets before it
imports Trinity, verl or vLLM. Each patch is applied when its module is imported (rftkit.import_patch)."""

from __future__ import annotations

from rftkit import attention, colocate, run_state


def setup() -> None:
    """Every run: verl's trainer without flash-attn (rftkit.attention), and state files that a
    killed run can be resumed from (rftkit.run_state)."""
    attention.worker_setup()
    run_state.worker_setup()


def setup_colocated() -> None:
    """A run on one GPU: the above, and the engine beside the trainer (rftkit.colocate)."""
    setup()
    colocate.worker_setup()
