"""The workflow runners start while the rollout engines start, not after them.

Trinity-RFT 0.6.0's `Explorer.prepare` waits for its engines, and only then creates the rollout
coordinator, whose `prepare` builds the experience pipeline and the scheduler's workflow runners:
each runner a new process that imports Trinity, vLLM and agentscope. With RFTKIT_EARLY_RUNNERS=1
(which the launcher sets unless the launch's environment sets it to 0: `rftkit.patches.FAST_START`):

* `Explorer.prepare` creates the coordinator and starts its `prepare` first, then runs as before;
  its own `RolloutCoordinator.get_actor` call is handed that coordinator;
* `RolloutCoordinator.prepare` runs one call at a time, so the explorer's own call waits for the
  early one and finds it done, instead of building a second scheduler;
* a runner made before its engine's actor exists waits for the actor's name (`Allocator.get_model`),
  and its `prepare` waits until the engine says it is ready.
"""

from __future__ import annotations

import asyncio
import time
from types import ModuleType

from rftkit.patches.apply import replace

ENGINE_WAIT_S = 3600.0  # how long a runner waits for its engine: longer than any engine's start
POLL_S = 0.5
PATCH = "early_runners"  # in rftkit.patches, with the Trinity-RFT code each function below relies on

_early: dict[int, object] = {}  # id(config) -> the coordinator an explorer made before its engines


def patch_explorer(module: ModuleType) -> None:
    """`Explorer.prepare` starts the rollout coordinator's prepare before it creates the engines."""
    make_coordinator = getattr(module.RolloutCoordinator, "get_actor", None)  # Trinity's, before the patch

    def coordinator_first(prepare):
        async def prepare_with_early_runners(self):
            coordinator = make_coordinator(self.config)
            coordinator.prepare.remote()  # its result is awaited again, and raised, by prepare's own call
            _early[id(self.config)] = coordinator
            try:
                return await prepare(self)
            finally:
                _early.pop(id(self.config), None)
        return prepare_with_early_runners

    def the_early_one(original):
        def get_actor(cls, config):
            return _early.pop(id(config), None) or make_coordinator(config)
        return get_actor

    replace(PATCH, module, "Explorer.prepare", coordinator_first)
    replace(PATCH, module, "RolloutCoordinator.get_actor", the_early_one)


def patch_coordinator(module: ModuleType) -> None:
    """`RolloutCoordinator.prepare` runs one call at a time; a later call finds the work done."""
    def one_at_a_time(prepare):
        async def prepare_once(self):
            lock = self.__dict__.setdefault("_rftkit_prepare_lock", asyncio.Lock())
            async with lock:
                return await prepare(self)
        return prepare_once

    replace(PATCH, module, "RolloutCoordinator.prepare", one_at_a_time)


def patch_allocator(module: ModuleType) -> None:
    """`Allocator.get_model` waits for the engine's actor to exist before it looks it up."""
    def when_made(get_model):
        def get_model_when_made(self, config, role, engine_id):
            import ray

            name, deadline = self.get_actor_name(role, engine_id, 0), time.monotonic() + ENGINE_WAIT_S
            while time.monotonic() < deadline:
                try:
                    ray.get_actor(name, namespace=config.ray_namespace)
                    break
                except ValueError:  # not made yet; after the deadline, get_model says so itself
                    time.sleep(POLL_S)
            return get_model(self, config, role, engine_id)
        return get_model_when_made

    replace(PATCH, module, "Allocator.get_model", when_made)


def patch_runner(module: ModuleType) -> None:
    """`WorkflowRunner.prepare` first waits until each of its engines says it is ready."""
    def engines_first(prepare):
        async def prepare_when_engines_ready(self):
            for wrapper in [self.model_wrapper, *self.auxiliary_model_wrappers]:
                await wait_until_ready(wrapper.model)
            return await prepare(self)
        return prepare_when_engines_ready

    replace(PATCH, module, "WorkflowRunner.prepare", engines_first)


async def wait_until_ready(engine, timeout: float = ENGINE_WAIT_S) -> None:
    """Wait until `engine` (an InferenceModel actor; None for an external one) answers `ready()` with True."""
    if engine is None:
        return
    deadline = time.monotonic() + timeout
    while not await engine.ready.remote():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rftkit.trainer.early_runners: the rollout engine was not ready after {timeout:.0f} s")
        await asyncio.sleep(POLL_S)

