"""The Trinity-RFT config keys the project reads or writes, by their dotted paths, and the one way to follow
a path through a YAML mapping: `get`, `has` and `put`. Imports nothing of the project, so the launcher,
the workers' modules and the benchmarks can all use it.

A path names mappings by key and list items by index: "buffer.eval_tasksets.0.path".
"""

from __future__ import annotations

from typing import Any

# The trainer: its attention, padding removal, layers, sharding, checkpointing and reference model.
ATTN_KEY = "trainer.trainer_config.model.override_config.attn_implementation"
PADDING_KEY = "trainer.use_remove_padding"
LIGER_KEY = "trainer.trainer_config.model.use_liger"
FUSED_KEY = "trainer.trainer_config.model.use_fused_kernels"  # verl's fused output layer and log-softmax
FUSED_BACKEND_KEY = "trainer.trainer_config.model.fused_kernel_options.impl_backend"
# verl's sharding of the trainer's models: "fsdp2" (Trinity-RFT 0.6.0's default) or "fsdp" (FSDP1: each wrapped
# layer's weights in one flat tensor, on one rank unsharded)
STRATEGY_KEY = "trainer.trainer_strategy"
# FSDP1's `use_orig_params` for the actor: its parameters keep their own names and dtypes beside the flat tensors
ORIG_PARAMS_KEY = "trainer.trainer_config.actor.fsdp_config.use_orig_params"
# verl's activation checkpointing, as Trinity-RFT 0.6.0 merges trainer_config's `model` section into verl's (on
# unless set)
CHECKPOINTING_KEY = "trainer.trainer_config.model.enable_gradient_checkpointing"
REF_DTYPE_KEY = "trainer.trainer_config.ref.fsdp_config.model_dtype"
REF_OFFLOAD_KEY = "trainer.trainer_config.ref.fsdp_config.param_offload"  # rftkit.trainer.ref_model reads it
# FSDP2's `reshard_after_forward` for the actor (Trinity-RFT 0.6.0 sets it true): false keeps each layer's gathered
# bf16 weights from its forward to its backward, so the recompute and the backward do not gather them again
RESHARD_KEY = "trainer.trainer_config.actor.fsdp_config.reshard_after_forward"
OPTIMIZER_ARGS_KEY = "trainer.trainer_config.actor.optim.override_optimizer_config"  # added to verl's AdamW
# The model: its path and Trinity's LoRA adapters (one).
MODEL_PATH_KEY = "model.model_path"
LORA_KEY = "model.lora_configs"
# The tasks.
TRAIN_TASKSET_PATH_KEY = "buffer.explorer_input.taskset.path"


class KeyPathError(LookupError):
    """A path that cannot be followed or written in a config; the message says where it stops."""


def _child(node: Any, key: str) -> tuple[bool, Any]:
    if isinstance(node, dict):
        return key in node, node.get(key)
    if isinstance(node, list) and key.isdigit():
        return int(key) < len(node), node[int(key)] if int(key) < len(node) else None
    return False, None


_ABSENT = object()


def has(config: dict, dotted: str) -> bool:
    """Whether `config` has a value (None included) at `dotted`."""
    return get(config, dotted, _ABSENT) is not _ABSENT


def get(config: dict, dotted: str, default: Any = None) -> Any:
    """The value at `dotted`, or `default` where the config has none."""
    node = config
    for key in dotted.split("."):
        found, node = _child(node, key)
        if not found:
            return default
    return node


def put(config: dict, dotted: str, value: Any) -> None:
    """Set the value at `dotted`, creating the mappings it lacks (never a list, nor an item of one). A path that
    cannot be written is refused before anything is."""
    parts = dotted.split(".")
    node, path = config, []
    for index, key in enumerate(parts[:-1]):
        if isinstance(node, list):
            node = _item(node, key, path)
        elif not isinstance(node, dict):
            raise KeyPathError(f"the config's {'.'.join(path)} is {type(node).__name__}, not a mapping")
        elif key not in node:  # the rest is made of new mappings: no list item can be in it
            rest = parts[index + 1:]
            if any(part.isdigit() for part in rest):
                at = index + 1 + next(i for i, part in enumerate(rest) if part.isdigit())
                raise KeyPathError(f"the config's {'.'.join(parts[:at])} is not a list")
            for new in parts[index:-1]:
                node = node.setdefault(new, {})
            node[parts[-1]] = value
            return
        else:
            node = node[key]
        path.append(key)
    if isinstance(node, list):
        _item(node, parts[-1], path)
        node[int(parts[-1])] = value
    elif isinstance(node, dict):
        node[parts[-1]] = value
    else:
        raise KeyPathError(f"the config's {'.'.join(path)} is {type(node).__name__}, not a mapping")


def _item(items: list, key: str, path: list[str]) -> Any:
    if not key.isdigit():
        raise KeyPathError(f"the config's {'.'.join(path)} is a list: {key!r} is not an item's number")
    if int(key) >= len(items):
        raise KeyPathError(f"the config's {'.'.join(path)} is a list of {len(items)}, items 0 to {len(items) - 1}")
    return items[int(key)]
