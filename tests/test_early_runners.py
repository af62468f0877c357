"""The rollout coordinator and its runners start with the explorer's prepare, before the engines are ready."""

import asyncio
import types

import pytest

from conftest import as_module
from rftkit.patches import ALLOCATOR
from rftkit.patches.apply import PatchTargetMoved, applied
from rftkit.trainer import early_runners

EXPLORER, COORDINATOR, RUNNER = ("trinity.explorer.explorer", "trinity.explorer.rollout_coordinator",
                                 "trinity.explorer.workflow_runner")


class Remote:
    """A Ray method handle of the tests: `.remote()` records the call and returns an awaitable."""

    def __init__(self, log, name, result=None):
        self.log, self.name, self.result = log, name, result

    def remote(self, *args):
        self.log.append(self.name)
        return Answer(self.result() if callable(self.result) else self.result)


class Answer:
    """An object reference of the tests: awaiting it gives the answer; dropping it unawaited is fine, as in Ray."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        return self.value
        yield


class RolloutCoordinator:
    """Trinity-RFT 0.6.0's coordinator as the explorer patch sees it: get_actor makes a new actor."""
    log: list = []
    made = 0

    def __init__(self):
        self.prepare = Remote(self.log, f"coordinator {RolloutCoordinator.made} prepare")

    @classmethod
    def get_actor(cls, config):
        cls.log.append(f"coordinator {cls.made} made")
        actor = cls()
        cls.made += 1
        return actor


class Explorer:
    """Trinity-RFT 0.6.0's `Explorer.prepare`, its order as the patch checks it."""

    def __init__(self, log):
        self.config, self.log = object(), log
        self.model_allocator = types.SimpleNamespace(create_all_models=self.create_all_models)

    async def create_all_models(self):
        self.log.append("engines ready")

    async def prepare(self):
        self.models = await self.model_allocator.create_all_models()
        self.rollout_coordinator = RolloutCoordinator.get_actor(self.config)
        await self.rollout_coordinator.prepare.remote()


def patched_explorer(monkeypatch):
    log = []
    monkeypatch.setattr(RolloutCoordinator, "log", log)
    monkeypatch.setattr(RolloutCoordinator, "made", 0)
    monkeypatch.setattr(RolloutCoordinator, "get_actor", RolloutCoordinator.__dict__["get_actor"])
    explorer = type("Explorer", (Explorer,), {})
    early_runners.patch_explorer(as_module(EXPLORER, Explorer=explorer, RolloutCoordinator=RolloutCoordinator))
    return explorer(log), log


def test_the_coordinator_prepares_before_the_engines_and_the_explorer_reuses_it(monkeypatch):
    explorer, log = patched_explorer(monkeypatch)
    asyncio.run(explorer.prepare())
    assert log == ["coordinator 0 made", "coordinator 0 prepare", "engines ready", "coordinator 0 prepare"]
    assert RolloutCoordinator.made == 1
    RolloutCoordinator.get_actor(object())  # outside a prepare, get_actor makes a new one as before
    assert RolloutCoordinator.made == 2


def test_a_failed_prepare_leaves_no_coordinator_for_the_next(monkeypatch):
    explorer, log = patched_explorer(monkeypatch)

    async def engines_fail():
        raise RuntimeError("no GPU")

    explorer.model_allocator.create_all_models = engines_fail
    with pytest.raises(RuntimeError, match="no GPU"):
        asyncio.run(explorer.prepare())
    assert early_runners._early == {}


class CoordinatorShape:
    """RolloutCoordinator.prepare of Trinity-RFT 0.6.0: pipeline, scheduler, then running."""

    def __init__(self):
        self.running, self.built = False, []

    async def prepare(self):
        if self.running:
            return
        self.built.append("pipeline")
        await asyncio.sleep(0.01)
        self.built.append("scheduler")
        self.running = True


def test_two_prepares_of_the_coordinator_build_once():
    cls = type("RolloutCoordinator", (CoordinatorShape,), {})
    early_runners.patch_coordinator(as_module(COORDINATOR, RolloutCoordinator=cls))
    coordinator = cls()

    async def both():
        await asyncio.gather(coordinator.prepare(), coordinator.prepare())

    asyncio.run(both())
    assert coordinator.built == ["pipeline", "scheduler"]
    assert not CoordinatorShape().built  # the shape itself is untouched


def test_without_the_lock_the_shape_builds_twice():  # what the lock is for
    coordinator = CoordinatorShape()

    async def both():
        await asyncio.gather(coordinator.prepare(), coordinator.prepare())

    asyncio.run(both())
    assert coordinator.built == ["pipeline", "pipeline", "scheduler", "scheduler"]


