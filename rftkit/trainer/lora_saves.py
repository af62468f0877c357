"""A LoRA run's saves: the adapter, not the model, goes to the engine; checkpoints keep the adapter, not the
base model; and the adapter written is whole.

With an adapter, Trinity-RFT 0.6.0's vLLM engine never loads weights a sync sends: at each new
model version it loads `<job>/global_step_N/actor/lora_adapter` from disk (`vllm_model.sync_model_weights`).
Trinity's checkpoint sync writes that folder, but writes the whole model's state dict beside it every
time (`TrinityActorRolloutRefWorker.save_state_dict`), which the engine does not read; its memory sync,
which a colocated run gets, writes no adapter at all, so the engine would look for a folder that is never
there. The launcher therefore gives a LoRA run the checkpoint sync (rftkit.lora), and `adapter_only`
makes its state-dict save write the adapter alone, with the checkpoint monitor told as before, so that
the Synchronizer picks the new version up and removes the previous one.

verl's checkpoints (`FSDPCheckpointManager`) hold every rank's shard of the model's state dict, the
frozen base model included: for Qwen2.5-3B, gigabytes a checkpoint that a resume reads back to no
purpose, since the launch loads the same base from `model.model_path`. `small_checkpoints` makes a
PEFT model's shard hold the adapter's weights alone, and its load fill the adapter from it over the
base the worker loaded, refusing a shard that lacks one of them. Optimizer, scheduler and random states
are saved as before (the optimizer holds the adapter's moments only anyway).

Trinity writes the adapter in `_save_lora`, which with PEFT 0.21 writes an adapter without a tensor: it
hands PEFT each decoder layer's state dict with the layer's own key names (verl's
`layered_summon_lora_params`), and PEFT now picks an adapter's weights by their full names in the model.
It also moves the model to a CUDA device first and logs a failure instead of raising it. `whole_adapter`
replaces it: the adapter's weights are gathered under their full names (FSDP1 or FSDP2, every rank taking
part), PEFT selects and renames them, and rank 0 writes them with PEFT's adapter config; an adapter
without a tensor stops the run.
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType

from rftkit.patches.apply import replace

ADAPTER_FOLDER = "lora_adapter"  # where Trinity's `_save_lora` writes, and its vLLM engine reads
ADAPTER_FILE = "adapter_model.safetensors"
FSDP1_WRAPPER = "_fsdp_wrapped_module."  # in the parameter names of a module FSDP1 wrapped


def unwrapped(module):
    """The model under FSDP1's wrapper (FSDP2 wraps none)."""
    return getattr(module, FSDP1_WRAPPER.rstrip("."), module)


def is_peft(module) -> bool:
    """Whether a (possibly FSDP-wrapped) model is a PEFT model: an adapter on a frozen base."""
    return hasattr(unwrapped(module), "peft_config")


def trains_adapter(worker) -> bool:
    """Whether this trainer worker's actor is a PEFT model."""
    engine = getattr(getattr(worker, "actor", None), "engine", None)
    return is_peft(getattr(engine, "module", None))


def is_adapter_key(name: str) -> bool:
    return "lora_" in name  # PEFT's LoRA weights: lora_A, lora_B (and lora_embedding_A/B)


@contextlib.contextmanager
def adapter_state_only(model):
    """Inside the block, `model.state_dict()` holds the adapter's entries alone, and `model.load_state_dict(shard)`
    of such a shard loads them over the model's own base weights: a RuntimeError names an adapter weight the
    shard lacks. A shard with base weights in it (a checkpoint saved without this) loads as before."""
    state_dict, load_state_dict = model.state_dict, model.load_state_dict

    def adapter_state_dict(*args, **kwargs):
        return {name: value for name, value in state_dict(*args, **kwargs).items() if is_adapter_key(name)}

    def load_adapter_state_dict(shard, *args, **kwargs):
        if not shard or not all(is_adapter_key(name) for name in shard):
            return load_state_dict(shard, *args, **kwargs)
        result = load_state_dict(shard, strict=False)
        if missing := [name for name in result.missing_keys if is_adapter_key(name)]:
            raise RuntimeError(f"rftkit.trainer.lora_saves: the checkpoint's model shard lacks adapter weight "
                               f"{missing[0]} ({len(missing)} in all): not this run's adapter")
        return result

    model.state_dict, model.load_state_dict = adapter_state_dict, load_adapter_state_dict
    try:
        yield
    finally:
        del model.state_dict, model.load_state_dict  # the class's methods again


