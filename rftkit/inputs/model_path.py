"""A model path, checked before a launch or a conversion spends time on it."""

from __future__ import annotations

from pathlib import Path

from rftkit.inputs import InputError, read_json


def check_model(path: Path, where: str, gguf: bool = False) -> None:
    """Refuse `path` unless it is a folder holding config.json (what transformers and vLLM read first) or, where
    the caller converts GGUF files (`gguf`), a .gguf file. `where` names the flag or argument in the message."""
    wanted = "an HF model folder or a GGUF file (.gguf)" if gguf else "an HF model folder (as transformers saves one)"
    if not path.exists():
        raise InputError(f"{where}: no such file or folder: {path}")
    if path.is_dir() and not (path / "config.json").is_file():
        raise InputError(f"{where} {path}: no config.json in this folder; expected {wanted}")
    if not path.is_dir() and not (gguf and path.suffix == ".gguf"):
        raise InputError(f"{where} {path}: expected {wanted}")
    if path.is_dir():
        config = read_json(path / "config.json", flag=where)
        if not isinstance(config, dict) or not config:
            raise InputError(f"{where} {path}: its config.json holds no model settings; expected {wanted}")
        index = path / "model.safetensors.index.json"
        if index.is_file():  # sharded weights: every shard the index names must be there
            shards = set((read_json(index, flag=where).get("weight_map") or {}).values())
            if missing := sorted(name for name in shards if not (path / name).is_file()):
                raise InputError(f"{where} {path}: {missing[0]} is missing ({len(missing)} of the {len(shards)} "
                                 f"weight files its model.safetensors.index.json names)")
    else:
        check_gguf(path, where)


def check_gguf(path: Path, where: str) -> None:
    """Refuse a file that the gguf package's own reader cannot read whole: its magic, version, metadata and tensor
    table, each tensor's data inside the file (a download cut short, or another file with the suffix)."""
    from gguf import GGUFReader

    try:
        tensors = len(GGUFReader(path).tensors)
    except Exception as exc:  # the reader's own ValueError, IndexError... on a file it cannot take
        said = (str(exc).splitlines() or [""])[0]
        raise InputError(f"{where} {path}: not a GGUF model the gguf reader can read ({type(exc).__name__}: "
                         f"{said}); a download cut short, or another file?") from None
    if tensors == 0:
        raise InputError(f"{where} {path}: a GGUF file without a tensor; expected a model")
