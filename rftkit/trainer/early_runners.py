"""The workflow runners start while the rollout engines start, not after them.

Trinity-RFT 0.6.0's `Explorer.prepare` waits for its engines, and only then creates the rollout
coordinator, whose `prepare` builds the experience pipeline and the scheduler's workflow runners:
each runner a new process that imports Trinity, vLLM and agentscope. With RFTKIT_EARLY_RUNNERS=1
(which the launcher sets unless the launch's environment sets it to 0: `rftkit.cluster.FAST_START`):

* `Explorer.prepare` creates the coordinator and starts its `prepare` first, then runs as before;
  its own `RolloutCoordinator.get_actor` call is handed that coordinator;
* `RolloutCoordinator.prepare` runs one call at a time, so the explorer's own call waits for the
  early one and finds it done, instead of building a second scheduler;
* a runner made before its engine's actor exists waits for the actor's name (`Allocator.get_model`),
  and its `prepare` waits until the engine says it is ready.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from types import ModuleType

from rftkit.trainer.import_patch import patch_on_import, source_has

TRINITY_VERSION = "0.6.0"  # the version the patched methods were read in
SWITCH_ENV = "RFTKIT_EARLY_RUNNERS"
ENGINE_WAIT_S = 3600.0  # how long a runner waits for its engine: longer than any engine's start
POLL_S = 0.5

_early: dict[int, object] = {}  # id(config) -> the coordinator an explorer made before its engines


def _moved(what: str) -> RuntimeError:
    return RuntimeError(f"rftkit.trainer.early_runners: {what}, as Trinity-RFT {TRINITY_VERSION} did not; "
                        f"this patch must be checked against it (or set {SWITCH_ENV}=0 in the launch's environment)")


def _unpatched(cls: type, method: str, texts: list[str], moved: str, coroutine: bool = False):
    """`cls.method` as Trinity-RFT 0.6.0 has it, or None if it is patched already; fails if it has moved."""
    original = getattr(cls, method)
    if getattr(original, "_rftkit_early_runners", False):
        return None
    if (coroutine and not asyncio.iscoroutinefunction(original)) or not all(source_has(original, t) for t in texts):
        raise _moved(moved)
    return original


def _install(cls: type, method: str, original, replacement) -> None:
    functools.update_wrapper(replacement, original)
    replacement._rftkit_early_runners = True
    setattr(cls, method, replacement)


def patch_explorer(module: ModuleType) -> None:
    """`Explorer.prepare` starts the rollout coordinator's prepare before it creates the engines."""
    explorer, coordinator_cls = module.Explorer, module.RolloutCoordinator
    prepare = _unpatched(explorer, "prepare", ["create_all_models()", "RolloutCoordinator.get_actor(self.config)",
                                               "await self.rollout_coordinator.prepare.remote()"],
                         "trinity.explorer.explorer.Explorer.prepare no longer creates the engines, then "
                         "RolloutCoordinator.get_actor(self.config) and awaits its prepare")
    if prepare is None:
        return
    make_coordinator = coordinator_cls.get_actor

    async def prepare_with_early_runners(self):
        coordinator = make_coordinator(self.config)
        coordinator.prepare.remote()  # its result is awaited again, and raised, by prepare's own call
        _early[id(self.config)] = coordinator
        try:
            return await prepare(self)
        finally:
            _early.pop(id(self.config), None)

    def get_actor(cls, config):
        return _early.pop(id(config), None) or make_coordinator(config)

    _install(explorer, "prepare", prepare, prepare_with_early_runners)
    coordinator_cls.get_actor = classmethod(get_actor)


def patch_coordinator(module: ModuleType) -> None:
    """`RolloutCoordinator.prepare` runs one call at a time; a later call finds the work done."""
    prepare = _unpatched(module.RolloutCoordinator, "prepare", ["if self.running:"],
                         "RolloutCoordinator.prepare is no longer a coroutine that returns once running",
                         coroutine=True)
    if prepare is None:
        return

    async def prepare_once(self):
        lock = self.__dict__.setdefault("_rftkit_prepare_lock", asyncio.Lock())
        async with lock:
            return await prepare(self)

    _install(module.RolloutCoordinator, "prepare", prepare, prepare_once)


def patch_allocator(module: ModuleType) -> None:
    """`Allocator.get_model` waits for the engine's actor to exist before it looks it up."""
    get_model = _unpatched(module.Allocator, "get_model",
                           ["ray.get_actor(actor_name, namespace=config.ray_namespace)"],
                           "Allocator.get_model no longer looks the engine up with ray.get_actor")
    if get_model is None:
        return

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

    _install(module.Allocator, "get_model", get_model, get_model_when_made)


def patch_runner(module: ModuleType) -> None:
    """`WorkflowRunner.prepare` first waits until each of its engines says it is ready."""
    prepare = _unpatched(module.WorkflowRunner, "prepare", ["self.model_wrapper.prepare()"],
                         "WorkflowRunner.prepare no longer prepares self.model_wrapper", coroutine=True)
    if prepare is None:
        return

    async def prepare_when_engines_ready(self):
        for wrapper in [self.model_wrapper, *self.auxiliary_model_wrappers]:
            await wait_until_ready(wrapper.model)
        return await prepare(self)

    _install(module.WorkflowRunner, "prepare", prepare, prepare_when_engines_ready)


async def wait_until_ready(engine, timeout: float = ENGINE_WAIT_S) -> None:
    """Wait until `engine` (an InferenceModel actor; None for an external one) answers `ready()` with True."""
    if engine is None:
        return
    deadline = time.monotonic() + timeout
    while not await engine.ready.remote():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rftkit.trainer.early_runners: the rollout engine was not ready after {timeout:.0f} s")
        await asyncio.sleep(POLL_S)


def worker_setup() -> None:
    """In every worker of a run with RFTKIT_EARLY_RUNNERS=1: the runners start beside the engines."""
    if os.environ.get(SWITCH_ENV) != "1":
        return
    patch_on_import("trinity.explorer.explorer", patch_explorer)
    patch_on_import("trinity.explorer.rollout_coordinator", patch_coordinator)
    patch_on_import("trinity.common.models.allocator", patch_allocator)
    patch_on_import("trinity.explorer.workflow_runner", patch_runner)
