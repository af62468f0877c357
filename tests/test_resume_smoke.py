"""tests/gpu/resume_smoke.py: its checks catch what they claim to (on CPU), and, on a machine with a CUDA GPU,
a BOTS launch killed with SIGKILL after step 3 and started again finishes its 6 steps from the checkpoint."""

import json
import subprocess
import sys

import pytest

from rftkit.trinity_plugins.resumable_bots import RESTORED, posterior_digest
from tests.gpu import resume_smoke

from conftest import REPO
from test_gpu_smoke import needs_gpus

STEPS = 6
KILLED = {"trainer_step": 3, "explorer_step": 4,
          "digests": {3: posterior_digest([2, 1], [1, 3]), 4: posterior_digest([3, 1], [1, 4])}}


def resumed_run(tmp_path, trained=(4, 5, 6), explored=(4, 5, 6), digest=KILLED["digests"][3]):
    """What a relaunch that went right writes (or, with other arguments, one that did not)."""
    for step in (3, 4, 5, 6):
        (tmp_path / f"global_step_{step}" / "actor" / "huggingface").mkdir(parents=True)
    (tmp_path / "global_step_6" / "actor" / "huggingface" / "model.safetensors").write_bytes(b"")
    logs = "\n".join([f"INFO ... Load from checkpoint folder: {tmp_path}/global_step_3",
                      *(f"INFO ... Training at step {n} finished." for n in trained),
                      *(f"INFO ... Explore step {n} started." for n in explored)])
    relaunch = "\n".join(["resuming from the trainer's checkpoint at step 3: ...",
                          f"(Explorer pid=1) {RESTORED} the posteriors of 2 tasks at index 12 (digest {digest})",
                          f"training finished: {STEPS} step(s) in 40 s"])
    return resume_smoke.check_resume(KILLED, relaunch, logs, tmp_path, STEPS, 0)


def failed(checks):
    return [check.name for check in checks if not check.ok]


def test_a_good_resume_passes_every_check(tmp_path):
    assert failed(resumed_run(tmp_path)) == []


@pytest.mark.parametrize("change,caught", [
    ({"trained": (3, 4, 5, 6)}, "the trainer trained steps 4-6 once each"),
    ({"trained": (4, 5)}, "the trainer trained steps 4-6 once each"),
    ({"explored": (5, 6)}, "the explorer went on from step 4, each step once"),
    ({"explored": (4, 5, 5, 6)}, "the explorer went on from step 4, each step once"),
    ({"digest": KILLED["digests"][4]}, "the posteriors were restored from step 3's state"),
    ({"digest": posterior_digest([1, 1], [1, 1])}, "the posteriors were restored from step 3's state"),
])
def test_each_check_catches_its_failure(tmp_path, change, caught):
    assert failed(resumed_run(tmp_path, **change)) == [caught]


@needs_gpus
def test_gpu_a_killed_bots_run_resumes(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tests.gpu.resume_smoke", "--out", str(tmp_path)], cwd=REPO,
                            timeout=3600)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert result.returncode == 0, [check for check in summary["checks"] if not check["ok"]]
