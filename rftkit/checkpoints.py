"""Checkpoints that a kill cannot leave half-written where a relaunch would load them.

verl's tracker, `latest_checkpointed_iteration.txt`, names the checkpoint a relaunch loads. In
Trinity-RFT 0.6.0 a kill could still leave it naming something incomplete (docs/run-files.md): the
tracker is rewritten in place; the trainer's save after its loop rewrites the named checkpoint in
place; and the oldest checkpoint is deleted before the tracker has moved on. `safe_checkpoints` patches
all three in the trainer's process: the pointer files are written whole, a save into a complete
named checkpoint is skipped, and the named checkpoint is never deleted.

Before a launch, `fall_back` checks the named checkpoint (`missing_part`) and, if it is incomplete,
sets it aside as `incomplete_global_step_N` for the newest complete one before it.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import shutil
import zipfile
from pathlib import Path
from types import ModuleType

from rftkit.files import atomic_paths
from rftkit.patches.apply import replace
from rftkit.trainer.lora_saves import ADAPTER_FILE, ADAPTER_FOLDER

TRACKER = "latest_checkpointed_iteration.txt"  # verl's pointer to the last complete checkpoint
POINTERS = {TRACKER, "latest_state_dict_iteration.txt"}
HF_WEIGHTS = "actor/huggingface/model*.safetensors"  # what save_as_hf adds to a checkpoint
STEP_FOLDER = re.compile(r"global_step_(\d+)")
SHARD = re.compile(r"(\w+?)_world_size_(\d+)_rank_(\d+)\.pt")  # verl 0.8's model, optim and extra_state shards
SET_ASIDE = "incomplete_"  # prefix of a checkpoint folder found incomplete: no glob for global_step_* matches it


def tracker_step(job_dir: str | os.PathLike) -> int | None:
    """The step verl's checkpoint pointer names now; None while there is none or it is being written."""
    try:
        return int((Path(job_dir) / TRACKER).read_text())
    except (OSError, ValueError):
        return None


