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
(`rftkit.patches.FAST_START`); `experiments/startup.py` measures it.
"""

from __future__ import annotations

from types import ModuleType

from rftkit.patches.apply import replace


def defer_worker_init(module: ModuleType) -> None:
    """Patch Trinity-RFT 0.6.0's VERLTrainer: its workers are built when `prepare` starts, not in `__init__`."""
    init_workers = getattr(module.VERLTrainer, "_init_workers", None)  # Trinity's, before the patch

    def remembered(original):
        def _init_workers(self):  # called by __init__: remembered, not done
            self._rftkit_workers_pending = True
        return _init_workers

    def with_workers(prepare):
        async def prepare_with_workers(self):
            if self.__dict__.pop("_rftkit_workers_pending", False):
                init_workers(self)
            return await prepare(self)
        return prepare_with_workers

    replace("concurrent_start", module, "VERLTrainer._init_workers", remembered)
    replace("concurrent_start", module, "VERLTrainer.prepare", with_workers)
