"""Colocated weight sync in the engine's dtype: half the bytes of Trinity's fp32 hand-over.

On one GPU Trinity syncs weights through Ray's object store (`synchronizer.sync_method:
memory`): after a step the trainer gathers the full state dict to the CPU and hands it to the
Synchronizer actor, from which the vLLM engine streams it tensor by tensor. The trainer's master
weights are fp32, so for a 3B model that is 12 GB per copy, and the engine casts every tensor to
its own dtype (bf16) on arrival anyway. Here the trainer casts on the GPU, before anything
leaves it: the engine ends up with the same bf16 values (the same round-to-nearest cast, done
earlier), and every copy on the way is half as large.

`use_engine_dtype` changes the one gather that Trinity's `fsdp_upload_state_dict` makes, in
trainer processes (rftkit.colocate's worker setup), when the launcher has set `DTYPE_ENV` to the
rollout engine's dtype. Integer and boolean buffers are left as they are.
"""

from __future__ import annotations

import os
from types import ModuleType

from rftkit.import_patch import source_has

TRINITY_VERSION = "0.6.0"  # the Trinity-RFT this patch was written against
FSDP_ENGINE = "trinity.trainer.verl.fsdp_engine"
DTYPE_ENV = "RFTKIT_WEIGHT_SYNC_DTYPE"  # set by the launcher to explorer.rollout_model.dtype
CASTS = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}
# Trinity's call that gathers the weights for the Synchronizer.
GATHER_CALL = "get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)"


def full_state_dict_as(model, dtype, offload_to_cpu: bool = True, rank0_only: bool = True) -> dict:
    """verl's `get_fsdp_full_state_dict`, with floating-point tensors cast to `dtype` on the GPU.

    For FSDP2 (Trinity's default) the full tensors are gathered on the GPU, then each is cast and
    copied out in turn; other FSDP versions are gathered by verl and cast on the CPU.
    """
    import torch
    from verl.utils.fsdp_utils import fsdp_version, get_fsdp_full_state_dict

    def cast(tensor):
        return tensor.to(dtype) if tensor.is_floating_point() else tensor

    if fsdp_version(model) != 2:
        state = get_fsdp_full_state_dict(model, offload_to_cpu=offload_to_cpu, rank0_only=rank0_only)
        return {name: cast(tensor) for name, tensor in state.items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
    keep = not rank0_only or not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    out = {}
    for name in list(state):
        tensor = cast(state.pop(name))  # the fp32 copy is freed as soon as its cast exists
        if keep:
            out[name] = tensor.cpu() if offload_to_cpu else tensor
    return out


def use_engine_dtype(fsdp_engine: ModuleType) -> None:
    """Make `trinity.trainer.verl.fsdp_engine.fsdp_upload_state_dict` gather in the engine's dtype.

    Does nothing unless the launcher set `DTYPE_ENV` to a 16-bit dtype. Stops the worker if
    Trinity no longer gathers the upload through the call this was written for.
    """
    dtype_name = CASTS.get(os.environ.get(DTYPE_ENV, "").lower())
    if dtype_name is None:
        return
    upload = getattr(fsdp_engine, "fsdp_upload_state_dict", None)
    if not source_has(upload, GATHER_CALL) or not hasattr(fsdp_engine, "get_fsdp_full_state_dict"):
        raise RuntimeError(
            f"rftkit.weight_sync was written against Trinity-RFT {TRINITY_VERSION}, whose "
            f"fsdp_upload_state_dict gathers with {GATHER_CALL}; this Trinity does not, so the "
            f"bf16 weight sync cannot apply: update rftkit/weight_sync.py or unset {DTYPE_ENV}")
    import torch

    dtype = getattr(torch, dtype_name)
    fsdp_engine.get_fsdp_full_state_dict = lambda model, **kwargs: full_state_dict_as(model, dtype, **kwargs)
