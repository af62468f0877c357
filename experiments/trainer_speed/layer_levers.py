"""Two levers on the trainer model's decoder layers, applied just before verl's FSDP engine shards a model (actor
and reference), each off unless a trainer worker's environment asks for it. The trainer benchmark measures them;
verl 0.8.0 has a switch for neither.

* `RFTKIT_CHECKPOINT_EVERY=N` (N > 1): gradient checkpointing on every N-th decoder layer only, where Trinity's
  loader turned it on for all (transformers' own `every_n_layers`). The other layers keep their activations:
  faster backward passes, for more memory.
* `RFTKIT_COMPILE_LAYERS` ("1": inductor; or a torch.compile backend's name): each decoder layer compiled, in
  place (`Module.compile`), so that it keeps its class, by which FSDP2's wrap policy finds it, and its parameter
  names, which checkpoints and the weight sync use; with dynamic shapes, since a packed micro-batch has a new
  length every time. transformers (5.x) checkpoints inside the layer's forward, so each graph holds its
  checkpoint (dynamo traces it as a higher-order op); FSDP2's hooks run eagerly (dynamo skips them by default).
  The project's packed attention reads the sequence boundaries on the host, so a layer's graph breaks there.
  Not with liger-kernel's layers (verl's `use_liger`) and checkpointing together: dynamo (torch 2.11) fails on
  liger's autograd functions inside the checkpoint, at the first step, so the patch refuses the pair at once.

verl 0.8.0's `use_torch_compile` compiles only the entropy function.
"""

from __future__ import annotations

import os
from types import ModuleType

from rftkit.patches import CHECKPOINT_EVERY_ENV, COMPILE_LAYERS_ENV
from rftkit.patches.apply import replace

def compile_backend() -> str | None:
    """The torch.compile backend the environment asks for, or None (off)."""
    value = os.environ.get(COMPILE_LAYERS_ENV, "")
    return None if value in ("", "0") else "inductor" if value == "1" else value


def checkpoint_every() -> int:
    """Every how many decoder layers one is checkpointed (1: all, transformers' and Trinity's way)."""
    value = os.environ.get(CHECKPOINT_EVERY_ENV, "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{CHECKPOINT_EVERY_ENV}={value!r}: expected a whole number of layers, 1 or more")
    return int(value)


def decoder_layers(model) -> list:
    """The model's decoder layers: the modules of the classes it names in `_no_split_modules`, as FSDP wraps them."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [module for module in model.modules() if type(module).__name__ in names]


def from_environment(module: ModuleType) -> None:
    """The levers the environment asks for (rftkit.patches switches this patch on only where it asks for one)."""
    before_sharding(module, compile_backend(), checkpoint_every())


def before_sharding(module: ModuleType, backend: str | None, every: int) -> None:
    """Patch verl 0.8.0's FSDPEngine: checkpoint every `every`-th layer only, and compile the layers with
    `backend` (None: not), in each model just before it is sharded."""

    def with_levers(build):
        def _build_fsdp_module(self, fsdp_module):
            layers = decoder_layers(fsdp_module)
            if not layers:
                raise RuntimeError(f"rftkit.trainer.layer_levers: {type(fsdp_module).__name__} names no decoder "
                                   f"layers in _no_split_modules")
            if every > 1 and getattr(fsdp_module, "is_activation_checkpointing", False):
                fsdp_module.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False},
                                                            every_n_layers=every)  # as Trinity's loader, but sparser
            if backend is not None:
                if self.model_config.use_liger and fsdp_module.is_activation_checkpointing:
                    raise RuntimeError(f"rftkit.trainer.layer_levers: {COMPILE_LAYERS_ENV} with liger-kernel's "
                                       f"layers and gradient checkpointing: dynamo cannot trace liger's autograd "
                                       f"functions inside a checkpoint; turn off use_liger, the checkpointing or "
                                       f"{COMPILE_LAYERS_ENV}")
                for layer in layers:
                    layer.compile(backend=backend, dynamic=True)
            return build(self, fsdp_module)
        return _build_fsdp_module

    replace("layer_levers", module, "FSDPEngine._build_fsdp_module", with_levers)
