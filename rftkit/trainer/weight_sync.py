"""Colocated weight sync: in the engine's dtype, through Ray's object store without pickling.

On one GPU Trinity syncs weights through Ray's object store (`synchronizer.sync_method: memory`):
after a step the trainer gathers the full state dict to the CPU and hands it to the Synchronizer
actor, from which the vLLM engine streams it tensor by tensor, casting each to its own dtype.

* `use_engine_dtype` casts on the trainer's GPU instead, in the one gather Trinity's
  `fsdp_upload_state_dict` makes, when the launcher has set `DTYPE_ENV` to the engine's dtype: the
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
import functools
import os
import warnings
from types import ModuleType

from rftkit.trainer.import_patch import source_has

TRINITY_VERSION = "0.6.0"  # the Trinity-RFT this patch was written against
FSDP_ENGINE = "trinity.trainer.verl.fsdp_engine"
DTYPE_ENV = "RFTKIT_WEIGHT_SYNC_DTYPE"  # set by the launcher to explorer.rollout_model.dtype, unless set to 0
CASTS = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}
# Trinity's call that gathers the weights for the Synchronizer.
GATHER_CALL = "get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)"
# Trinity's call that hands the gathered weights to the Synchronizer.
UPLOAD_CALL = "synchronizer.set_model_state_dict.remote(state_dict, global_step)"
SYNCHRONIZER = "trinity.manager.synchronizer"
# The Synchronizer's methods that return weights to the engine.
SYNCHRONIZER_SENDS = ("get_model_state_dict_iterator", "get_model_state_dict")


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
            f"rftkit.trainer.weight_sync was written against Trinity-RFT {TRINITY_VERSION}, whose "
            f"fsdp_upload_state_dict gathers with {GATHER_CALL}; this Trinity does not, so the "
            f"bf16 weight sync cannot apply: update rftkit/trainer/weight_sync.py, or set {DTYPE_ENV}=0 in the "
            f"launch's environment for Trinity's own sync")
    import torch

    dtype = getattr(torch, dtype_name)
    fsdp_engine.get_fsdp_full_state_dict = lambda model, **kwargs: full_state_dict_as(model, dtype, **kwargs)


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
    upload = getattr(fsdp_engine, "fsdp_upload_state_dict", None)
    if getattr(upload, "sends_views", False):
        return
    if not source_has(upload, UPLOAD_CALL):
        raise RuntimeError(
            f"rftkit.trainer.weight_sync was written against Trinity-RFT {TRINITY_VERSION}, whose "
            f"fsdp_upload_state_dict sends the weights with {UPLOAD_CALL}; this Trinity does not: "
            f"update rftkit/trainer/weight_sync.py")

    @functools.wraps(upload)
    def upload_as_views(*args, **kwargs):
        with tensors_as_views():
            return upload(*args, **kwargs)

    upload_as_views.sends_views = True
    fsdp_engine.fsdp_upload_state_dict = upload_as_views


def synchronizer_sends_views(synchronizer: ModuleType) -> None:
    """Make the Synchronizer's process send tensors as byte views once it first hands weights out.

    The methods run only in the Synchronizer actor, which sends no other tensors."""
    cls = getattr(synchronizer, "Synchronizer", None)
    missing = [name for name in SYNCHRONIZER_SENDS if not callable(getattr(cls, name, None))]
    if missing:
        raise RuntimeError(
            f"rftkit.trainer.weight_sync was written against Trinity-RFT {TRINITY_VERSION}, whose Synchronizer "
            f"hands weights out through {', '.join(SYNCHRONIZER_SENDS)}; this one has no {', '.join(missing)}: "
            f"update rftkit/trainer/weight_sync.py")
    iterate, get = (getattr(cls, name) for name in SYNCHRONIZER_SENDS)
    if getattr(iterate, "sends_views", False):
        return

    @functools.wraps(iterate)
    def iterate_as_views(self):
        register_views()
        yield from iterate(self)

    @functools.wraps(get)
    def get_as_views(self):
        register_views()
        return get(self)

    iterate_as_views.sends_views = get_as_views.sends_views = True
    cls.get_model_state_dict_iterator, cls.get_model_state_dict = iterate_as_views, get_as_views
