"""Colocated weight sync: in the engine's dtype, through Ray's object store without pickling.

On one GPU Trinity syncs weights through Ray's object store (`synchronizer.sync_method: memory`):
after a step the trainer gathers the full state dict to the CPU and hands it to the Synchronizer
actor, from which the vLLM engine streams it tensor by tensor, casting each to its own dtype.

* `use_engine_dtype` casts on the trainer's GPU instead, in the one gather Trinity's
  `fsdp_upload_state_dict` makes, when the launcher has set `WEIGHT_SYNC_DTYPE_ENV` to the engine's dtype: the
  same values reach the engine, and every copy on the way is half the size of fp32. Integer and
  boolean buffers are left as they are.
* `send_uploads_as_views` and `synchronizer_sends_views` ship the tensors as numpy byte views,
  which Ray writes to the object store directly and a reader maps without a copy, where a torch
  tensor would be pickled. Only these two hand-overs change; Ray's own switch
  (RAY_ENABLE_ZERO_COPY_TORCH_TENSORS) would apply to every tensor of the run. The engine only
  reads what it gets: it copies each tensor onto the GPU.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from types import ModuleType

from rftkit.patches import WEIGHT_SYNC_DTYPE_ENV
from rftkit.patches.apply import replace

CASTS = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}


def full_state_dict_as(model, dtype, offload_to_cpu: bool = True, rank0_only: bool = True) -> dict:
    """verl's `get_fsdp_full_state_dict`, with floating-point tensors cast to `dtype` on the GPU.

    The full tensors are gathered on the GPU (FSDP1 or FSDP2), then each is cast and copied out in turn.
    """
    import torch
    from verl.utils.fsdp_utils import get_fsdp_full_state_dict

    state = get_fsdp_full_state_dict(model, offload_to_cpu=False, rank0_only=rank0_only)
    keep = not rank0_only or not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    out = {}
    for name in list(state):
        tensor = state.pop(name)
        tensor = tensor.to(dtype) if tensor.is_floating_point() else tensor  # the fp32 copy is freed once cast
        if keep:
            out[name] = tensor.cpu() if offload_to_cpu else tensor
    return out


def use_engine_dtype(fsdp_engine: ModuleType) -> None:
    """Make `trinity.trainer.verl.fsdp_engine.fsdp_upload_state_dict` gather in the engine's dtype, the 16-bit dtype
    the launcher set in `WEIGHT_SYNC_DTYPE_ENV` (any other value: Trinity's own gather)."""
    dtype_name = CASTS.get(os.environ.get(WEIGHT_SYNC_DTYPE_ENV, "").lower())
    if dtype_name is None:
        return
    import torch

    dtype = getattr(torch, dtype_name)

    def in_dtype(original):
        def get_fsdp_full_state_dict(model, **kwargs):
            return full_state_dict_as(model, dtype, **kwargs)
        return get_fsdp_full_state_dict

    replace("weight_sync.engine_dtype", fsdp_engine, "get_fsdp_full_state_dict", in_dtype)


def tensor_as_view(tensor) -> tuple:
    """A CPU tensor as (uint8 numpy view of its bytes, dtype name, shape): what Ray stores without pickling."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy(), str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)


def tensor_from_view(parts: tuple):
    """The tensor back, over the object store's memory: read it, do not write it."""
    import torch

    array, dtype, shape = parts
    with warnings.catch_warnings():  # the array is read-only; torch says so once per process
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array).view(getattr(torch, dtype)).reshape(shape)


def register_views() -> None:
    """From now on, this process sends torch tensors through Ray as byte views."""
    import ray
    import torch

    ray.util.register_serializer(torch.Tensor, serializer=tensor_as_view, deserializer=tensor_from_view)


@contextlib.contextmanager
def tensors_as_views():
    """Tensors sent through Ray inside the block go as byte views; Ray's default again after it."""
    import ray
    import torch

    register_views()
    try:
        yield
    finally:
        ray.util.deregister_serializer(torch.Tensor)


def send_uploads_as_views(fsdp_engine: ModuleType) -> None:
    """Make Trinity's `fsdp_upload_state_dict` send the state dict as byte views, and only it."""
    def as_views(upload):
        def upload_as_views(*args, **kwargs):
            with tensors_as_views():
                return upload(*args, **kwargs)
        return upload_as_views

    replace("weight_sync.upload_as_views", fsdp_engine, "fsdp_upload_state_dict", as_views)


def synchronizer_sends_views(synchronizer: ModuleType) -> None:
    """Make the Synchronizer's process send tensors as byte views once it first hands weights out.
    The methods run only in the Synchronizer actor, which sends no other tensors."""
    def iterate_as_views(iterate):
        def get_model_state_dict_iterator(self):
            register_views()
            yield from iterate(self)
        return get_model_state_dict_iterator

    def get_as_views(get):
        def get_model_state_dict(self):
            register_views()
            return get(self)
        return get_model_state_dict

    patch = "weight_sync.synchronizer_views"
    replace(patch, synchronizer, "Synchronizer.get_model_state_dict_iterator", iterate_as_views)
    replace(patch, synchronizer, "Synchronizer.get_model_state_dict", get_as_views)
