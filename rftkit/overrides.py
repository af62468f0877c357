"""The YAML a launch starts from, and what the command line changes in it.

`--set KEY=VALUE` (`parse_override`, `set_key`), reading and writing the YAML, and `resolve_config`:
the mapping tune() will load, with the overrides and the cluster plan applied and every path made
absolute (Ray workers do not share our working directory). YAML is read as Trinity-RFT reads it,
with OmegaConf (`1e-6` is a number; `${oc.env:VAR,default}` resolves), and resolved when read, so
the launcher and tune() see plain values.
"""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf._utils import get_yaml_loader  # the YAML loader of OmegaConf.load(), which Trinity uses
from omegaconf.errors import OmegaConfBaseException

from rftkit import keys
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, get_key, tasksets
from rftkit.inputs.model_path import check_model
from rftkit.example import REPO
from rftkit.keys import MODEL_PATH_KEY, REF_DTYPE_KEY, TRAIN_TASKSET_PATH_KEY

# A model path that absolute() kept as it was and that is not a hub id ("gpt2", "Qwen/Qwen3-0.6B") was meant
# as a local folder ("models/qwen/final"); one that does not exist is refused before anything starts.
HUB_ID = re.compile(r"[^/]+(/[^/]+)?")


def read_yaml(text: str) -> Any:
    """YAML text as OmegaConf reads it (1e-6 is a number), interpolations not yet resolved."""
    return yaml.load(text, Loader=get_yaml_loader())


def resolve_interpolations(value: Any, where: str) -> Any:
    """`value` (a mapping, a list or a scalar) with every `${...}` in it resolved as OmegaConf resolves it."""
    if isinstance(value, str):
        return resolve_interpolations([value], where)[0]
    if not isinstance(value, (dict, list)):
        return value
    try:
        return OmegaConf.to_container(OmegaConf.create(value), resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) if isinstance(value, dict) else None
        problem = str(exc).splitlines()[0].removeprefix("KeyError raised while resolving interpolation: ").strip('"')
        raise InputError(f"{where}{f': {key}' if key else ''}: {problem}") from None


