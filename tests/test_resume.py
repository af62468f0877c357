"""A killed run resumes from the trainer's checkpoint (rftkit.run_state), with Trinity's own state files and task
scheduler: the explorer's steps and the BOTS selector's posteriors go back to that checkpoint and go on as an
uninterrupted run would have, and the launcher reads only what the resumed launch logs (rftkit.supervise)."""

import asyncio
import copy
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from frozenlake.workflow import run_frozen_lake
from math_bots.judge import gsm8k_judge
from math_bots.workflow import run_react_agent
from rftkit import cluster, run_state, supervise
from rftkit.overrides import load_yaml, resolve_config, write_yaml
from rftkit.trinity_config import build_trinity_config
from rftkit.inputs import InputError

from conftest import REPO, config_only_model, write_checkpoint
from test_math_training_path import gsm8k_rows

TOTAL_STEPS, BATCH = 8, 4


@pytest.fixture
def state_manager(monkeypatch):
    """Trinity's StateManager class, patched as in a launch's Ray workers (restored afterwards)."""
    import trinity.manager.state_manager as module

    for name in ("save_explorer", "save_trainer"):
        monkeypatch.setattr(module.StateManager, name, getattr(module.StateManager, name))
    run_state.safe_state_files(module)
    return module.StateManager


def resolved_bots_run(machine):
    """config_difficulty.yaml as the launcher resolves it on a machine whose files lie under `machine`: 64 tasks,
    batch 4, 8 explore steps."""
    tmp_path = machine
    if not (tmp_path / "train").is_dir():
        (tmp_path / "train").mkdir(parents=True)
        pq.write_table(gsm8k_rows(64, np.random.default_rng(0)), tmp_path / "train" / "train.parquet")
    raw = load_yaml(REPO / "configs" / "config_difficulty.yaml")
    config = cluster.with_plan(resolve_config(raw, {
        "buffer.explorer_input.taskset.path": str(tmp_path / "train"),
        "buffer.explorer_input.eval_tasksets": [], "buffer.batch_size": BATCH,
        "buffer.total_steps": TOTAL_STEPS, "checkpoint_root_dir": str(tmp_path / "ckpt")}),
        cluster.plan_cluster(1, 2, 1, None))
    return build_trinity_config(write_yaml(config, tmp_path / "config.yaml"),
                                       run_react_agent, gsm8k_judge)


@pytest.fixture
def bots_run(tmp_path):
    return resolved_bots_run(tmp_path)


async def explore_step(scheduler, state, step: int) -> list[int] | None:
    """Explore step `step` as Trinity's Explorer makes it: read a batch of tasks, feed back a fixed pass rate
    per task (so that two runs can be compared), save the explorer's state. The tasks' indices; None once
    the taskset is done."""
    from trinity.common.constants import SELECTOR_METRIC

    try:
        tasks = await scheduler.read()
    except StopAsyncIteration:
        return None
    indices = [task.index["index"] for task in tasks]
    scheduler.feedback({SELECTOR_METRIC: {0: {"indices": indices, "values": [(i % 5) / 4 for i in indices]}}})
    state.save_explorer(step, scheduler.state_dict())
    return indices


def explore(config, StateManager, stop_after=None):
    """What Trinity's Explorer does with its state: load it, read and feed back each step, save after each
    (a weight sync every step). Feedback is a fixed pass rate per task, so that two runs can be compared.
    (last step, {step: task indices}, BOTS's posteriors or None)."""
    from trinity.buffer.task_scheduler import get_taskset_scheduler

    state = StateManager(path=config.checkpoint_job_dir, explorer_name=config.explorer.name)
    saved = state.load_explorer()
    scheduler = get_taskset_scheduler(saved, config)
    step, chosen = saved.get("latest_iteration", 0), {}

    async def loop():
        nonlocal step
        while stop_after is None or step < stop_after:
            indices = await explore_step(scheduler, state, step + 1)
            if indices is None:
                return
            step += 1
            chosen[step] = indices

    asyncio.run(loop())
    if not hasattr(scheduler, "tasksets"):  # Trinity's scheduler for a plain selector keeps no posteriors
        return step, chosen, None
    estimator = scheduler.tasksets[0].reader.selector.diff_estimator
    return step, chosen, (estimator.alphas.copy(), estimator.betas.copy())


def trainer_saved(job_dir, step):
    """What verl leaves after a complete save of `step`: its folder, then the pointer to it."""
    write_checkpoint(job_dir / f"global_step_{step}")
    (job_dir / run_state.TRACKER).write_text(str(step))