def test_a_runner_waits_for_its_engine_actor_to_be_made(monkeypatch, tmp_path):
    import ray
    from trinity.common.config import InferenceModelConfig
    from trinity.common.models import allocator as real

    cls = type("Allocator", (real.Allocator,), {})
    early_runners.patch_allocator(as_module(ALLOCATOR, Allocator=cls))
    lookups = []

    def get_actor(name, namespace=None):
        lookups.append(name)
        if len(lookups) < 3:
            raise ValueError(f"Failed to look up actor {name}")
        return f"handle of {name}"

    monkeypatch.setattr(ray, "get_actor", get_actor)
    monkeypatch.setattr(early_runners, "POLL_S", 0.01)
    config = types.SimpleNamespace(name="explorer", ray_namespace="ns")
    wrapper = cls(config).get_model(InferenceModelConfig(ray_namespace="ns", model_path=str(tmp_path)), "rollout", 0)
    assert lookups == ["explorer_rollout_model_0_0"] * 4  # two misses, the wait's hit, get_model's own
    assert wrapper.model == "handle of explorer_rollout_model_0_0"


def test_a_runner_prepares_once_its_engine_is_ready(monkeypatch):
    monkeypatch.setattr(early_runners, "POLL_S", 0.01)
    answers, log = iter([False, False, True]), []
    engine = types.SimpleNamespace(ready=Remote(log, "ready?", lambda: next(answers)))

    class RunnerShape:
        model_wrapper = types.SimpleNamespace(model=engine)
        auxiliary_model_wrappers = [types.SimpleNamespace(model=None)]  # an external model: nothing to wait for

        async def prepare(self):
            await self.model_wrapper.prepare()

    RunnerShape.model_wrapper.prepare = lambda: Remote(log, "prepared").remote()
    cls = type("WorkflowRunner", (RunnerShape,), {})
    early_runners.patch_runner(as_module(RUNNER, WorkflowRunner=cls))
    asyncio.run(cls().prepare())
    assert log == ["ready?", "ready?", "ready?", "prepared"]


def test_an_engine_that_never_comes_ends_the_wait_with_an_error():
    engine = types.SimpleNamespace(ready=Remote([], "ready?", False))
    with pytest.raises(TimeoutError, match="not ready after 0 s"):
        asyncio.run(early_runners.wait_until_ready(engine, timeout=0.0))


def test_the_real_trinity_classes_still_have_what_the_patches_reorder():
    from trinity.common.models import allocator
    from trinity.explorer import explorer, rollout_coordinator, workflow_runner

    copies = {name: type(name, (getattr(module, name),), {}) for module, name in [
        (explorer, "Explorer"), (rollout_coordinator, "RolloutCoordinator"),
        (allocator, "Allocator"), (workflow_runner, "WorkflowRunner")]}
    make_coordinator = rollout_coordinator.RolloutCoordinator.__dict__["get_actor"]
    early_runners.patch_explorer(as_module(EXPLORER, **copies))
    early_runners.patch_coordinator(as_module(COORDINATOR, **copies))
    early_runners.patch_allocator(as_module(ALLOCATOR, **copies))
    early_runners.patch_runner(as_module(RUNNER, **copies))
    for name, method in [("Explorer", "prepare"), ("RolloutCoordinator", "prepare"),
                         ("Allocator", "get_model"), ("WorkflowRunner", "prepare")]:
        assert applied(copies[name].__dict__[method]) == ["early_runners"], (name, method)
    assert rollout_coordinator.RolloutCoordinator.__dict__["get_actor"] is make_coordinator
    assert applied(explorer.Explorer.prepare) == []


@pytest.mark.parametrize("patch,module,shape", [
    ("patch_explorer", EXPLORER, "an explorer that makes its coordinator first"),
    ("patch_coordinator", COORDINATOR, "a coordinator without the running check"),
    ("patch_allocator", ALLOCATOR, "an allocator that looks engines up another way"),
    ("patch_runner", RUNNER, "a runner that prepares no model"),
])
def test_code_that_moved_fails_naming_the_version(patch, module, shape):
    async def prepare(self):
        return None

    def get_model(self, config, role, engine_id):
        return None

    namespace = as_module(
        module, Explorer=type("Explorer", (), {"prepare": prepare}),
        RolloutCoordinator=type("C", (), {"prepare": prepare}),
        Allocator=type("Allocator", (), {"get_model": get_model}), WorkflowRunner=type("W", (), {"prepare": prepare}))
    with pytest.raises(PatchTargetMoved, match="'early_runners'.*trinity-rft 0.6.0.*set RFTKIT_EARLY_RUNNERS=0"):
        getattr(early_runners, patch)(namespace)
