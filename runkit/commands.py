"""Command lines built from settings: a launch (an example's main.py with its paths and `--set` overrides),
and an evaluation of a served model (scripts/evaluate.py against runkit.serving's server)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rftkit.example import Example
from runkit.serving import SERVED_NAME


def set_flags(settings: Mapping[str, Any]) -> list[str]:
    """--set=KEY=<JSON value> per setting, in order (None -> null, a list -> [...])."""
    return [f"--set={key}={json.dumps(value)}" for key, value in settings.items()]


def launch_command(example: Example, *, model: Path, checkpoints: Path, config: str | None = None,
                   data: Mapping[str, Path] | None = None, attn: str | None = None,
                   settings: Mapping[str, Any] | None = None, extra: Sequence[str] = ()) -> list[str]:
    """[python, <example.main>, (--config CONFIG), --model-path M, --checkpoint-dir D, (--attn A), a data
    flag per distinct flag of example.data_flags for the roles in `data`, *set_flags(settings), then each
    of `extra` (KEY=VALUE) as --set. The entry point and config stay relative to the repo: run it from there."""
    folders = {example.data_flags[role]: str(folder) for role, folder in (data or {}).items()}
    return [sys.executable, example.main, *(["--config", config] if config else []), "--model-path", str(model),
            "--checkpoint-dir", str(checkpoints), *(["--attn", attn] if attn else []),
            *(arg for flag_and_folder in folders.items() for arg in flag_and_folder), *set_flags(settings or {}),
            *(f"--set={setting}" for setting in extra)]


def evaluate_command(base_url: str, data: Path, out: Path, repeats: int, max_tokens: int,
                     task: str = "frozenlake", split: str = "test") -> list[str]:
    """[python, scripts/evaluate.py, ...]: `repeats` episodes of every task of the split, against the model
    served at `base_url` under SERVED_NAME, the report into `out`. Run it from the repo."""
    # 64 episodes at a time: one engine batches them; the episodes are independent
    return [sys.executable, "scripts/evaluate.py", "--task", task, "--split", split, "--model", "openai",
            "--base-url", base_url, "--model-name", SERVED_NAME, "--data", str(data), "--out", str(out),
            "--repeats", str(repeats), "--concurrency", "64", "--max-tokens", str(max_tokens)]