def test_a_killed_bots_run_resumes_from_the_trainer_checkpoint(bots_run, state_manager, tmp_path, capsys):
    job = tmp_path / "ckpt" / bots_run.project / bots_run.name
    uninterrupted_dir = tmp_path / "uninterrupted"
    whole = copy.deepcopy(bots_run)
    whole.checkpoint_job_dir = str(uninterrupted_dir)
    last, reference, reference_posteriors = explore(whole, state_manager)
    assert last == TOTAL_STEPS and len(set(map(tuple, reference.values()))) > 1

    # The killed launch: the explorer got to step 6, the trainer's last complete checkpoint is step 4.
    explore(bots_run, state_manager, stop_after=6)
    trainer_saved(job, 4)
    point = run_state.rewind(job)
    assert (point.trainer_step, point.explorer_step) == (4, 4)
    assert "goes back from step 6 to step 4" in point.message and "explore steps 5-6 are done again" in point.message

    capsys.readouterr()
    last, resumed, posteriors = explore(bots_run, state_manager)
    assert f"restored the posteriors of 64 tasks at index {4 * BATCH}" in capsys.readouterr().out
    assert sorted(resumed) == [5, 6, 7, 8], "each remaining step once, and no step beyond the total"
    assert last == TOTAL_STEPS
    assert resumed == {step: reference[step] for step in resumed}, "the same tasks as the uninterrupted run"
    assert all(np.array_equal(a, b) for a, b in zip(posteriors, reference_posteriors))
    assert json.loads((job / "explorer_meta.step_6.json").read_text())["latest_iteration"] == 6, \
        "the abandoned state is kept beside the others"


def test_a_run_copied_to_another_machine_goes_on_from_its_checkpoint(state_manager, tmp_path, capsys):
    """docs/gpu.md, resuming on another machine: the run's folder and its data copied to other paths, the same
    command with --checkpoint-dir at the copy. Nothing a resume reads names the first machine's paths; the
    explorer and the BOTS posteriors go on from the trainer's checkpoint as an uninterrupted run would."""
    import shutil

    first, second = tmp_path / "machine-a", tmp_path / "elsewhere" / "machine-b"
    reference_run = resolved_bots_run(tmp_path / "reference")
    _, reference, reference_posteriors = explore(reference_run, state_manager)

    run = resolved_bots_run(first)
    explore(run, state_manager, stop_after=6)  # the first hold ends after explore step 6; the trainer saved step 4
    job = first / "ckpt" / run.project / run.name
    trainer_saved(job, 4)
    second.parent.mkdir(parents=True)
    shutil.copytree(first, second)  # what a user carries: the run's folder (and the same data)
    shutil.rmtree(first)
    resumed_run = resolved_bots_run(second)
    moved = second / "ckpt" / run.project / run.name
    assert resumed_run.checkpoint_job_dir == str(moved)
    read_on_resume = [moved / run_state.TRACKER, moved / "trainer_meta.json", *moved.glob("explorer_meta*.json")]
    assert all(str(first) not in path.read_text() for path in read_on_resume if path.is_file())

    point = run_state.rewind(moved)
    assert (point.trainer_step, point.explorer_step) == (4, 4)
    capsys.readouterr()
    last, resumed, posteriors = explore(resumed_run, state_manager)
    assert f"restored the posteriors of 64 tasks at index {4 * BATCH}" in capsys.readouterr().out
    assert last == TOTAL_STEPS and resumed == {step: reference[step] for step in (5, 6, 7, 8)}
    assert all(np.array_equal(a, b) for a, b in zip(posteriors, reference_posteriors))


