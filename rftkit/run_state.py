"""Resuming a run that was stopped, even by a kill: Trinity-RFT's state files, made safe to resume from.

Running the same command again resumes a run: the trainer from the checkpoint
`latest_checkpointed_iteration.txt` names (step T), the explorer from `explorer_meta.json` (its step
E and the task selector's state). Trinity-RFT 0.6.0 takes both as it finds them, so after a kill the
explorer is usually ahead (E > T: experiences no saved model learned from), and a kill during the
in-place rewrite of `explorer_meta.json` restarts the explorer at step 0 with fresh posteriors.

`safe_state_files` (patch `run_state.whole_files`) makes Trinity's StateManager write each state file whole, and each
explorer state is also kept as `explorer_meta.step_<E>.json`. Before a launch, `rewind` hands the
explorer the copy of step T, so both sides go on from the trainer's checkpoint and redo the lost
steps with the same tasks (the selector draws from its seed and position).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from rftkit.checkpoints import TRACKER, fall_back, saved_steps, tracker_step
from rftkit.files import atomic_paths
from rftkit.patches.apply import replace
from rftkit.inputs import InputError



def write_json(path: str | os.PathLike, data) -> None:
    """Write `data` as JSON to `path` whole: a reader sees the old file or the new one, never a part."""
    with atomic_paths(path) as (tmp,):
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")


def snapshot_path(explorer_state: str | os.PathLike, step: int) -> Path:
    """Where the explorer's state of `step` is kept: `explorer_meta.step_<step>.json` beside it."""
    explorer_state = Path(explorer_state)
    return explorer_state.with_name(f"{explorer_state.stem}.step_{step}.json")


def trainer_checkpoint(job_dir: str | os.PathLike) -> int:
    """The step of the trainer's last complete checkpoint (0 if none), as verl reads it on resume."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints what it finds, or does not
            folder = find_latest_ckpt_path(str(job_dir))
    except ValueError:
        raise InputError(f"{Path(job_dir) / TRACKER} does not hold a step number (a kill while it was written?); "
                         f"write into it the N of the newest complete global_step_N folder beside it") from None
    return int(folder.rsplit("global_step_", 1)[-1]) if folder else 0


SAVE_QUIET_S = 20  # seconds without a changed file after which a checkpoint folder is no longer being written


def saving_step(job_dir: str | os.PathLike, quiet_s: float = SAVE_QUIET_S) -> int | None:
    """The step of a checkpoint being written now: a `global_step_N` past the tracker's step with a file
    changed in the last `quiet_s` seconds (a folder left by an earlier kill stays still). None if none."""
    named = tracker_step(job_dir) or 0
    now = time.time()
    for step in (step for step in saved_steps(job_dir) if step > named):
        folder = Path(job_dir) / f"global_step_{step}"
        changed = max((f.stat().st_mtime for f in folder.rglob("*") if f.is_file()), default=folder.stat().st_mtime)
        if now - changed < quiet_s:
            return step
    return None


def wait_for_save(job_dir: str | os.PathLike, quiet_s: float = SAVE_QUIET_S, limit_s: float = 600,
                  poll_s: float = 1) -> int:
    """Wait while a checkpoint is being written (`saving_step`), at most `limit_s` seconds, until the tracker
    names it or its files stop changing; the tracker's step then (0 if none). Ctrl-C stops the wait."""
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline and saving_step(job_dir, quiet_s) is not None:
            time.sleep(poll_s)
    except KeyboardInterrupt:
        pass
    return tracker_step(job_dir) or 0


def _keep_snapshots(explorer_state: Path, step: int, state: dict) -> None:
    """Keep this step's state, and drop the copies of steps before the checkpoint before the trainer's last: a
    relaunch that finds the last one incomplete goes back to that one (rftkit.checkpoints.fall_back)."""
    write_json(snapshot_path(explorer_state, step), state)
    saved = tracker_step(explorer_state.parent)
    if saved is None:  # no checkpoint yet, or one being written: keep everything
        return
    floor = max((step for step in saved_steps(explorer_state.parent) if step < saved), default=saved)
    for old in explorer_state.parent.glob(f"{explorer_state.stem}.step_*.json"):
        old_step = old.stem.rsplit("step_", 1)[-1]
        if old_step.isdigit() and int(old_step) < floor:
            old.unlink(missing_ok=True)


