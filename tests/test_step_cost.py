"""gpu/step_cost.py up to the GPU: its launches pass Trinity's checker at real scale, and its summary."""

import subprocess

import pytest
from torch.utils.tensorboard import SummaryWriter

from gpu import step_cost

from conftest import REPO


@pytest.mark.parametrize("example,expected", [
    ("frozenlake", "group 16, batch 32 tasks (512 experiences), lr 1e-06"),
    ("math", "group 8, batch 16 tasks (128 experiences), lr 1e-06"),
])
def test_the_real_scale_launch_passes_trinitys_checker(example, expected, tmp_path):
    (tmp_path / "model").mkdir()
    command = step_cost.command(example, tmp_path / "model", tmp_path / "work", tmp_path / "ckpt", 4, 256)
    result = subprocess.run([*command, "--dry-run", "--gpus", "2"], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert expected in result.stdout and "response 256" in result.stdout


def test_the_summary_leaves_out_the_first_step_and_estimates_a_full_run(tmp_path):
    run = tmp_path / "run"
    trainer = SummaryWriter(str(run / "monitor" / "tensorboard" / "trainer"))
    for step, (seconds, wall) in enumerate([(50.0, 1100.0), (10.0, 1120.0), (12.0, 1140.0)], start=1):
        trainer.add_scalar("time/train_step", seconds, step, walltime=wall)
        trainer.add_scalar(step_cost.TRAINER_PEAK, 30.0 + step, step, walltime=wall)
    trainer.close()
    explorer = SummaryWriter(str(run / "monitor" / "tensorboard" / "explorer"))
    explorer.add_scalar("explorer/time/wait_explore_step", 7.0, 2, walltime=1119.0)
    explorer.close()
    result = step_cost.summarize(run, launched_at=1000.0, estimate_steps=100)
    per_step = result["seconds per step (mean of steps 2..)"]
    assert per_step["train step"] == pytest.approx(11.0) and per_step["rollout wait (explorer)"] == 7.0
    assert per_step["weight sync"] is None
    assert result["seconds to first step"] == pytest.approx(100.0)
    assert result["wall seconds between steps"] == pytest.approx(20.0)
    assert result["estimate for 100 steps (hours)"] == pytest.approx((100 + 100 * 20) / 3600)
    assert result["trainer peak allocated (GiB)"] == 33.0
