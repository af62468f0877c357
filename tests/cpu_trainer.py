"""Run settings of experiments/trainer_speed on CPU, with a tiny model: the trainer's real code path,
minus the GPU.

    python tests/cpu_trainer.py SETTING[,SETTING...] MODEL_DIR WORK_DIR RESULT.json

Settings given together share this process, and so must share its set-up (the worker hook's patches):
RESULT.json maps each to its result.

verl and Trinity assume a GPU in a few places that have nothing to do with what is tested here (the
attention, the log-probs, the weight hand-over); the shims below stand in for those, and only those:
verl registers its FSDP engine for cuda and npu only, Trinity asks the GPU's compute capability,
FSDP2's offload pins host memory, verl reads the device's memory statistics for its logs and empties its
cache when it collects an adapter's weights, FSDP1 wants an accelerator to put its weights on and to
broadcast them from, and verl moves FSDP1's weights to
"<device>:<id>", a name the CPU does not have. And where the device is the CPU, verl's engine takes
entering train mode for a move from the CPU to the device and collects garbage each time, which it skips
on a GPU when nothing is offloaded.
"""

import json
import os
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataclasses import replace  # noqa: E402

from experiments.scales import SCALES  # noqa: E402
from experiments.trainer_speed import worker  # noqa: E402

# A batch small enough for a CPU, still of mixed lengths.
SCALES["frozenlake"] = replace(SCALES["frozenlake"], trainer_batch=6, prompt_tokens=(20, 40), reply_tokens=(4, 30))


def shim_gpu_only_calls() -> None:
    torch.cuda.get_device_capability = lambda *args: (8, 0)
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    for name in ("max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved"):
        setattr(torch.cpu, name, lambda *args, **kwargs: 0)
    torch.cpu.reset_peak_memory_stats = lambda *args, **kwargs: None
    torch.cpu.empty_cache = lambda: None
    import verl.utils.memory_utils
    import verl.workers.engine.fsdp.transformer_impl as fsdp_impl
    import verl.workers.engine_workers
    from verl.utils.fsdp_utils import fsdp_version
    from verl.workers.engine import EngineRegistry

    verl.utils.memory_utils.aggressive_empty_cache = lambda *args, **kwargs: None
    fsdp1_init = fsdp_impl.FSDP.__init__

    def fsdp1_on_cpu(self, *args, **kwargs):  # one rank: nothing to broadcast
        fsdp1_init(self, *args, **{**kwargs, "device_id": torch.device("cpu"), "sync_module_states": False})

    fsdp_impl.FSDP.__init__ = fsdp1_on_cpu
    fsdp_impl.gc = types.SimpleNamespace(collect=lambda *args: 0)
    to_gpu = fsdp_impl.load_fsdp_model_to_gpu
    fsdp_impl.load_fsdp_model_to_gpu = lambda model: None if fsdp_version(model) == 1 else to_gpu(model)
    verl.workers.engine_workers.aggressive_empty_cache = lambda *args, **kwargs: None
    for backend in ("fsdp", "fsdp2"):
        EngineRegistry._engines["language_model"][backend]["cpu"] = fsdp_impl.FSDPEngineWithLMHead
    # verl would ask for "cpu:gloo,cpu:nccl" here: one gloo group instead
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(worker.free_port()))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)


if __name__ == "__main__":
    settings, model, work, out = sys.argv[1].split(","), *sys.argv[2:5]
    if len({worker.SETTINGS[setting]["old_setup"] for setting in settings}) != 1:
        sys.exit(f"settings {settings} set their process up differently: give them one process each")
    worker.setup_worker_process(settings[0])  # first, as Ray's hook runs before anything is imported
    shim_gpu_only_calls()
    results = {setting: worker.run_setting("frozenlake", setting, Path(model), Path(work) / setting, steps=1,
                                           profile=True)
               for setting in settings}
    Path(out).write_text(json.dumps(results))
