"""scripts/step_timeline.py on a real run's folder (the kept BOTS run, one H200, 2026-12-05), and
rftkit.gpu_samples with a fixture nvidia-smi (named as such)."""

import importlib.util
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO
from rftkit import gpu_samples
from rftkit.reports.tensorboard import FINISHED_TASKS, ROLLOUT_WAIT, Point, over_rollout_waits

RUN = REPO / "docs/bots/pair2/random/checkpoints/AgentScope-MathBOTS/math-random"
spec = importlib.util.spec_from_file_location("step_timeline", REPO / "scripts" / "step_timeline.py")
step_timeline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step_timeline)


def run(*args):
    return subprocess.run([sys.executable, "scripts/step_timeline.py", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def rows(markdown: str) -> dict[str, tuple[str, str]]:
    found = re.findall(r"^\| ([^|]+) \| ([^|]*) \| ([^|]*) \|", markdown, re.M)
    return {what: (seconds, share) for what, seconds, share in found[1:]}


def test_a_real_runs_steps_add_up_within_their_wall_time(tmp_path):
    result = run(RUN, "--steps", "30:34", "--out", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    table = rows((tmp_path / "timeline.md").read_text())
    seconds = {what: float(value) for what, (value, _) in table.items() if value}
    wall = seconds["trainer step, wall time"]
    parts = sum(seconds[f"trainer: {phase}"] for phase in
                ("waiting for experiences", "train step", "weight sync", "checkpoint save"))
    assert 0.9 * wall <= parts <= 1.02 * wall  # the phases fill the step, and never overlap past it
    inside = seconds["trainer: reference log-probs"] + seconds["trainer: actor update"]
    assert inside <= seconds["trainer: train step"]
    assert all(float(share.rstrip("%")) <= 100 for _, share in table.values() if share)
    assert "not sampled" in result.stdout  # this run predates gpu_samples.csv
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_a_frozenlake_runs_rollouts_split_into_model_calls_and_the_rest_with_the_gpus_samples(tmp_path):
    """The sweep's whole-model run (one H100, 2026-12-06), kept with its GPU samples and its workflow's call times."""
    result = run(REPO / "docs/learning/sweep1/whole_1e-6/run", "--steps", "2:10", "--out", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    table = rows((tmp_path / "timeline.md").read_text())
    seconds = {what: float(value) for what, (value, _) in table.items() if value}
    whole = seconds["a rollout, whole"]
    assert seconds["a rollout: its model calls"] + seconds["a rollout: the rest"] == pytest.approx(whole, abs=0.01)
    assert 0 < seconds["a model call"] < seconds["a rollout: its model calls"]
    busy, idle = (float(table[f"GPU 0 {what}"][1].rstrip("%")) for what in ("busy (utilization)",
                                                                               "idle (samples at 0%)"))
    assert 0 < busy < 100 and 0 < idle < 100
    # from the kept launch config (16 rollouts a map, 8 runners x 4 at once): fewer going than the 32 in flight
    going = re.search(r"\| episodes going at once \|  \|  \| ([\d.]+) on average", result.stdout)
    assert going and 1 < float(going.group(1)) < 32
    pace = float(re.search(r"\| episodes a second \|  \|  \| ([\d.]+) finished", result.stdout).group(1))
    # Little's law: the episodes going at once are the episodes a second times an episode's seconds
    assert pace * seconds["a rollout, whole"] == pytest.approx(float(going.group(1)), rel=0.35)


def test_episodes_going_at_once_is_episodes_times_their_time_over_the_wait():
    series = {ROLLOUT_WAIT: [(1, 10.0), (2, 5.0)], FINISHED_TASKS: [(1, 8.0), (2, 8.0)],
              step_timeline.EPISODE: [(1, 0.5), (2, 1.0)]}  # each logged at 100 s x its step
    explorer = {tag: [Point(step, value, 100.0 * step) for step, value in points] for tag, points in series.items()}
    # step 1: 8 tasks x 4 rollouts x 0.5 s = 16 episode-seconds in 10 s; step 2: 32 in 5 s
    assert over_rollout_waits(explorer, step_timeline.EPISODE, 4, 0, 300) == pytest.approx(48 / 15)
    assert over_rollout_waits(explorer, step_timeline.EPISODE, 4, 150, 300) == pytest.approx(32 / 5)  # step 2 alone
    assert over_rollout_waits(explorer, step_timeline.EPISODE, 4, 300, 400) is None
    assert over_rollout_waits(explorer, None, 4, 0, 300) == pytest.approx(64 / 15)  # episodes a second


def test_a_run_without_its_launch_config_takes_the_group_from_the_flag(tmp_path):
    """A kept run without its launch config: without --group there is no count of the episodes; with it, the
    same count the config would give."""
    kept = REPO / "docs/learning/long/hold3/run"
    assert not (kept / "config.yaml").exists()
    assert "episodes a second" not in run(kept, "--steps", "10:20", "--out", tmp_path / "a").stdout
    result = run(kept, "--steps", "10:20", "--out", tmp_path / "b", "--group", 16)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"\| episodes a second \|  \|  \| [\d.]+ finished", result.stdout)
    refused = run(kept, "--out", tmp_path / "c", "--group", 0)
    assert refused.returncode == 2 and "--group" in refused.stderr and "at least 1" in refused.stderr


def test_consecutive_trainer_steps_do_not_overlap():
    trainer = step_timeline.read_points(RUN / "monitor" / "tensorboard" / "trainer")
    waits = step_timeline.syncs_while_waiting(RUN / "log" / "trainer.log")
    steps = [p.step for p in trainer["time/train_step"]]
    spans = [step_timeline.trainer_spans(trainer, step, step in waits) for step in steps]
    outer = [(min(s for _, s, _ in found), max(e for _, _, e in found)) for found in spans]
    assert all(later[0] >= earlier[1] - 0.5 for earlier, later in zip(outer, outer[1:]))


def test_a_sync_is_placed_where_the_trainers_log_says_it_ran(tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text("Training at step 4 finished.\nTrainer sync_weights at step 4 started.\n"
                   "Training at step 5 finished.\nSample data for step 6 started.\n"
                   "Trainer sync_weights at step 5 started.\nTraining at step 6 finished.\n")
    assert step_timeline.syncs_while_waiting(log) == {6}


@pytest.mark.parametrize("args,message", [
    (["--steps", "9:3"], "--steps: expected A:B, whole numbers with 1 <= A <= B, got 9:3"),
    (["--steps", "900:901"], "--steps 900:901: the run's trainer logged steps 1 to 62"),
])
def test_bad_steps_are_refused_with_one_line(tmp_path, args, message):
    result = run(RUN, *args, "--out", tmp_path / "out")
    assert result.returncode == 2 and result.stderr.startswith(f"error: {message}")
    assert not (tmp_path / "out").exists()


def test_a_kept_config_that_cannot_give_the_group_is_named_as_the_runs(tmp_path):
    """The rollouts per task come from the run's kept config, which the user did not give by a flag."""
    import shutil

    run_dir = tmp_path / "project" / "run"
    shutil.copytree(RUN, run_dir)
    (run_dir / "config.yaml").write_text("algorithm: {repeat_times: eight}\n")
    result = run(run_dir, "--out", tmp_path / "out")
    assert result.returncode == 2 and result.stderr.strip() == (
        f"error: the run's launch config {run_dir / 'config.yaml'}: algorithm.repeat_times is 'eight'; expected a "
        f"whole number of rollouts a task, 1 or more")
    (run_dir / "config.yaml").write_text("algorithm: [\n")
    result = run(run_dir, "--out", tmp_path / "out")
    said = f"the run's launch config {run_dir / 'config.yaml'}: not valid YAML"
    assert result.returncode == 2 and said in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_no_run_is_refused(tmp_path):
    result = run(tmp_path, "--out", tmp_path / "out")
    assert result.returncode == 2 and "no monitor/tensorboard/trainer" in result.stderr
    trainer = tmp_path / "monitor" / "tensorboard" / "trainer"
    trainer.mkdir(parents=True)
    (trainer / "events.out.tfevents.1.host").write_bytes(b"cut short")
    result = run(tmp_path, "--out", tmp_path / "out")
    assert result.returncode == 2 and result.stderr.startswith(
        f"error: RUN {tmp_path}: its trainer logged no time/train_step")
    assert not (tmp_path / "out").exists()


def test_samples_from_nvidia_smi_are_kept_with_their_time_and_stop_with_the_block(tmp_path, monkeypatch):
    """A fixture nvidia-smi that answers for two GPUs as the real one does, the second without a reading."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho \"$@\" > " + str(tmp_path / "args") + "\necho '0, 87, 1024'\n"
                   "echo '1, [N/A], [N/A]'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    before = time.time()
    with gpu_samples.sampled(tmp_path / "run", interval_s=0.1) as path:
        time.sleep(0.5)
    after = time.time()
    samples = gpu_samples.read(path)
    assert len(samples) >= 2 and all(s.gpu == 0 and s.utilization == 87 and s.memory_mib == 1024 for s in samples)
    # written to 0.01 s, so a time may round past either end by up to 0.005 s
    assert all(before - 0.01 <= s.at <= after + 0.01 for s in samples) and samples == sorted(samples)
    assert "-i 0,1" in (tmp_path / "args").read_text()
    time.sleep(0.3)
    assert len(gpu_samples.read(path)) == len(samples), "the sampling stopped with the block"


def test_no_nvidia_smi_no_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with gpu_samples.sampled(tmp_path / "run") as path:
        assert path is None
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("in_wait", [True, False])
def test_a_sync_is_drawn_after_the_train_step_or_where_the_wait_begins(in_wait):
    """One step logged at t=100: 5 s of waiting, a 3 s train step, a 1 s sync, no save."""
    from rftkit.reports.tensorboard import Point

    trainer = {tag: [Point(7, value, 100.0)] for tag, value in
               (("time/read_experience", 5.0), ("time/train_step", 3.0), ("time/sync_weight", 1.0))}
    spans = {phase: (start, end) for phase, start, end in step_timeline.trainer_spans(trainer, 7, in_wait)}
    if in_wait:  # the sync is part of the wait, which then ends where the train step begins, at the log's time
        assert spans["train step"] == (97.0, 100.0) and spans["waiting for experiences"] == (92.0, 97.0)
        assert spans["weight sync"] == (92.0, 93.0)
    else:
        assert spans["weight sync"] == (99.0, 100.0) and spans["train step"] == (96.0, 99.0)
        assert spans["waiting for experiences"] == (91.0, 96.0)