def safe_state_files(module: ModuleType) -> None:
    """Patch Trinity-RFT 0.6.0's StateManager: whole-file writes, and the explorer's state kept per step."""
    def explorer_whole(original):
        def save_explorer(self, current_step: int, taskset_states: list) -> None:
            state = {"latest_iteration": current_step, "taskset_states": taskset_states}
            write_json(self.explorer_state_path, state)
            _keep_snapshots(Path(self.explorer_state_path), current_step, state)
        return save_explorer

    def trainer_whole(original):
        def save_trainer(self, current_step: int, sample_strategy_state: dict) -> None:
            write_json(self.trainer_state_path,
                       {"latest_iteration": current_step, "sample_strategy_state": sample_strategy_state})
        return save_trainer

    replace("run_state.whole_files", module, "StateManager.save_explorer", explorer_whole)
    replace("run_state.whole_files", module, "StateManager.save_trainer", trainer_whole)


@dataclass
class ResumePoint:
    trainer_step: int  # the trainer's last checkpoint (0: none)
    explorer_step: int  # the explorer's saved step once `rewind` is done (0: none)
    message: str  # what resumes from where, and what was lost; "" for a fresh run


def rewind(job_dir: str | os.PathLike, explorer_name: str = "explorer") -> ResumePoint:
    """Before a launch: fall back from a torn named checkpoint (`rftkit.checkpoints.fall_back`), then put the
    explorer back to the trainer's checkpoint T when it is ahead. Its newer state stays as its `step_<E>`
    copy; without a copy of step T nothing is rewound, and the message says what that costs."""
    job_dir = Path(job_dir)
    state_file = job_dir / f"{explorer_name}_meta.json"
    fell_back = fall_back(job_dir) if job_dir.is_dir() else ""
    point = _rewind(job_dir, state_file)
    return ResumePoint(point.trainer_step, point.explorer_step, "\n".join(filter(None, [fell_back, point.message])))


def _rewind(job_dir: Path, state_file: Path) -> ResumePoint:
    trainer_step = trainer_checkpoint(job_dir) if job_dir.is_dir() else 0
    try:
        explorer_step = int(json.loads(state_file.read_text()).get("latest_iteration", 0))
    except FileNotFoundError:
        explorer_step = 0
    except (OSError, ValueError) as exc:
        raise InputError(f"{state_file} cannot be read ({exc}); Trinity would restart the explorer at step "
                         f"0 with a fresh task selector. Replace it with the newest "
                         f"{state_file.stem}.step_<N>.json beside it, or delete it to restart exploring") from None
    if trainer_step == 0 and explorer_step == 0:
        return ResumePoint(0, 0, "")
    if explorer_step <= trainer_step:
        return ResumePoint(trainer_step, explorer_step,
                           f"resuming: the trainer from its checkpoint at step {trainer_step}, the explorer "
                           f"from step {explorer_step} with its task selector's state")
    if trainer_step == 0:  # no checkpoint: both sides start again
        shutil.copyfile(state_file, snapshot_path(state_file, explorer_step))
        state_file.unlink()
        return ResumePoint(0, 0, f"resuming: no trainer checkpoint yet, so the explorer starts again too "
                                 f"(its state of step {explorer_step} is kept as "
                                 f"{snapshot_path(state_file, explorer_step).name})")
    kept = snapshot_path(state_file, trainer_step)
    if not kept.exists():
        return ResumePoint(trainer_step, explorer_step,
                           f"resuming: the trainer from step {trainer_step}, the explorer from step "
                           f"{explorer_step} (its state of step {trainer_step} was not kept): the experiences "
                           f"of explore steps {trainer_step + 1}-{explorer_step} are lost, and a run that "
                           f"trains once per explore step ends {explorer_step - trainer_step} step(s) early")
    shutil.copyfile(state_file, snapshot_path(state_file, explorer_step))  # usually there already
    write_json(state_file, json.loads(kept.read_text()))
    return ResumePoint(trainer_step, trainer_step,
                       f"resuming from the trainer's checkpoint at step {trainer_step}: the explorer goes back "
                       f"from step {explorer_step} to step {trainer_step} with the task selector's state of "
                       f"that step; explore steps {trainer_step + 1}-{explorer_step} are done again")
