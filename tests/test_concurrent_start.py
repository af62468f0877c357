"""The trainer's workers are built in prepare(), which Trinity's launcher calls beside the explorer's."""

import asyncio

import pytest

from conftest import as_module
from rftkit.patches import TRINITY_VERL_TRAINER
from rftkit.patches.apply import PatchTargetMoved, applied
from rftkit.trainer import concurrent_start


class TrainerShape:
    """Trinity-RFT 0.6.0's VERLTrainer as the patch sees it: workers built by __init__, an async prepare."""

    def __init__(self):
        self.calls = []
        self._init_workers()

    def _init_workers(self):
        self.calls.append("workers")

    async def prepare(self):
        self.calls.append("prepare")
        return "prepared"


def patched(cls: type) -> type:
    copy = type(cls.__name__, (cls,), {})  # the patch sets attributes on the copy, not on `cls`
    concurrent_start.defer_worker_init(as_module(TRINITY_VERL_TRAINER, VERLTrainer=copy))
    return copy


def test_the_workers_are_built_when_prepare_starts_and_only_once():
    trainer = patched(TrainerShape)()
    assert trainer.calls == [], "the constructor no longer builds the workers"
    assert asyncio.run(trainer.prepare()) == "prepared"
    assert trainer.calls == ["workers", "prepare"]
    asyncio.run(trainer.prepare())
    assert trainer.calls == ["workers", "prepare", "prepare"]


def test_patching_twice_defers_once():
    cls = patched(TrainerShape)
    concurrent_start.defer_worker_init(as_module(TRINITY_VERL_TRAINER, VERLTrainer=cls))
    trainer = cls()
    asyncio.run(trainer.prepare())
    assert trainer.calls == ["workers", "prepare"]


def test_the_real_trinity_trainer_still_has_what_the_patch_moves():
    from trinity.trainer.verl import trainer as verl_trainer

    cls = patched(verl_trainer.VERLTrainer)
    assert applied(cls._init_workers) == ["concurrent_start"]
    assert asyncio.iscoroutinefunction(cls.prepare) and cls.prepare.__name__ == "prepare"
    assert applied(verl_trainer.VERLTrainer._init_workers) == []


@pytest.mark.parametrize("body", ["no workers in __init__", "sync prepare"])
def test_a_trainer_that_moved_fails_naming_the_version(body):
    class Moved(TrainerShape):
        if body == "no workers in __init__":
            def __init__(self):
                self.calls = []
        else:
            def prepare(self):
                return None

    with pytest.raises(PatchTargetMoved, match="'concurrent_start'.*trinity-rft 0.6.0.*set RFTKIT_CONCURRENT_START=0"):
        concurrent_start.defer_worker_init(as_module(TRINITY_VERL_TRAINER, VERLTrainer=Moved))
