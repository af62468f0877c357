"""The YAML a launch starts from, and what the command line changes in it.

`--set KEY=VALUE` (`parse_override`, `set_key`), reading and writing the YAML, and
`resolve_config`: the mapping tune() will load, with the overrides and the cluster plan
(`rftkit.cluster`) applied and every path made absolute, since Ray workers do not share our
working directory.
"""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Any

import yaml

from rftkit import cluster
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError

# A model path that absolute() kept as it was and that is not a hub id ("gpt2", "Qwen/Qwen3-0.6B") was meant
# as a local folder ("models/qwen/final"); one that does not exist is refused before anything starts.
HUB_ID = re.compile(r"[^/]+(/[^/]+)?")


def parse_override(text: str) -> tuple[str, Any]:
    """ "a.b=1" -> ("a.b", 1); the value is parsed as YAML, so numbers, booleans and lists keep their type."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{key}: the value {value!r} is not valid YAML ({exc})") from None


def set_key(config: dict, dotted: str, value: Any) -> None:
    """Set `config["a"]["b"][0]["c"]` from "a.b.0.c", creating missing mappings."""
    *parents, last = dotted.split(".")
    node = config
    try:
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    except (ValueError, IndexError, AttributeError, TypeError):
        raise InputError(f"cannot set {dotted}: the config has no such place") from None


def get_key(config: dict, dotted: str, config_file: str) -> Any:
    """`config["a"]["b"]` for "a.b", or exit naming the key that `config_file` lacks."""
    node = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            raise InputError(f"{config_file}: no key {dotted} (expected a Trinity-RFT config like those in configs/)")
        node = node[key]
    return node


def absolute(path: str, maybe_hub_id: bool = False) -> str:
    """`path` made absolute against the working directory.

    With `maybe_hub_id`, a relative path that does not exist and does not start
    with "." or "~" is taken for a hub id ("Qwen/Qwen2.5-3B-Instruct") and kept.
    """
    candidate = Path(path).expanduser()
    if maybe_hub_id and not (candidate.is_absolute() or path.startswith((".", "~")) or candidate.exists()):
        return path
    return str(candidate.resolve())


def load_yaml(path: str | Path) -> dict:
    """The YAML mapping at `path`, or exit with a message naming the flag."""
    try:
        config = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:  # a folder, an unreadable or a binary file
        raise InputError(f"--config {path}: cannot read it as text ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"--config {path}: not valid YAML{where} ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"--config {path}: expected a YAML mapping of Trinity-RFT settings")
    return config


# The reference model only runs forward passes, in bf16 under FSDP's mixed precision. Trinity 0.6 keeps
# its weights in fp32, and verl keeps a forward-only model's weights on the CPU and copies them to the GPU
# for every micro-batch (FSDP2's CPUOffloadPolicy): in bf16 that copy is half as large, the log-probs the
# same. A value in the YAML or --set is kept.
REF_DTYPE_KEY = "trainer.trainer_config.ref.fsdp_config.model_dtype"
REF_DTYPE = "bfloat16"


def resolve_config(config: dict, overrides: dict[str, Any], plan: dict,
                   config_file: str = "the config") -> dict:
    """The YAML mapping tune() will load: overrides and cluster plan applied, paths absolute.

    A local model folder that does not exist, or a checkpoint folder that
    cannot be written, is refused here, before anything starts.
    """
    config = copy.deepcopy(config)
    for dotted, value in overrides.items():
        set_key(config, dotted, value)
    try:
        get_key(config, REF_DTYPE_KEY, config_file)
    except InputError:
        set_key(config, REF_DTYPE_KEY, REF_DTYPE)
    config["checkpoint_root_dir"] = absolute(config.get("checkpoint_root_dir", "./checkpoints"))
    check_writable(config["checkpoint_root_dir"], "checkpoint_root_dir (--checkpoint-dir)")
    model_path = absolute(get_key(config, "model.model_path", config_file), maybe_hub_id=True)
    if not Path(model_path).exists() and not HUB_ID.fullmatch(model_path):
        raise InputError(f"model.model_path (--model-path) {model_path}: no such folder "
                         f"(expected a local model folder or a hub id such as Qwen/Qwen3-0.6B)")
    config["model"]["model_path"] = model_path
    get_key(config, "buffer.explorer_input.taskset.path", config_file)  # eval tasksets are optional
    explorer_input = config["buffer"]["explorer_input"]
    for taskset in [explorer_input["taskset"], *explorer_input.get("eval_tasksets", [])]:
        taskset["path"] = absolute(taskset["path"])
    set_key(config, "explorer.rollout_model.engine_num", plan["engine_num"])
    cluster.apply_plan(config, plan)
    return config


def write_yaml(config: dict, path: Path) -> Path:
    with atomic_paths(path) as (tmp,):
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