def small_checkpoints(checkpoints: ModuleType) -> None:
    """Patch verl's `FSDPCheckpointManager`: a PEFT model's model shard is saved and loaded as its adapter alone
    (`adapter_state_only`); other models' as before."""
    def adapter_state(method):
        def with_adapter_state(self, *args, **kwargs):
            if self.model is None or not is_peft(self.model):
                return method(self, *args, **kwargs)
            with adapter_state_only(self.model):
                return method(self, *args, **kwargs)
        return with_adapter_state

    replace("lora.small_checkpoints", checkpoints, "FSDPCheckpointManager.save_checkpoint", adapter_state)
    replace("lora.small_checkpoints", checkpoints, "FSDPCheckpointManager.load_checkpoint", adapter_state)


def adapter_weights(module) -> dict:
    """The adapter's weights of a PEFT model under FSDP1, FSDP2 or neither, whole and on the CPU, keyed as PEFT
    saves them (`...q_proj.lora_A.weight`). A collective under FSDP: every rank calls it."""
    from peft.utils.save_and_load import get_peft_model_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from verl.utils.fsdp_utils import fsdp_version

    if fsdp_version(module) != 1:  # FSDP2's DTensors are gathered one at a time, in the same order on every rank
        return get_peft_model_state_dict(unwrapped(module), state_dict={
            name: (param.full_tensor() if hasattr(param, "full_tensor") else param).detach().cpu()
            for name, param in module.named_parameters() if is_adapter_key(name)})
    # FSDP1 wraps the adapter's layers inside the model, and PEFT picks an adapter's weights by the paths of the
    # model's own modules: they are gathered under those paths, and the wrappers' names taken out of PEFT's keys
    # (with the adapter's name, which PEFT takes out only where the path ends at the adapter's weight)
    inner = unwrapped(module)
    with FSDP.summon_full_params(module, writeback=False):
        selected = get_peft_model_state_dict(inner, state_dict={
            name: param.detach().cpu() for name, param in inner.named_parameters() if is_adapter_key(name)})
    adapter = f".{inner.active_adapter}."
    return {name.replace(FSDP1_WRAPPER, "").replace(adapter, "."): value for name, value in selected.items()}


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
            raise RuntimeError("rftkit.trainer.lora_saves: the trainer's model has an adapter but no adapter weight "
                               "was found in it; check adapter_weights against this verl and PEFT")
        folder = os.path.join(local_path, ADAPTER_FOLDER)
        os.makedirs(folder, exist_ok=True)
        unwrapped(module).peft_config["default"].save_pretrained(folder)
        target = os.path.join(folder, ADAPTER_FILE)
        save_file(weights, target + ".partial")
        os.replace(target + ".partial", target)  # there only once whole: the engine and a resume read it
    torch.distributed.barrier()


def adapter_only(workers: ModuleType) -> None:
    """Patch `TrinityActorRolloutRefWorker`: `_save_lora` is `whole_adapter`, and `save_state_dict` of a worker that
    trains an adapter saves the adapter alone; any other saves the model, as before."""
    def adapter_when_trained(save_state_dict):
        def save_adapter_state_dict(self, local_path, global_step=0):
            if not trains_adapter(self):
                return save_state_dict(self, local_path, global_step)
            import torch

            if torch.distributed.get_rank() == 0:  # the monitor counts the save, as it does the model's
                self._get_coordinator().save_sync(lambda: whole_adapter(self, local_path), global_step,
                                                  is_state_dict=True)
            else:
                whole_adapter(self, local_path)
        return save_adapter_state_dict  # wrapped by `replace`: it keeps verl's dispatch mark, which workers bind by

    def whole(original):
        def _save_lora(self, local_path: str) -> None:
            whole_adapter(self, local_path)
        return _save_lora

    replace("lora.adapter_syncs", workers, "TrinityActorRolloutRefWorker.save_state_dict", adapter_when_trained)
    replace("lora.adapter_syncs", workers, "TrinityActorRolloutRefWorker._save_lora", whole)