def test_a_run_started_from_carried_weights_plays_the_first_runs_maps_again(frozenlake_data, state_manager,
                                                                            tmp_path):
    """docs/results/2026-12-06-frozenlake-two-holds.md: a second hold that starts from the first one's weights alone
    (experiments.carry_weights) is a new run, with no explorer state, and configs/frozenlake.yaml's task selector
    reads the training maps from the first again, in the same order; resumed from the run's folder instead, it
    goes on past them."""

    def fresh_run(machine):
        config = cluster.with_plan(resolve_config(load_yaml(REPO / "configs" / "frozenlake.yaml"), {
            "model.model_path": str(config_only_model(machine / "model")),
            "buffer.explorer_input.taskset.path": str(frozenlake_data), "buffer.explorer_input.eval_tasksets": [],
            "buffer.batch_size": 8, "buffer.total_steps": 4, "checkpoint_root_dir": str(machine / "ckpt")}),
            cluster.plan_cluster(1, 1, 1, None))
        return build_trinity_config(write_yaml(config, machine / "config.yaml"), run_frozen_lake)

    _, first, _ = explore(fresh_run(tmp_path / "hold1"), state_manager, stop_after=2)
    _, carried, _ = explore(fresh_run(tmp_path / "hold2"), state_manager)
    assert first == {1: list(range(8)), 2: list(range(8, 16))} and {s: carried[s] for s in (1, 2)} == first
    _, resumed, _ = explore(fresh_run(tmp_path / "hold1"), state_manager)  # from its folder: goes on
    assert resumed == {3: list(range(16, 24)), 4: list(range(24, 32))}


def test_a_relaunch_that_finds_the_named_checkpoint_torn_goes_on_from_the_one_before(bots_run, state_manager,
                                                                                       tmp_path):
    """Killed while the step the tracker names was being written again (the save after the trainer's loop): its
    model shard is cut short. The relaunch sets it aside, loads step 2, and ends where an unkilled run ends."""
    job = tmp_path / "ckpt" / bots_run.project / bots_run.name
    whole = copy.deepcopy(bots_run)
    whole.checkpoint_job_dir = str(tmp_path / "uninterrupted")
    _, reference, reference_posteriors = explore(whole, state_manager)

    explore(bots_run, state_manager, stop_after=6)
    trainer_saved(job, 2)
    trainer_saved(job, 4)
    shard = job / "global_step_4" / "actor" / "model_world_size_1_rank_0.pt"
    shard.write_bytes(shard.read_bytes()[:100])
    point = run_state.rewind(job)
    assert (point.trainer_step, point.explorer_step) == (2, 2)
    fell_back, rewound = point.message.split("\n")
    assert fell_back == ("resuming: the checkpoint of step 4 is incomplete (model_world_size_1_rank_0.pt is cut "
                         "short) and is kept as incomplete_global_step_4; going on from step 2, the newest complete "
                         "checkpoint")
    assert "goes back from step 6 to step 2" in rewound
    assert run_state.tracker_step(job) == 2 and not (job / "global_step_4").exists()

    _, resumed, posteriors = explore(bots_run, state_manager)
    assert sorted(resumed) == [3, 4, 5, 6, 7, 8]
    assert resumed == {step: reference[step] for step in resumed}, "the same tasks as the uninterrupted run"
    assert all(np.array_equal(a, b) for a, b in zip(posteriors, reference_posteriors))
    assert run_state.rewind(job).message.count("\n") == 0, "set aside once: the next relaunch finds step 2 whole"


def test_a_torn_first_checkpoint_starts_the_trainer_again(tmp_path):
    trainer_saved(tmp_path, 3)
    (tmp_path / "global_step_3" / "actor" / "optim_world_size_1_rank_0.pt").write_bytes(b"")  # killed once truncated
    point = run_state.rewind(tmp_path)
    assert point == run_state.ResumePoint(0, 0, point.message)
    assert point.message == ("resuming: the checkpoint of step 3 is incomplete (optim_world_size_1_rank_0.pt is "
                             "cut short) and is kept as incomplete_global_step_3; no complete checkpoint before it, "
                             "so the trainer starts again from the model")
    assert not (tmp_path / run_state.TRACKER).exists()


def test_without_the_rewind_the_explorer_would_skip_the_lost_steps(bots_run, state_manager, tmp_path):
    """The control: Trinity alone resumes the explorer at its own step, past the trainer's checkpoint."""
    job = tmp_path / "ckpt" / bots_run.project / bots_run.name
    explore(bots_run, state_manager, stop_after=6)
    trainer_saved(job, 4)
    _, resumed, _ = explore(bots_run, state_manager)
    assert sorted(resumed) == [7, 8], "steps 5 and 6 were explored, but never trained into a saved model"


