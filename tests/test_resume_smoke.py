"""tests/gpu/resume_smoke.py: its checks catch what they claim to (on CPU), and, on a machine with a CUDA GPU,
a BOTS launch killed with SIGKILL after step 3 and started again finishes its 6 steps from the checkpoint."""

import json
import subprocess
import sys

import pytest

from rftkit.trinity_plugins.digest import RESTORED, posterior_digest
from tests.gpu import resume_smoke

from conftest import REPO, write_checkpoint
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


def test_a_relaunch_killed_again_is_checked_as_far_as_it_got(tmp_path):
    """tests/gpu/kill_anywhere.py: a killed relaunch trained 4 and 5 of 6 and was killed; nothing after is asked."""
    for step in (3, 4, 5):
        (tmp_path / f"global_step_{step}" / "actor" / "huggingface").mkdir(parents=True)
    logs = "\n".join([f"INFO ... Load from checkpoint folder: {tmp_path}/global_step_3",
                      *(f"INFO ... Training at step {n} finished." for n in (4, 5)),
                      *(f"INFO ... Explore step {n} started." for n in (4, 5, 6))])
    relaunch = "\n".join(["resuming from the trainer's checkpoint at step 3: ...",
                          f"(Explorer pid=1) {RESTORED} the posteriors of 2 tasks at index 12 "
                          f"(digest {KILLED['digests'][3]})"])
    checks = resume_smoke.check_resume(KILLED, relaunch, logs, tmp_path, STEPS, None, killed_again=True)
    assert failed(checks) == [] and not any("exits 0" in check.name for check in checks)
    skipped = resume_smoke.check_resume(KILLED, relaunch, logs.replace("step 4 finished", "step 2 finished"),
                                        tmp_path, STEPS, None, killed_again=True)
    assert failed(skipped) == ["the trainer trained steps 4-5 once each"]


def kill_test_job(tmp_path):
    job = tmp_path / "checkpoints" / "AgentScope" / "run"
    (job / "log").mkdir(parents=True)
    return job


def test_the_kill_during_a_save_waits_for_a_folder_past_the_first_checkpoint(tmp_path):
    from rftkit.checkpoints import TRACKER
    from tests.gpu.kill_anywhere import kill_moment

    job = kill_test_job(tmp_path)
    now = kill_moment(tmp_path / "checkpoints", during_save=True, delay=0)
    write_checkpoint(job / "global_step_1")  # the first save, under way: too early for "after a checkpoint"
    assert not now()
    (job / TRACKER).write_text("1")
    assert not now()  # saved, and no save under way
    assert not now.fired
    (job / "global_step_2" / "actor").mkdir(parents=True)
    assert now() and now.fired


def test_a_random_kill_comes_its_delay_after_the_launch_has_trained_a_step(tmp_path, monkeypatch):
    from rftkit.checkpoints import TRACKER
    from tests.gpu import kill_anywhere

    job = kill_test_job(tmp_path)
    (job / TRACKER).write_text("2")  # where an earlier launch was killed
    clock = [100.0]
    monkeypatch.setattr(kill_anywhere.time, "monotonic", lambda: clock[0])
    now = kill_anywhere.kill_moment(tmp_path / "checkpoints", during_save=False, delay=7.5)
    clock[0] += 60
    assert not now()  # nothing trained since this launch started
    (job / TRACKER).write_text("3")
    assert not now()
    clock[0] += 7
    assert not now()
    clock[0] += 0.5
    assert now()


def test_the_relaunch_is_expected_at_the_newest_complete_checkpoint_the_tracker_allows(tmp_path):
    from rftkit.checkpoints import TRACKER
    from rftkit.trinity_plugins.digest import posterior_digest
    from tests.gpu.kill_anywhere import state_at_kill

    job = kill_test_job(tmp_path)
    for step in (2, 3, 4):
        write_checkpoint(job / f"global_step_{step}")
    (job / "global_step_3" / "actor" / "optim_world_size_1_rank_0.pt").write_bytes(b"PK")  # torn
    (job / TRACKER).write_text("3")
    for step in (3, 4):
        state = {"latest_iteration": step, "taskset_states": [{"alphas": [step, 1], "betas": [1, step]}]}
        (job / f"explorer_meta.step_{step}.json").write_text(json.dumps(state))
    (job / "explorer_meta.json").write_text(json.dumps(state))
    killed = state_at_kill(job)
    assert (killed["tracker"], killed["trainer_step"], killed["explorer_step"]) == (3, 2, 4)
    assert killed["digests"] == {3: posterior_digest([3, 1], [1, 3]), 4: posterior_digest([4, 1], [1, 4])}


@needs_gpus
def test_gpu_a_bots_run_killed_five_times_ends_as_if_never_killed(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tests.gpu.kill_anywhere", "--out", str(tmp_path)], cwd=REPO,
                            timeout=3 * 3600)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert result.returncode == 0, [check for check in summary["checks"] if not check["ok"]]


