"""Ray's worker_process_setup_hook for a launch: what every worker process of a run gets before it
imports Trinity, verl or vLLM. Each patch is applied when its module is imported (rftkit.trainer.import_patch)."""

from __future__ import annotations

from rftkit import checkpoints, run_state, startup, trinity_plugins
from rftkit.trainer import (attention, colocate, concurrent_start, early_runners, layer_levers, lean_engine,
                            lora_saves, ref_model)


def setup() -> None:
    """Every run: the project's Trinity plugins (rftkit.trinity_plugins), verl's trainer without
    flash-attn (rftkit.trainer.attention), the reference model's weights on the GPU
    (rftkit.trainer.ref_model), a LoRA run's syncs and checkpoints that hold its adapter alone
    (rftkit.trainer.lora_saves), state files that a killed run can be resumed from (rftkit.run_state),
    checkpoints that a kill cannot tear (rftkit.checkpoints), the start-up phases each worker ends
    marked in the launch's timeline (rftkit.startup), and, unless the launch switches them off
    (rftkit.cluster.FAST_START), the trainer's workers (rftkit.trainer.concurrent_start) and the
    workflow runners (rftkit.trainer.early_runners) started beside the rollout engine, and a one-GPU
    engine started in two processes instead of four (rftkit.trainer.lean_engine); where the
    environment asks for them, the trainer's decoder layers compiled or checkpointed sparsely
    (rftkit.trainer.layer_levers)."""
    trinity_plugins.worker_setup()
    attention.worker_setup()
    concurrent_start.worker_setup()
    early_runners.worker_setup()
    lean_engine.worker_setup()
    ref_model.worker_setup()
    lora_saves.worker_setup()
    layer_levers.worker_setup()
    run_state.worker_setup()
    checkpoints.worker_setup()
    startup.worker_setup()


def setup_colocated() -> None:
    """A run on one GPU: the above, and the engine beside the trainer (rftkit.trainer.colocate)."""
    setup()
    colocate.worker_setup()
