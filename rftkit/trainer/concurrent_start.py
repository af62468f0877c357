"""The trainer's workers start while the rollout engine starts, not before it.

Trinity-RFT 0.6.0's launcher (`trinity.cli.launcher.both`, also used for `colocate`) waits for
both actors' constructors before it asks the explorer for its rollout engines, and the trainer's
constructor builds verl's FSDP workers and loads the model (`VERLTrainer._init_workers`). So the
engine, the longest phase, starts only once the trainer is done.

`defer_worker_init` moves that work to the start of `VERLTrainer.prepare`, which the launcher
calls at the same moment as the explorer's `prepare`: the two overlap. Nothing between the two
calls uses the workers (the actor's constructor only keeps the wrapper; `shutdown` only closes
the monitor).

The launcher sets RFTKIT_CONCURRENT_START=1 unless the launch's environment sets it to 0
(`rftkit.cluster.FAST_START`); `experiments/startup.py` measures it.
"""

from __future__ import annotations

import inspect
import os
from types import ModuleType

from rftkit.trainer.import_patch import patch_on_import, source_has

VERL_TRAINER = "trinity.trainer.verl.trainer"  # written against Trinity-RFT 0.6.0
SWITCH_ENV = "RFTKIT_CONCURRENT_START"
CALLED_IN_INIT = "self._init_workers()"


def defer_worker_init(module: ModuleType) -> None:
    """Patch Trinity-RFT 0.6.0's VERLTrainer: its workers are built when `prepare` starts, not in `__init__`."""
    trainer = module.VERLTrainer
    init_workers, prepare = getattr(trainer, "_init_workers", None), getattr(trainer, "prepare", None)
    if getattr(init_workers, "deferred_to_prepare", False):
        return
    if (init_workers is None or not inspect.iscoroutinefunction(prepare)
            or not source_has(trainer.__init__, CALLED_IN_INIT)):
        raise RuntimeError(f"rftkit.trainer.concurrent_start: {VERL_TRAINER}.VERLTrainer no longer builds its "
                           f"workers in __init__ with {CALLED_IN_INIT} before an async prepare(), as Trinity-RFT "
                           f"0.6.0 did; this patch must be checked against it "
                           f"(or set {SWITCH_ENV}=0 in the launch's environment)")

    def _init_workers(self):  # called by __init__: remembered, not done
        self._rftkit_workers_pending = True

    async def prepare_with_workers(self):
        if self.__dict__.pop("_rftkit_workers_pending", False):
            init_workers(self)
        return await prepare(self)

    _init_workers.deferred_to_prepare = True
    prepare_with_workers.__name__ = prepare_with_workers.__qualname__ = "prepare"
    trainer._init_workers = _init_workers
    trainer.prepare = prepare_with_workers


def worker_setup() -> None:
    """In every worker of a run with RFTKIT_CONCURRENT_START=1: the trainer's workers start in prepare."""
    if os.environ.get(SWITCH_ENV) == "1":
        patch_on_import(VERL_TRAINER, defer_worker_init)
