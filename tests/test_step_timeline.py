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
    (["--steps", "9:3"], "--steps 9:3: expected A:B"),
    (["--steps", "900:901"], "--steps 900:901: the run's trainer logged steps 1 to 62"),
])
def test_bad_steps_are_refused_with_one_line(tmp_path, args, message):
    result = run(RUN, *args, "--out", tmp_path / "out")
    assert result.returncode == 2 and result.stderr.startswith(f"error: {message}")
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_no_run_is_refused(tmp_path):
    result = run(tmp_path, "--out", tmp_path / "out")
    assert result.returncode == 2 and "no monitor/tensorboard/trainer" in result.stderr


def test_samples_written_by_nvidia_smi_are_read_back_on_the_epoch(tmp_path, monkeypatch):
    """A fixture nvidia-smi that prints two GPUs' lines in its local-time format, as the real one does with -lms,
    until it is stopped."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho \"$@\" > " + str(tmp_path / "args") + "\n"
                   "while true; do d=$(date '+%Y/%m/%d %H:%M:%S.000'); echo \"$d, 0, 87, 1024\"; "
                   "echo \"$d, 1, 0, [N/A]\"; sleep 0.1; done\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    before = time.time()
    with gpu_samples.sampled(tmp_path / "run") as path:
        time.sleep(0.5)
    samples = gpu_samples.read(path)
    assert samples and all(s.gpu == 0 and s.utilization == 87 for s in samples)  # [N/A] lines are skipped
    assert all(before - 1.5 <= s.at <= time.time() + 1 for s in samples)
    assert "-i 0,1" in (tmp_path / "args").read_text()
    count = len(samples)
    time.sleep(0.3)
    assert len(gpu_samples.read(path)) == count, "the sampler stopped with the block"


def test_no_nvidia_smi_no_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with gpu_samples.sampled(tmp_path / "run") as path:
        assert path is None
    assert not (tmp_path / "run").exists()