def parse_override(text: str) -> tuple[str, Any]:
    """ "a.b=1" -> ("a.b", 1); the value is read as the YAML file is, so numbers, booleans and lists keep
    their type and `${oc.env:VAR,default}` is resolved."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), resolve_interpolations(read_yaml(value), f"--set {key.strip()}")
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{key}: the value {value!r} is not valid YAML ({exc})") from None
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def set_key(config: dict, dotted: str, value: Any) -> None:
    """Set `config["a"]["b"][0]["c"]` from "a.b.0.c" (`keys.put`), or refuse the `--set` naming where it stops."""
    try:
        keys.put(config, dotted, value)
    except keys.KeyPathError as exc:
        raise InputError(f"--set {dotted}: {exc}") from None


def absolute(path: str, maybe_hub_id: bool = False, base: Path | None = None) -> str:
    """`path` made absolute against `base` (default: the working directory).

    With `maybe_hub_id`, a relative path that does not exist there and does not start
    with "." or "~" is taken for a hub id ("Qwen/Qwen2.5-3B-Instruct") and kept.
    """
    candidate = Path(path).expanduser()
    placed = candidate if candidate.is_absolute() else (base or Path.cwd()) / candidate
    if maybe_hub_id and not (candidate.is_absolute() or path.startswith((".", "~")) or placed.exists()):
        return path
    return str(placed.resolve())


def load_yaml(path: str | Path, flag: str = "--config") -> dict:
    """The YAML mapping at `path`, interpolations resolved, or exit with a message naming it as `flag` has it."""
    try:
        config = read_yaml(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(f"{flag} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:  # a folder, an unreadable or a binary file
        raise InputError(f"{flag} {path}: cannot read it as text ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{flag} {path}: not valid YAML{where} ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"{flag} {path}: expected a YAML mapping of Trinity-RFT settings")
    return resolve_interpolations(config, f"{flag} {path}")


# The reference model only runs forward passes, in bf16 under FSDP's mixed precision. Trinity 0.6 keeps
# its weights in fp32, and verl keeps a forward-only model's weights on the CPU and copies them to the GPU
# for every micro-batch (FSDP2's CPUOffloadPolicy): in bf16 that copy is half as large, the log-probs the
# same. A value in the YAML or --set (at REF_DTYPE_KEY) is kept.
REF_DTYPE = "bfloat16"


def place_data(config: dict, data: dict[str, str | None]) -> None:
    """Point the config's tasksets at the folders the entry point's flags name (`data`: role -> folder).

    "train" sets the training taskset's folder, and makes the taskset (split train) where the config
    has none, as tune() does for a dataset given in code; "eval" sets every eval taskset's folder.
    """
    explorer_input = config.setdefault("buffer", {}).setdefault("explorer_input", {})
    if data.get("train") is not None:
        explorer_input.setdefault("taskset", {"name": "train_taskset", "split": "train"})["path"] = data["train"]
    if data.get("eval") is not None:
        for taskset in explorer_input.get("eval_tasksets") or []:
            taskset["path"] = data["eval"]


def apply_overrides(config: dict, overrides: dict[str, Any], data: dict[str, str | None] | None = None) -> dict:
    """A copy of `config` with the data folders placed (`place_data`), then each override set in order."""
    config = copy.deepcopy(config)
    place_data(config, data or {})
    for dotted, value in overrides.items():
        set_key(config, dotted, value)
    return config


def config_paths_in_checkout(config: dict) -> None:
    """Take a config's own relative paths from the checkout (`PATHS_RULE`): its checkpoint root, its tasksets'
    folders, and its model where that is a folder of the checkout (else it may be a hub id)."""
    dotted = ["checkpoint_root_dir", TRAIN_TASKSET_PATH_KEY,
              *(f"buffer.explorer_input.eval_tasksets.{i}.path"
                for i in range(len(keys.get(config, "buffer.explorer_input.eval_tasksets") or [])))]
    for key in dotted:
        value = keys.get(config, key)
        if isinstance(value, str) and value:
            keys.put(config, key, absolute(value, base=REPO))
    model = keys.get(config, MODEL_PATH_KEY)
    if isinstance(model, str) and model:
        keys.put(config, MODEL_PATH_KEY, absolute(model, maybe_hub_id=True, base=REPO))


def resolve_config(config: dict, overrides: dict[str, Any], config_file: str = "the config",
                   data: dict[str, str | None] | None = None) -> dict:
    """The YAML mapping tune() will load, but for the cluster plan (`rftkit.cluster.apply_plan`): data folders
    and overrides applied, paths absolute.

    A local model folder that does not exist, or a checkpoint folder that
    cannot be written, is refused here, before anything starts.
    """
    config = apply_overrides(config, overrides, data)
    if not keys.has(config, REF_DTYPE_KEY):
        set_key(config, REF_DTYPE_KEY, REF_DTYPE)
    config["checkpoint_root_dir"] = absolute(config.get("checkpoint_root_dir", "./checkpoints"))
    check_writable(config["checkpoint_root_dir"], "checkpoint_root_dir (--checkpoint-dir)")
    model_path = get_key(config, MODEL_PATH_KEY, config_file)
    if not isinstance(model_path, str) or not model_path.strip():  # an unset shell variable: `--set model.model_path=`
        raise InputError(f"model.model_path (--model-path): empty ({model_path!r}); expected a local model folder or "
                         f"a hub id such as Qwen/Qwen3-0.6B")
    model_path = absolute(model_path, maybe_hub_id=True)
    if not Path(model_path).exists() and not HUB_ID.fullmatch(model_path):
        raise InputError(f"model.model_path (--model-path) {model_path}: no such folder "
                         f"(expected a local model folder or a hub id such as Qwen/Qwen3-0.6B)")
    if Path(model_path).exists():
        check_model(Path(model_path), "model.model_path (--model-path)")
    config["model"]["model_path"] = model_path
    for taskset, _ in tasksets(config, config_file):
        taskset["path"] = absolute(taskset["path"])
    return config


def write_yaml(config: dict, path: Path) -> Path:
    with atomic_paths(path) as (tmp,):
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
