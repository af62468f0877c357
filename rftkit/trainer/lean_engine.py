"""A one-GPU rollout engine starts in two processes instead of four.

Trinity-RFT 0.6.0's `vLLMRolloutModel.prepare` builds its vLLM engine inside the engine's Ray
actor. Before the engine serves, four Python processes in a row each import torch and vLLM:

1. the actor itself;
2. a subprocess in which vLLM's model registry inspects the model class, run on every machine
   whose `VLLM_CACHE_ROOT` has no `modelinfos/` entry for it yet (vLLM keeps CUDA out of the
   calling process this way);
3. vLLM's engine core process;
4. a worker process under the engine core, because Trinity asks for the `mp` executor
   (`distributed_executor_backend="mp"`) even when the engine has one GPU.

With RFTKIT_LEAN_ENGINE=1 (which the launcher sets unless the launch's environment sets it to 0:
`rftkit.cluster.FAST_START`), in the engine's actor:

* an engine of one GPU on one node gets vLLM's `uni` executor, vLLM's own default for that case:
  the worker runs inside the engine core (its `collective_rpc` calls reach it as before);
* the model class is inspected in the actor itself. The actor starts the engine core with
  `spawn` (Trinity sets VLLM_WORKER_MULTIPROC_METHOD), so CUDA in the actor cannot leak into it.

The engine core (process 3) stays: vLLM 0.23.0's `AsyncLLM` always runs its engine in a process
of its own.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType

from rftkit.trainer.import_patch import patch_on_import, source_has

VERSIONS = "Trinity-RFT 0.6.0 and vLLM 0.23.0"  # what the patched code was read in
SWITCH_ENV = "RFTKIT_LEAN_ENGINE"
ROLLOUT_MODEL = "trinity.common.models.vllm_model"
ASYNC_LLM = "vllm.v1.engine.async_llm"
REGISTRY = "vllm.model_executor.models.registry"


def _moved(what: str) -> RuntimeError:
    return RuntimeError(f"rftkit.trainer.lean_engine: {what}, unlike {VERSIONS}; "
                        f"this patch must be checked against it (or set {SWITCH_ENV}=0 in the launch's environment)")


def one_gpu(engine_args) -> bool:
    """Whether vLLM engine arguments describe an engine of one GPU on one node."""
    sizes = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "nnodes")
    return all(int(getattr(engine_args, size, 1) or 1) == 1 for size in sizes)


def check_rollout_model(module: ModuleType) -> None:
    """Trinity's engine actor still asks for the `mp` executor and builds an AsyncLLM from its arguments."""
    prepare = module.vLLMRolloutModel.prepare
    for text in ('distributed_executor_backend="mp"', "vllm.AsyncLLMEngine.from_engine_args(engine_args)"):
        if not source_has(prepare, text):
            raise _moved(f"{ROLLOUT_MODEL}.vLLMRolloutModel.prepare no longer has {text}")


def patch_async_llm(module: ModuleType) -> None:
    """`AsyncLLM.from_engine_args` gives an engine of one GPU vLLM's in-process (`uni`) executor."""
    async_llm = module.AsyncLLM
    original = async_llm.__dict__["from_engine_args"].__func__
    if getattr(original, "_rftkit_lean_engine", False):
        return
    if not source_has(original, "engine_args.create_engine_config("):
        raise _moved(f"{ASYNC_LLM}.AsyncLLM.from_engine_args no longer builds its config from engine_args")

    @functools.wraps(original)
    def from_engine_args(cls, engine_args, *args, **kwargs):
        if engine_args.distributed_executor_backend == "mp" and one_gpu(engine_args):
            engine_args.distributed_executor_backend = "uni"
        return original(cls, engine_args, *args, **kwargs)

    from_engine_args._rftkit_lean_engine = True
    async_llm.from_engine_args = classmethod(from_engine_args)


def run_here(fn):
    """What vLLM's `_run_in_subprocess(fn)` returns, computed in this process."""
    return fn()


def patch_registry(module: ModuleType) -> None:
    """vLLM's registry inspects a model class in this process instead of in a subprocess."""
    if module._run_in_subprocess is run_here:
        return
    if not source_has(module._LazyRegisteredModel.inspect_model_cls, "_run_in_subprocess("):
        raise _moved(f"{REGISTRY}._LazyRegisteredModel.inspect_model_cls no longer calls _run_in_subprocess")
    module._run_in_subprocess = run_here


def patch_engine_actor(module: ModuleType) -> None:
    """Once Trinity's engine actor module is imported (in the engine's actor, and wherever else it is),
    its process gets the two vLLM patches, applied as vLLM's modules are imported."""
    check_rollout_model(module)
    patch_on_import(ASYNC_LLM, patch_async_llm)
    patch_on_import(REGISTRY, patch_registry)


def worker_setup() -> None:
    """In every worker of a run with RFTKIT_LEAN_ENGINE=1: a one-GPU engine starts in two processes."""
    if os.environ.get(SWITCH_ENV) == "1":
        patch_on_import(ROLLOUT_MODEL, patch_engine_actor)