def test_the_kill_test_passes_a_run_that_resumes_right_and_catches_one_that_does_not(tmp_path, monkeypatch):
    """tests/gpu/kill_anywhere.py's whole loop on a CPU, with a fixture stand-in for the launch
    (tests/fixture_bots_run.py): it kills, records and relaunches, and its checks fail a run that restarts its
    explorer from the wrong step."""
    from rftkit import cluster
    from tests.gpu import kill_anywhere

    monkeypatch.setattr(cluster, "ray_cli", lambda *args: None)  # no Ray head here to stop
    monkeypatch.setattr(kill_anywhere, "wait_for_free_gpus", lambda: True)

    def weights_there(job, step):  # the fixture's weights are no model transformers could load
        return resume_smoke.Check("the HF weights are there", any(job.glob(f"global_step_{step}/actor/huggingface/*")))

    monkeypatch.setattr(kill_anywhere, "loads_with_transformers", weights_there)

    def fixture_run(args, script="tests/fixture_bots_run.py"):
        out = args.out.resolve()
        checkpoints = out / "work" / "checkpoints"
        out.mkdir(parents=True, exist_ok=True)
        return out, checkpoints, [sys.executable, script, str(checkpoints), str(args.steps)]

    monkeypatch.setattr(kill_anywhere, "prepare_run", fixture_run)
    kills_on_record = []  # at each launch's start: the kills summary.json lists already (a cut-short test keeps them)

    def launch_watched(*args, real_run_step=kill_anywhere.run_step, **kwargs):
        summary = tmp_path / "right" / "summary.json"
        kills_on_record.append(len(json.loads(summary.read_text())["kills"]) if summary.exists() else 0)
        return real_run_step(*args, **kwargs)

    monkeypatch.setattr(kill_anywhere, "run_step", launch_watched)
    flags = ["--kills", "3", "--steps", "6", "--window", "1"]
    assert kill_anywhere.main(["--out", str(tmp_path / "right"), *flags]) == 0
    assert kills_on_record == [0, 1, 2, 3]
    summary = json.loads((tmp_path / "right" / "summary.json").read_text())
    assert [kill["moment"] for kill in summary["kills"]][:2] == ["during a save", "Ctrl-C during a save"]
    assert len(summary["kills"]) == 3 and summary["kills"][0]["trainer_step"] >= 1
    assert all(check["ok"] for check in summary["checks"]), [c for c in summary["checks"] if not c["ok"]]
    assert sum("Ctrl-C during the save of step" in check["name"] for check in summary["checks"]) == 1

    # A launch that exits at once on Ctrl-C, leaving its save half-written, fails the Ctrl-C checks.
    hasty = (REPO / "tests" / "fixture_bots_run.py").read_text().replace(
        "interrupted.append(signum)\n", "sys.exit(130)\n")
    (tmp_path / "hasty.py").write_text(hasty)
    monkeypatch.setattr(kill_anywhere, "prepare_run", lambda args: fixture_run(args, str(tmp_path / "hasty.py")))
    assert kill_anywhere.main(["--out", str(tmp_path / "hasty"), "--kills", "2", "--steps", "6", "--window", "1"]) == 1
    failures = {c["name"] for c in json.loads((tmp_path / "hasty" / "summary.json").read_text())["checks"]
                if not c["ok"]}
    assert any("ended complete" in name for name in failures), failures

    # A launch that finishes one more step after Ctrl-C and names that one passes.
    monkeypatch.setenv("STEPS_AFTER_CTRL_C", "1")
    monkeypatch.setattr(kill_anywhere, "prepare_run", fixture_run)
    assert kill_anywhere.main(["--out", str(tmp_path / "on"), "--kills", "2", "--steps", "8", "--window", "1"]) == 0
    checks = json.loads((tmp_path / "on" / "summary.json").read_text())["checks"]
    named = next(c["detail"] for c in checks if "names the newest complete checkpoint" in c["name"])
    saving = next(k for k in json.loads((tmp_path / "on" / "summary.json").read_text())["kills"]
                  if k["moment"] == "Ctrl-C during a save")
    assert f"(step {saving['saving'] + 1})" in named, (named, saving)
    monkeypatch.delenv("STEPS_AFTER_CTRL_C")

    wrong = (REPO / "tests" / "fixture_bots_run.py").read_text().replace(
        'log.write(f"INFO Explore step {step} started.\\n")', 'log.write(f"INFO Explore step {step + 1} started.\\n")')
    (tmp_path / "wrong.py").write_text(wrong)
    monkeypatch.setattr(kill_anywhere, "prepare_run", lambda args: fixture_run(args, str(tmp_path / "wrong.py")))
    assert kill_anywhere.main(["--out", str(tmp_path / "wrong"), "--kills", "1", "--steps", "3"]) == 1
    failures = {c["name"] for c in json.loads((tmp_path / "wrong" / "summary.json").read_text())["checks"]
                if not c["ok"]}
    assert failures and all("the explorer went on from step" in name for name in failures)
