"""torch.compile of the trainer's decoder layers: a lever the trainer benchmark measures, off unless asked for.

verl 0.8.0 has no switch for it: its `use_torch_compile` compiles the entropy function alone. With
`RFTKIT_COMPILE_LAYERS` set in a trainer worker's environment ("1": inductor; or a torch.compile backend's
name), `worker_setup` makes verl's FSDP engine compile each decoder layer of every model it builds (actor and
reference) just before FSDP shards it, so after Trinity's loader has turned gradient checkpointing on:

* in place (`Module.compile`), so that the layer keeps its class, by which FSDP2's wrap policy finds it, and
  its parameter names, which checkpoints and the weight sync use;
* with dynamic shapes, since a packed micro-batch has a new length every time;
* transformers (5.x) applies gradient checkpointing inside the layer's forward, so each graph holds the
  checkpoint (dynamo traces it as a higher-order op and recomputes within the graph); FSDP2's hooks run
  eagerly (torch._dynamo skips them by default).

The project's packed attention reads the sequence boundaries on the host, so a layer's graph breaks around it.
"""

from __future__ import annotations

import os
from types import ModuleType

from rftkit.trainer.import_patch import patch_on_import, source_has

SWITCH_ENV = "RFTKIT_COMPILE_LAYERS"
FSDP_IMPL = "verl.workers.engine.fsdp.transformer_impl"  # written against verl 0.8.0
# What the patch relies on in FSDPEngine._build_model_optimizer: the model, loaded (checkpointing on), goes
# through _build_fsdp_module, which shards it.
BUILDS_THEN_SHARDS = ("module = self._build_module()", "module = self._build_fsdp_module(module)")


def backend() -> str | None:
    """The torch.compile backend the environment asks for, or None (off)."""
    value = os.environ.get(SWITCH_ENV, "")
    return None if value in ("", "0") else "inductor" if value == "1" else value


def decoder_layers(model) -> list:
    """The model's decoder layers: the modules of the classes it names in `_no_split_modules`, as FSDP wraps them."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [module for module in model.modules() if type(module).__name__ in names]


def compile_before_sharding(module: ModuleType, backend_name: str = "inductor") -> None:
    """Patch verl 0.8.0's FSDPEngine: compile a model's decoder layers in place before it is sharded."""
    engine = module.FSDPEngine
    build = engine._build_fsdp_module
    if getattr(build, "compiles_layers", False):
        return
    if not all(source_has(engine._build_model_optimizer, line) for line in BUILDS_THEN_SHARDS):
        raise RuntimeError(f"rftkit.trainer.compile_layers: {FSDP_IMPL}.FSDPEngine._build_model_optimizer no "
                           f"longer loads the model and then shards it as verl 0.8.0 did; this patch must be "
                           f"checked against it (or unset {SWITCH_ENV})")

    def _build_fsdp_module(self, fsdp_module):
        layers = decoder_layers(fsdp_module)
        if not layers:
            raise RuntimeError(f"{SWITCH_ENV}: {type(fsdp_module).__name__} names no decoder layers in "
                               f"_no_split_modules to compile")
        for layer in layers:
            layer.compile(backend=backend_name, dynamic=True)
        return build(self, fsdp_module)

    _build_fsdp_module.compiles_layers = True
    engine._build_fsdp_module = _build_fsdp_module


def worker_setup() -> None:
    """In a Ray worker whose environment asks for it: compile the layers of the models verl's FSDP engine builds."""
    name = backend()
    if name is not None:
        patch_on_import(FSDP_IMPL, lambda module: compile_before_sharding(module, name))
