"""LoRA's weight sync: the adapter, not the model, goes to the engine, and the adapter written is whole.

With an adapter, Trinity-RFT 0.6.0's vLLM engine never loads weights a sync sends: at each new
model version it loads `<job>/global_step_N/actor/lora_adapter` from disk (`vllm_model.sync_model_weights`).
Trinity's checkpoint sync writes that folder, but writes the whole model's state dict beside it every
time (`TrinityActorRolloutRefWorker.save_state_dict`), which the engine does not read; its memory sync,
which a colocated run gets, writes no adapter at all, so the engine would look for a folder that is never
there. The launcher therefore gives a LoRA run the checkpoint sync (rftkit.lora), and `adapter_only`
makes its state-dict save write the adapter alone, with the checkpoint monitor told as before, so that
the Synchronizer picks the new version up and removes the previous one. A full checkpoint
(`save_checkpoint`) still holds the model and its optimizer, what a resume needs, and the adapter.

Trinity writes the adapter in `_save_lora`, which with PEFT 0.21 writes an adapter without a tensor: it
hands PEFT each decoder layer's state dict with the layer's own key names (verl's
`layered_summon_lora_params`), and PEFT now picks an adapter's weights by their full names in the model.
It also moves the model to a CUDA device first and logs a failure instead of raising it. `whole_adapter`
replaces it: the adapter's weights are gathered under their full names (FSDP1 or FSDP2, every rank taking
part), PEFT selects and renames them, and rank 0 writes them with PEFT's adapter config; an adapter
without a tensor stops the run.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType

from rftkit.trainer.import_patch import patch_on_import, source_has

WORKERS = "trinity.trainer.verl.workers"  # written against Trinity-RFT 0.6.0
TRINITY_VERSION = "0.6.0"
ADAPTER_FOLDER = "lora_adapter"  # where Trinity's `_save_lora` writes, and its vLLM engine reads
ADAPTER_FILE = "adapter_model.safetensors"
SAVES_ADAPTER = "lora_save_path = os.path.join(local_path, \"lora_adapter\")"  # in `_save_lora`
STREAMS_MODEL = "per_tensor_param, _ = self.actor.engine.get_per_tensor_param()"  # in `save_state_dict`


def trains_adapter(worker) -> bool:
    """Whether this trainer worker's actor is a PEFT model (an adapter on a frozen base)."""
    engine = getattr(getattr(worker, "actor", None), "engine", None)
    module = getattr(engine, "module", None)
    return hasattr(getattr(module, "_fsdp_wrapped_module", module), "peft_config")


def adapter_weights(module) -> dict:
    """The adapter's weights of a PEFT model under FSDP1, FSDP2 or neither, whole and on the CPU, keyed as PEFT
    saves them (`...q_proj.lora_A.weight`). A collective under FSDP: every rank calls it."""
    from peft.utils.save_and_load import get_peft_model_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from verl.utils.fsdp_utils import fsdp_version

    peft_model = getattr(module, "_fsdp_wrapped_module", module)

    def gathered() -> dict:  # FSDP2's DTensors are gathered one at a time, in the same order on every rank
        return {name.replace("_fsdp_wrapped_module.", ""):
                (param.full_tensor() if hasattr(param, "full_tensor") else param).detach().cpu()
                for name, param in module.named_parameters() if "lora_" in name}

    if fsdp_version(module) == 1:
        with FSDP.summon_full_params(module, writeback=False):
            return get_peft_model_state_dict(peft_model, state_dict=gathered())
    return get_peft_model_state_dict(peft_model, state_dict=gathered())


def whole_adapter(worker, local_path: str) -> None:
    """`_save_lora`'s replacement: the adapter at <local_path>/lora_adapter, as PEFT saves one."""
    import torch
    from safetensors.torch import save_file

    if not trains_adapter(worker):
        return
    module = worker.actor.engine.module
    weights = adapter_weights(module)
    if torch.distributed.get_rank() == 0:
        if not weights:
            raise RuntimeError("rftkit.trainer.lora_sync: the trainer's model has an adapter but no adapter weight "
                               "was found in it; check adapter_weights against this verl and PEFT")
        from rftkit.files import atomic_paths

        folder = os.path.join(local_path, ADAPTER_FOLDER)
        os.makedirs(folder, exist_ok=True)
        getattr(module, "_fsdp_wrapped_module", module).peft_config["default"].save_pretrained(folder)
        with atomic_paths(os.path.join(folder, ADAPTER_FILE)) as (path,):  # there only once whole: the engine reads it
            save_file(weights, str(path))
    torch.distributed.barrier()


def adapter_only(workers: ModuleType) -> None:
    """Patch `TrinityActorRolloutRefWorker`: `_save_lora` is `whole_adapter`, and `save_state_dict` of a worker that
    trains an adapter saves the adapter alone; any other saves the model, as before. Stops the worker if
    Trinity's methods moved."""
    worker_class = workers.TrinityActorRolloutRefWorker
    save_state_dict = worker_class.save_state_dict
    if getattr(save_state_dict, "adapter_only", False):
        return
    if not (source_has(save_state_dict, STREAMS_MODEL) and source_has(getattr(worker_class, "_save_lora", None),
                                                                       SAVES_ADAPTER)):
        raise RuntimeError(f"rftkit.trainer.lora_sync was written against Trinity-RFT {TRINITY_VERSION}, whose "
                           f"worker saves a sync's weights in save_state_dict and the adapter in _save_lora at "
                           f"<path>/{ADAPTER_FOLDER}; this Trinity does not, so a LoRA run's sync cannot be made "
                           f"adapter-only: check rftkit/trainer/lora_sync.py against it")

    @functools.wraps(save_state_dict)  # keeps verl's dispatch mark, which the worker group binds by
    def save_adapter_state_dict(self, local_path, global_step=0):
        if not trains_adapter(self):
            return save_state_dict(self, local_path, global_step)
        import torch

        if torch.distributed.get_rank() == 0:  # the monitor counts the save, as it does the model's
            self._get_coordinator().save_sync(lambda: whole_adapter(self, local_path), global_step, is_state_dict=True)
        else:
            whole_adapter(self, local_path)

    save_adapter_state_dict.adapter_only = True
    worker_class.save_state_dict = save_adapter_state_dict
    worker_class._save_lora = whole_adapter


def worker_setup() -> None:
    """In a Ray worker: patch Trinity's trainer worker once it is imported (it does nothing without an adapter)."""
    patch_on_import(WORKERS, adapter_only)