def whole_safetensors(path: Path) -> bool:
    """Whether a safetensors file is as long as its header says: a cut-short write is not."""
    try:
        with open(path, "rb") as file:
            length = int.from_bytes(file.read(8), "little")
            header = json.loads(file.read(length))
        end = max((entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"), default=0)
        return path.stat().st_size == 8 + length + end
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False


def missing_part(folder: str | os.PathLike) -> str | None:
    """What keeps a checkpoint folder from loading, or None if nothing does: every rank's shard of each kind verl
    wrote, each a whole torch.save archive (its zip directory is written last), and every HF weights file whole."""
    actor = Path(folder) / "actor"
    if not actor.is_dir():
        return f"{actor} is missing"
    groups: dict[tuple[str, int], set[int]] = {}
    for path in actor.glob("*.pt"):
        if match := SHARD.fullmatch(path.name):
            if not zipfile.is_zipfile(path):
                return f"{path.name} is cut short"
            groups.setdefault((match[1], int(match[2])), set()).add(int(match[3]))
    if not any(kind == "model" for kind, _ in groups):
        return "no model shard"
    for (kind, size), ranks in sorted(groups.items()):
        if missing := sorted(set(range(size)) - ranks):
            return f"{kind}_world_size_{size}_rank_{missing[0]}.pt is missing"
    hf = actor / "huggingface"
    index = hf / "model.safetensors.index.json"
    try:
        named = set(json.loads(index.read_text())["weight_map"].values()) if index.exists() else set()
    except (OSError, ValueError, KeyError):
        return f"{index.name} cannot be read"
    if absent := sorted(named - {path.name for path in hf.glob("*.safetensors")}):
        return f"huggingface/{absent[0]} is missing"
    for path in sorted(hf.glob("*.safetensors")):
        if not whole_safetensors(path):
            return f"huggingface/{path.name} is cut short"
    adapter = actor / ADAPTER_FOLDER / ADAPTER_FILE  # a LoRA run's, written after the shards
    if adapter.parent.is_dir() and not (adapter.is_file() and whole_safetensors(adapter)):
        return f"{ADAPTER_FOLDER}/{ADAPTER_FILE} is missing or cut short"
    return None


def saved_steps(job_dir: str | os.PathLike) -> list[int]:
    """The N of every `global_step_N` folder in `job_dir`, complete or not, newest first."""
    return sorted((int(match[1]) for path in Path(job_dir).glob("global_step_*")
                   if (match := STEP_FOLDER.fullmatch(path.name))), reverse=True)


def complete_steps(job_dir: str | os.PathLike, up_to: int | None = None) -> list[int]:
    """The steps of the complete checkpoints in `job_dir` (up to `up_to`), newest first."""
    return [step for step in saved_steps(job_dir) if (up_to is None or step <= up_to)
            and missing_part(Path(job_dir) / f"global_step_{step}") is None]


def fall_back(job_dir: str | os.PathLike) -> str:
    """Before a launch: if the checkpoint the tracker names is missing or incomplete, set it aside and point the
    tracker at the newest complete checkpoint before it (with none, remove the tracker: the trainer starts from the
    model). Returns the one line that says so, or "" when the named checkpoint is complete or there is none."""
    job_dir = Path(job_dir)
    named = tracker_step(job_dir)
    if not named:
        return ""
    folder = job_dir / f"global_step_{named}"
    problem = missing_part(folder) if folder.is_dir() else f"{folder.name} is missing"
    if problem is None:
        return ""
    said = f"resuming: the checkpoint of step {named} is incomplete ({problem})"
    if folder.is_dir():
        aside = job_dir / f"{SET_ASIDE}{folder.name}"
        shutil.rmtree(aside, ignore_errors=True)  # from an earlier fall-back: the newer one is kept
        os.replace(folder, aside)
        said += f" and is kept as {aside.name}"
    earlier = complete_steps(job_dir, up_to=named - 1)
    if not earlier:
        (job_dir / TRACKER).unlink(missing_ok=True)
        return f"{said}; no complete checkpoint before it, so the trainer starts again from the model"
    with atomic_paths(job_dir / TRACKER) as (tmp,):
        tmp.write_text(str(earlier[0]))
    return f"{said}; going on from step {earlier[0]}, the newest complete checkpoint"


@contextlib.contextmanager
def _written_whole(path: str):
    with atomic_paths(path) as (tmp,), builtins.open(tmp, "w") as file:
        yield file


def pointer_open(path, mode="r", *args, **kwargs):
    """`open` for the module that writes the pointer files: those two are written whole, all else as usual."""
    if mode == "w" and not args and not kwargs and os.path.basename(str(path)) in POINTERS:
        return _written_whole(str(path))
    return builtins.open(path, mode, *args, **kwargs)


def already_saved(job_dir: str | os.PathLike, step: int, save_as_hf: bool) -> bool:
    """Whether the tracker names `step` and its checkpoint holds the HF weights if they are asked for."""
    folder = Path(job_dir) / f"global_step_{step}"
    return tracker_step(job_dir) == step and (not save_as_hf or any(folder.glob(HF_WEIGHTS)))


def safe_checkpoints(module: ModuleType) -> None:
    """Patch Trinity-RFT 0.6.0's CheckpointMonitor and VERLTrainer (see the module docstring)."""
    def unless_saved(save_checkpoint):
        async def save_unless_saved(self, block_until_saved: bool = False, save_as_hf: bool = False) -> None:
            job_dir = self.global_config.checkpoint_job_dir
            if ((Path(job_dir) / f"global_step_{self.global_steps}").is_dir()
                    and tracker_step(job_dir) != self.global_steps):
                await self.wait_for_save()  # a save of this step still being written moves the tracker when done
            if already_saved(job_dir, self.global_steps, save_as_hf):
                self.logger.info(f"Checkpoint at step {self.global_steps} is complete already: not written again.")
                return
            await save_checkpoint(self, block_until_saved=block_until_saved, save_as_hf=save_as_hf)
        return save_unless_saved

    def keeping_the_named_one(original):
        def retain_checkpoints(self, new_path: str) -> None:
            paths = self._saved_checkpoint_paths
            new_path = os.path.abspath(new_path)
            if paths and paths[-1] == new_path:  # the same step registered twice counts once
                return
            paths.append(new_path)
            keep = self.global_config.trainer.max_checkpoints_to_keep
            if not keep or keep <= 0:  # 0: keep them all
                return
            job_dir = self.global_config.checkpoint_job_dir
            named = os.path.abspath(os.path.join(job_dir, f"global_step_{tracker_step(job_dir)}"))
            for old in paths[:max(0, len(paths) - keep)]:  # the oldest beyond `keep`; never the new one (keep >= 1)
                if old == named:  # what a relaunch loads now: kept until the tracker moves
                    continue
                paths.remove(old)
                self.logger.info(f"Removing old checkpoint: {old}")
                shutil.rmtree(old, ignore_errors=True)
        return retain_checkpoints

    def pointers_whole(builtin_open):
        def open(path, mode="r", *args, **kwargs):  # the module's own name `open`: the monitor's two writes
            return pointer_open(path, mode, *args, **kwargs)
        return open

    patch = "checkpoints.kill_safe"
    replace(patch, module, "open", pointers_whole)
    replace(patch, module, "VERLTrainer.save_checkpoint", unless_saved)
    replace(patch, module, "VERLTrainer._retain_checkpoints", keeping_the_named_one)