def test_state_files_are_written_whole(state_manager, tmp_path):

    manager = state_manager(path=str(tmp_path), explorer_name="explorer", trainer_name="trainer")
    manager.save_explorer(3, [{"current_index": 12}])
    manager.save_trainer(3, {})
    with pytest.raises(TypeError):  # a write that dies half way, as a kill would end it
        manager.save_explorer(4, [{"current_index": 16, "posteriors": object()}])
    assert manager.load_explorer() == {"latest_iteration": 3, "taskset_states": [{"current_index": 12}]}
    assert manager.load_trainer()["latest_iteration"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["explorer_meta.json", "explorer_meta.step_3.json",
                                                          "trainer_meta.json"], "no temporary file left"


def test_trinitys_own_write_leaves_an_unreadable_state_on_failure(tmp_path):
    """Why the patch exists: Trinity-RFT 0.6.0 streams the JSON into the file it replaces."""
    from trinity.manager.state_manager import StateManager

    from rftkit.patches.apply import applied

    assert applied(StateManager.save_explorer) == [], "unpatched here"
    manager = StateManager(path=str(tmp_path), explorer_name="explorer")
    manager.save_explorer(3, [{"current_index": 12}])
    with pytest.raises(TypeError):
        manager.save_explorer(4, [{"current_index": 16, "posteriors": object()}])
    assert manager.load_explorer() == {}, "Trinity would restart the explorer at step 0, its selector fresh"


def test_old_explorer_states_go_once_the_trainer_has_saved_past_them(state_manager, tmp_path):
    manager = state_manager(path=str(tmp_path), explorer_name="explorer")
    for step in (4, 8):
        manager.save_explorer(step, [])
    trainer_saved(tmp_path, 8)
    manager.save_explorer(12, [])
    assert sorted(p.name for p in tmp_path.glob("explorer_meta.step_*.json")) == [
        "explorer_meta.step_12.json", "explorer_meta.step_8.json"]
    manager.save_explorer(16, [])
    trainer_saved(tmp_path, 16)
    manager.save_explorer(20, [])  # step 8's copy stays: a relaunch that finds step 16 torn goes back to it
    assert sorted(p.name for p in tmp_path.glob("explorer_meta.step_*.json")) == [
        "explorer_meta.step_12.json", "explorer_meta.step_16.json", "explorer_meta.step_20.json",
        "explorer_meta.step_8.json"]


def test_rewind_says_what_it_cannot_do(tmp_path):
    assert run_state.rewind(tmp_path / "nothing yet") == run_state.ResumePoint(0, 0, "")
    (tmp_path / "explorer_meta.json").write_text(json.dumps({"latest_iteration": 6, "taskset_states": []}))
    trainer_saved(tmp_path, 4)  # no copy of step 4 kept: the run was not written by a patched worker
    point = run_state.rewind(tmp_path)
    assert (point.trainer_step, point.explorer_step) == (4, 6)
    assert "explore steps 5-6 are lost" in point.message and "ends 2 step(s) early" in point.message

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "explorer_meta.json").write_text(json.dumps({"latest_iteration": 2, "taskset_states": []}))
    point = run_state.rewind(fresh)  # killed before the trainer's first checkpoint: both start again
    assert point == run_state.ResumePoint(0, 0, point.message) and "starts again too" in point.message
    assert not (fresh / "explorer_meta.json").exists() and (fresh / "explorer_meta.step_2.json").exists()

    (tmp_path / "explorer_meta.json").write_text('{"latest_iteration": 6, "taskset_st')
    with pytest.raises(InputError, match="explorer_meta.json cannot be read"):
        run_state.rewind(tmp_path)
    (tmp_path / run_state.TRACKER).write_text("")
    with pytest.raises(InputError, match="does not hold a step number"):
        run_state.rewind(tmp_path)


FATAL = "ERROR 12-01 10:00:00 [explorer.py:1] Error in Explorer: RayActorError: the actor died\n"


def test_a_resumed_launch_reads_only_its_own_log_lines(tmp_path):
    """The killed run's dying words are in the logs a resumed run appends to; they are not the new run's."""
    log = tmp_path / "explorer.log"
    log.write_text("INFO 12-01 10:00:00 [explorer.py:1] Explore step 6 started.\n" + FATAL)
    assert supervise.first_fatal_error(tmp_path) is not None
    since = supervise.log_sizes(tmp_path)
    assert supervise.first_fatal_error(tmp_path, since) is None

    stopped = []
    with supervise.Watchdog(tmp_path, lambda: stopped.append(True), lambda e: None, interval=0.05,
                            since=since) as watchdog:
        watchdog.finished.wait(0.3)
    assert not stopped and watchdog.error is None

    with log.open("a") as f:
        f.write(FATAL.replace("10:00:00", "11:00:00"))
    error = supervise.first_fatal_error(tmp_path, since)
    assert error is not None and error.timestamp == "12-01 11:00:00"
