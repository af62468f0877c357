"""Checkpoints that a kill cannot leave half-written where a relaunch would load them.

verl's tracker, `latest_checkpointed_iteration.txt`, names the checkpoint a relaunch loads;
Trinity-RFT 0.6.0's CheckpointMonitor moves it once every file of a save is written. Three
things could still leave the tracker pointing at something incomplete (docs/run-files.md):

* the tracker itself, and its state-dict twin, are rewritten in place: a kill between the
  truncation and the write leaves an empty file, and the relaunch stops;
* the trainer saves once more after its loop, into the step the tracker already names, and
  rewrites that checkpoint's files in place;
* with `max_checkpoints_to_keep`, the oldest checkpoint is deleted as soon as the new one is
  registered, before the tracker has moved: a kill then leaves the tracker naming a folder that
  is gone, or partly gone.

`worker_setup` patches each, in the trainer's process: the two pointer files are written whole
(a temporary file renamed over the old one); a save into the step the tracker names is skipped
when that checkpoint already holds what the save would write; and no checkpoint that the tracker
names is deleted, so the previous one stays until the new one is complete (one more checkpoint
on disk for the length of a save).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import shutil
from pathlib import Path
from types import ModuleType

from rftkit.files import atomic_paths
from rftkit.run_state import TRACKER, tracker_step
from rftkit.trainer.import_patch import patch_on_import, source_has

VERL_TRAINER = "trinity.trainer.verl.trainer"  # written against Trinity-RFT 0.6.0
POINTERS = {TRACKER, "latest_state_dict_iteration.txt"}
HF_WEIGHTS = "actor/huggingface/model*.safetensors"  # what save_as_hf adds to a checkpoint


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
    monitor, trainer = module.CheckpointMonitor, module.VERLTrainer
    moved = [name for name, ok in [
        ("CheckpointMonitor writes the tracker with open(..., 'w')",
         source_has(monitor.update_latest_checkpoint_step, 'open(self.local_latest_checkpointed_iteration, "w")')
         and source_has(monitor.update_latest_state_dict_step, 'open(self.local_latest_state_dict_iteration, "w")')),
        ("VERLTrainer.save_checkpoint writes global_step_<global_steps>",
         source_has(trainer.save_checkpoint, 'f"global_step_{self.global_steps}"')),
        ("VERLTrainer._retain_checkpoints keeps _saved_checkpoint_paths",
         source_has(trainer._retain_checkpoints, "self._saved_checkpoint_paths")),
    ] if not ok]
    if moved:
        raise RuntimeError(f"rftkit.checkpoints: {VERL_TRAINER} has moved since Trinity-RFT 0.6.0 "
                           f"({'; '.join(moved)}); these patches must be checked against it")
    if getattr(trainer.save_checkpoint, "skips_saved_steps", False):
        return
    module.open = pointer_open  # the module's own name `open`, used by the monitor's two writes
    save_checkpoint = trainer.save_checkpoint

    async def save_unless_saved(self, block_until_saved: bool = False, save_as_hf: bool = False) -> None:
        job_dir = self.global_config.checkpoint_job_dir
        if (Path(job_dir) / f"global_step_{self.global_steps}").is_dir() and tracker_step(job_dir) != self.global_steps:
            await self.wait_for_save()  # a save of this step still being written moves the tracker when done
        if already_saved(job_dir, self.global_steps, save_as_hf):
            self.logger.info(f"Checkpoint at step {self.global_steps} is complete already: not written again.")
            return
        await save_checkpoint(self, block_until_saved=block_until_saved, save_as_hf=save_as_hf)

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

    save_unless_saved.skips_saved_steps = True
    save_unless_saved.__name__ = save_unless_saved.__qualname__ = "save_checkpoint"
    trainer.save_checkpoint, trainer._retain_checkpoints = save_unless_saved, retain_checkpoints


def worker_setup() -> None:
    """In every Ray worker of a launch: patch the trainer's checkpointing once Trinity imports it."""
    patch_on_import(VERL_TRAINER, safe_checkpoints)
