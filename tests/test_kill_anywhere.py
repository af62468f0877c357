"""A kill at any write of a run, then the same command again: the relaunch loads a complete checkpoint, goes on
from its step, and ends where a run that was never killed ends (the same tasks at every step, the same BOTS
posteriors, every step trained once).

The run is config_difficulty.yaml on CPU, as tests/test_resume.py drives it, with Trinity-RFT's own task
scheduler, BOTS selector and StateManager, and its own CheckpointMonitor and checkpoint retention, each patched
as a launch patches them (rftkit.run_state, rftkit.checkpoints). The trainer is a stand-in that
records which explore steps it trained on, and writes that record into each checkpoint in two parts, in place,
as verl writes its shards. Every write of the run is a kill point: each rename (before and after it), each
checkpoint part, each deletion of an old checkpoint. The test kills the run at every one of them in turn.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import logging
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rftkit import checkpoints, run_state
from test_resume import TOTAL_STEPS, bots_run, explore_step, state_manager  # noqa: F401 (fixtures)

SAVE_EVERY = 2  # trainer steps between checkpoints
# the stand-in trainer's weights, a torch.save archive as verl's shards are: the explore steps it trained on, and
# their tasks
MODEL = "actor/model_world_size_1_rank_0.pt"


def trained_on(folder: Path) -> list:
    return torch.load(folder / MODEL)


class Killed(BaseException):
    """The kill: not an Exception, so that no handler in the code under test catches it."""


class Writes:
    """Counts the run's writes, and kills the run at write number `kill_at` (never if None)."""

    def __init__(self, kill_at: int | None = None):
        self.kill_at, self.count = kill_at, 0

    def tick(self) -> None:
        self.count += 1
        if self.count == self.kill_at:
            raise Killed


@pytest.fixture
def trinity(state_manager):  # noqa: F811
    import trinity.trainer.verl.trainer as module

    checkpoints.safe_checkpoints(module)
    return SimpleNamespace(StateManager=state_manager, CheckpointMonitor=module.CheckpointMonitor,
                           VERLTrainer=module.VERLTrainer)


def launch(config, trinity, writes: Writes, monkeypatch, saved: list[int] | None = None) -> int:
    """One launch of the run, to its end or to its kill; the step it started from. Each checkpoint whose
    save finished is appended to `saved`."""
    from trinity.buffer.task_scheduler import get_taskset_scheduler
    from trinity.common.constants import SaveStrategy

    saved = [] if saved is None else saved

    replace, rmtree = os.replace, shutil.rmtree

    def replace_counted(src, dst):
        writes.tick()
        replace(src, dst)
        writes.tick()

    def rmtree_counted(path, *args, **kwargs):
        writes.tick()
        rmtree(path, *args, **kwargs)
        writes.tick()

    monkeypatch.setattr(os, "replace", replace_counted)
    monkeypatch.setattr(shutil, "rmtree", rmtree_counted)
    job = Path(config.checkpoint_job_dir)
    run_state.rewind(job)  # what the launcher does before tune()
    step = run_state.trainer_checkpoint(job)
    trained = trained_on(job / f"global_step_{step}") if step else []
    assert [s for s, _ in trained] == list(range(1, step + 1)), "the checkpoint loaded is complete"

    state = trinity.StateManager(path=str(job), explorer_name=config.explorer.name)
    scheduler = get_taskset_scheduler(state.load_explorer(), config)
    monitor = trinity.CheckpointMonitor(SaveStrategy.UNRESTRICTED, str(job))  # a new actor each launch
    trainer = trinity.VERLTrainer.__new__(trinity.VERLTrainer)
    trainer.global_config = SimpleNamespace(checkpoint_job_dir=str(job),
                                            trainer=SimpleNamespace(max_checkpoints_to_keep=1))
    trainer._saved_checkpoint_paths, trainer.logger = [], logging.getLogger("test_kill_anywhere")

    async def loop():
        nonlocal step
        while (indices := await explore_step(scheduler, state, step + 1)) is not None:
            step += 1
            trained.append([step, indices])
            if step % SAVE_EVERY == 0 or step == TOTAL_STEPS:
                folder = job / f"global_step_{step}"
                (folder / MODEL).parent.mkdir(parents=True, exist_ok=True)
                archive = io.BytesIO()
                torch.save(trained, archive)
                data = archive.getvalue()
                with open(folder / MODEL, "wb") as shard:  # in place, in parts, as a shard is written
                    shard.write(data[:len(data) // 2])
                    shard.flush()
                    writes.tick()
                    shard.write(data[len(data) // 2:])
                writes.tick()
                trainer._retain_checkpoints(str(folder))
                monitor.update_latest_checkpoint_step(step)
                state.save_trainer(step, {})
                saved.append(step)

    started = step
    asyncio.run(loop())
    return started


def final_state(job: Path) -> tuple[list, list]:
    """(what the last checkpoint trained on, the explorer's saved selector state)."""
    trained = trained_on(job / f"global_step_{TOTAL_STEPS}")
    return trained, json.loads((job / "explorer_meta.json").read_text())["taskset_states"]


def test_a_kill_at_any_write_loses_nothing(bots_run, trinity, tmp_path, monkeypatch):  # noqa: F811
    whole = copy.deepcopy(bots_run)
    whole.checkpoint_job_dir = str(tmp_path / "never-killed")
    writes = Writes()
    with monkeypatch.context() as patch:
        launch(whole, trinity, writes, patch)
    reference = final_state(Path(whole.checkpoint_job_dir))
    assert [s for s, _ in reference[0]] == list(range(1, TOTAL_STEPS + 1))
    kill_points = writes.count
    assert kill_points > 4 * TOTAL_STEPS  # renames, checkpoint parts and deletions, before and after each

    for kill_at in range(1, kill_points + 1):
        run = copy.deepcopy(bots_run)
        run.checkpoint_job_dir = str(tmp_path / f"killed-at-{kill_at}")
        saved: list[int] = []
        with monkeypatch.context() as patch, pytest.raises(Killed):
            launch(run, trinity, Writes(kill_at), patch, saved)
        job = Path(run.checkpoint_job_dir)
        with monkeypatch.context() as patch:
            started = launch(run, trinity, Writes(), patch)  # the same command again
        assert started >= (saved[-1] if saved else 0), f"killed at write {kill_at}: a finished save was lost"
        assert final_state(job) == reference, f"killed at write {kill_at} of {kill_points}"
        assert run_state.tracker_step(job) == TOTAL_STEPS
        assert not list(job.glob("**/*.tmp")), f"killed at write {kill_at}: a temporary file was left"
    print(f"{kill_points} kill points tried, every one resumed to the never-killed run's end")
