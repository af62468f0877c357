"""rftkit.checkpoints on Trinity-RFT 0.6.0's own CheckpointMonitor and VERLTrainer: the pointer files
written whole, no second save into a complete checkpoint, and the checkpoint the tracker names never deleted.

The trainer's save is driven with stand-ins for its Ray worker group (which records what it was asked to
save) and its checkpoint coordinator; the methods under test are Trinity's, patched."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from types import SimpleNamespace

import pytest

from conftest import write_checkpoint
from rftkit import checkpoints


@pytest.fixture(scope="session")
def trinity_trainer():
    import trinity.trainer.verl.trainer as module

    checkpoints.safe_checkpoints(module)
    checkpoints.safe_checkpoints(module)  # a second call changes nothing
    return module


def test_the_tracker_is_written_whole_or_not_at_all(trinity_trainer, tmp_path, monkeypatch):
    from trinity.common.constants import SaveStrategy

    monitor = trinity_trainer.CheckpointMonitor(SaveStrategy.UNRESTRICTED, str(tmp_path))
    monitor.update_latest_checkpoint_step(3)
    monitor.update_latest_state_dict_step(3)
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert (tmp_path / "latest_state_dict_iteration.txt").read_text() == "3"

    def killed(*args):  # the moment between writing the new step and putting it in place
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        monitor.update_latest_checkpoint_step(4)
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest_checkpointed_iteration.txt",
                                                          "latest_state_dict_iteration.txt"]


def make_trainer(module, job_dir, step, keep=0):
    """A VERLTrainer whose save writes each checkpoint's folder as Trinity's would, and its HF weights if asked."""
    saves = []

    def save_checkpoint(local_path, global_step, save_as_hf):
        saves.append((global_step, save_as_hf))
        os.makedirs(local_path, exist_ok=True)
        if save_as_hf:
            os.makedirs(os.path.join(local_path, "huggingface"), exist_ok=True)
            open(os.path.join(local_path, "huggingface", "model.safetensors"), "w").close()

    async def register_and_monitor(step, state_dict_thread_count):
        (job_dir / "latest_checkpointed_iteration.txt").write_text(str(step))  # the save is complete

    trainer = module.VERLTrainer.__new__(module.VERLTrainer)
    trainer.global_config = SimpleNamespace(checkpoint_job_dir=str(job_dir),
                                            trainer=SimpleNamespace(max_checkpoints_to_keep=keep))
    trainer.global_steps, trainer.use_critic, trainer._saved_checkpoint_paths = step, False, []
    trainer.logger = logging.getLogger("test_checkpoints")
    trainer.actor_rollout_wg = SimpleNamespace(save_checkpoint=save_checkpoint, wait_on_save_thread=lambda: None)
    trainer.checkpoint_coordinator = SimpleNamespace(register_and_monitor=register_and_monitor)
    return trainer, saves


def test_the_save_after_the_loop_leaves_a_complete_checkpoint_alone(trinity_trainer, tmp_path):
    trainer, saves = make_trainer(trinity_trainer, tmp_path, step=5)
    asyncio.run(trainer.save_checkpoint(block_until_saved=True, save_as_hf=False))  # the loop's last save
    asyncio.run(trainer.save_checkpoint(block_until_saved=True, save_as_hf=False))  # the one after the loop
    assert saves == [(5, False)]
    asyncio.run(trainer.save_checkpoint(block_until_saved=True, save_as_hf=True))  # HF weights still missing
    asyncio.run(trainer.save_checkpoint(block_until_saved=True, save_as_hf=True))
    assert saves == [(5, False), (5, True)]
    trainer.global_steps = 6  # a new step is always saved
    asyncio.run(trainer.save_checkpoint(block_until_saved=True, save_as_hf=False))
    assert saves[-1] == (6, False)


def test_the_checkpoint_the_tracker_names_stays_until_the_next_is_complete(trinity_trainer, tmp_path):
    trainer, _ = make_trainer(trinity_trainer, tmp_path, step=0, keep=1)
    tracker = tmp_path / "latest_checkpointed_iteration.txt"

    def register(step):  # a save has written its files, the tracker not yet moved
        trainer.global_steps = step
        folder = tmp_path / f"global_step_{step}"
        folder.mkdir()
        trainer._retain_checkpoints(str(folder))
        return sorted(p.name for p in tmp_path.glob("global_step_*"))

    assert register(4) == ["global_step_4"]
    tracker.write_text("4")
    assert register(5) == ["global_step_4", "global_step_5"]  # step 4 is what a relaunch would load
    tracker.write_text("5")
    assert register(6) == ["global_step_5", "global_step_6"]
    tracker.write_text("6")
    assert register(7) == ["global_step_6", "global_step_7"]


def test_ctrl_c_during_a_save_waits_for_it_and_a_stale_folder_does_not_hold_it_up(tmp_path):
    import threading
    import time

    from rftkit import run_state

    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    tracker.write_text("3")
    stale = tmp_path / "global_step_4"  # torn by an earlier kill: still for longer than quiet_s
    stale.mkdir()
    (stale / "model.pt").write_text("part")
    os.utime(stale / "model.pt", (time.time() - 60, time.time() - 60))
    assert run_state.saving_step(tmp_path, quiet_s=5) is None
    assert run_state.wait_for_save(tmp_path, quiet_s=5, poll_s=0.05) == 3  # at once

    def save(step=5):  # shards written for a second, then the tracker moved
        folder = tmp_path / f"global_step_{step}"
        folder.mkdir()
        for i in range(10):
            (folder / f"shard{i}.pt").write_text("x" * i)
            time.sleep(0.1)
        tracker.write_text(str(step))

    writer = threading.Thread(target=save)
    writer.start()
    time.sleep(0.2)
    started = time.monotonic()
    assert run_state.saving_step(tmp_path, quiet_s=5) == 5
    assert run_state.wait_for_save(tmp_path, quiet_s=5, poll_s=0.05) == 5
    assert 0.5 < time.monotonic() - started < 5
    writer.join()


def test_a_checkpoint_is_complete_only_with_every_rank_and_every_file_whole(tmp_path):
    folder = tmp_path / "global_step_5"
    actor = write_checkpoint(folder, world_size=2, hf_weights=True)
    assert checkpoints.missing_part(folder) is None
    assert checkpoints.missing_part(tmp_path / "global_step_9") == f"{tmp_path / 'global_step_9' / 'actor'} is missing"

    weights = actor / "huggingface" / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[:-1])  # the HF weights, rewritten in place by the save after the loop, cut short
    assert checkpoints.missing_part(folder) == "huggingface/model.safetensors is cut short"
    weights.write_bytes(whole)
    index = actor / "huggingface" / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "model-00002-of-00002.safetensors"}}))
    assert checkpoints.missing_part(folder) == "huggingface/model-00002-of-00002.safetensors is missing"
    index.unlink()
    adapter = actor / "lora_adapter"  # a LoRA run's, written after the shards
    adapter.mkdir()
    assert checkpoints.missing_part(folder) == "lora_adapter/adapter_model.safetensors is missing or cut short"
    (adapter / "adapter_model.safetensors").write_bytes(whole[:-1])
    assert checkpoints.missing_part(folder) == "lora_adapter/adapter_model.safetensors is missing or cut short"
    (adapter / "adapter_model.safetensors").write_bytes(whole)
    assert checkpoints.missing_part(folder) is None

    shard = actor / "optim_world_size_2_rank_1.pt"
    data = shard.read_bytes()
    for torn in (data[:len(data) // 2], b""):  # a kill mid-write; a kill right after the truncation
        shard.write_bytes(torn)
        assert checkpoints.missing_part(folder) == "optim_world_size_2_rank_1.pt is cut short"
    shard.unlink()
    assert checkpoints.missing_part(folder) == "optim_world_size_2_rank_1.pt is missing"
    for path in actor.glob("*.pt"):
        path.unlink()
    assert checkpoints.missing_part(folder) == "no model shard"


def test_the_fall_back_leaves_a_complete_named_checkpoint_alone(tmp_path):
    assert checkpoints.fall_back(tmp_path) == ""  # no tracker: a fresh run
    for step in (2, 4):
        write_checkpoint(tmp_path / f"global_step_{step}")
    (tmp_path / checkpoints.TRACKER).write_text("4")
    assert checkpoints.fall_back(tmp_path) == ""
    assert checkpoints.complete_steps(tmp_path) == [4, 2] and checkpoints.tracker_step(tmp_path) == 4
    (tmp_path / checkpoints.TRACKER).write_text("6")  # names a folder that is gone
    assert checkpoints.fall_back(tmp_path) == ("resuming: the checkpoint of step 6 is incomplete (global_step_6 is "
                                               "missing); going on from step 4, the newest complete checkpoint")
    assert checkpoints.tracker_step(tmp_path) == 4 and not list(tmp_path.glob(".*.tmp"))
