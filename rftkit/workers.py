"""Ray's worker_process_setup_hook for a launch: what every worker process of a run gets before it
imports Trinity, verl or vLLM. Each patch is applied when its module is imported (rftkit.import_patch)."""

from __future__ import annotations

from rftkit import attention, colocate, ref_model, run_state


def setup() -> None:
    """Every run: verl's trainer without flash-attn (rftkit.attention), the reference model's weights
    on the GPU (rftkit.ref_model), and state files that a killed run can be resumed from
    (rftkit.run_state)."""
    attention.worker_setup()
    ref_model.worker_setup()
    run_state.worker_setup()


def setup_colocated() -> None:
    """A run on one GPU: the above, and the engine beside the trainer (rftkit.colocate)."""
    setup()
    colocate.worker_setup()
