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
`rftkit.patches.FAST_START`), in the engine's actor:

* an engine of one GPU on one node gets vLLM's `uni` executor, vLLM's own default for that case:
  the worker runs inside the engine core (its `collective_rpc` calls reach it as before);
* the model class is inspected in the actor itself. The actor starts the engine core with
  `spawn` (Trinity sets VLLM_WORKER_MULTIPROC_METHOD), so CUDA in the actor cannot leak into it.

The engine core (process 3) stays: vLLM 0.23.0's `AsyncLLM` always runs its engine in a process
of its own.
"""

from __future__ import annotations

from types import ModuleType

from rftkit.patches.apply import replace


def one_gpu(engine_args) -> bool:
    """Whether vLLM engine arguments describe an engine of one GPU on one node."""
    sizes = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "nnodes")
    return all(int(getattr(engine_args, size, 1) or 1) == 1 for size in sizes)


def patch_async_llm(module: ModuleType) -> None:
    """`AsyncLLM.from_engine_args` gives an engine of one GPU vLLM's in-process (`uni`) executor (rftkit.patches
    checks first that Trinity's engine actor still asks for `mp` and builds an AsyncLLM from its arguments)."""
    def uni_for_one_gpu(original):
        def from_engine_args(cls, engine_args, *args, **kwargs):
            if engine_args.distributed_executor_backend == "mp" and one_gpu(engine_args):
                engine_args.distributed_executor_backend = "uni"
            return original(cls, engine_args, *args, **kwargs)
        return from_engine_args

    replace("lean_engine.uni_executor", module, "AsyncLLM.from_engine_args", uni_for_one_gpu)


def patch_registry(module: ModuleType) -> None:
    """vLLM's registry inspects a model class in this process instead of in a subprocess."""
    def in_this_process(original):
        def _run_in_subprocess(fn):
            return fn()
        return _run_in_subprocess

    replace("lean_engine.inspect_here", module, "_run_in_subprocess", in_this_process)
