"""A model path, checked before a launch or a conversion spends time on it."""

from __future__ import annotations

from pathlib import Path

from rftkit.inputs import InputError


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
