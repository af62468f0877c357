"""runkit/steps.py, the one step runner: progress, the time limit (a kill, or an interrupt as Ctrl-C would),
Ctrl-C passed on, a failed step's log."""

import subprocess
import sys
import time

import pytest

from runkit import steps

from conftest import REPO


def test_after_an_interrupt_the_script_waits_for_the_gpus_and_says_what_still_holds_them(capsys):
    listings = iter([["412, VLLM::EngineCore"], ["412, VLLM::EngineCore"], []])
    assert steps.wait_for_free_gpus(timeout=30, interval=0.01, processes=lambda: next(listings))
    assert steps.wait_for_free_gpus(timeout=0.05, interval=0.01, processes=lambda: ["99, ray::WorkerDict"]) is False
    assert "still hold GPU memory: 99, ray::WorkerDict" in capsys.readouterr().out


def test_training_past_its_time_budget_is_interrupted_like_ctrl_c(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(steps, "gpu_processes", lambda: [])  # no nvidia-smi here
    # as Trinity's launcher: the first Ctrl-C waits for the actors to shut down, the second cuts it short
    launch = ("import time\n"
              "try:\n    print('training', flush=True); time.sleep(60)\n"
              "except KeyboardInterrupt:\n"
              "    print('shutting down the actors', flush=True)\n"
              "    try:\n        time.sleep(60)\n"
              "    except KeyboardInterrupt:\n        print('stopping the Ray head', flush=True)\n"
              "raise SystemExit(130)\n")
    monkeypatch.setattr(steps, "INTERRUPT_GRACE_S", (1, 20))
    started = time.monotonic()
    assert steps.run_step([sys.executable, "-c", launch], tmp_path / "train.log", timeout=2, on_timeout="interrupt",
                          check=True).interrupted
    assert time.monotonic() - started < 30
    assert "after the first SIGINT, exit code 130" in capsys.readouterr().out
    assert (tmp_path / "train.log").read_text().splitlines() == \
        ["training", "shutting down the actors", "stopping the Ray head"]


def test_the_time_limit_reaches_a_step_even_when_the_script_was_started_with_sigint_ignored(tmp_path):
    """Seen on the GPU machine: started as a background job (`setsid nohup ... &`), SIGINT was ignored all
    the way down, and the launch sat through both SIGINTs until it was killed."""
    step = ("import time\n"
            "try:\n    print('training', flush=True); time.sleep(60)\n"
            "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n")
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background job of a script starts with\n"
              "from pathlib import Path\n"
              "from runkit import steps\n"
              "steps.gpu_processes = lambda: []\n"
              "steps.INTERRUPT_GRACE_S = (20, 20)\n"
              f"started = time.monotonic()\n"
              f"steps.run_step([sys.executable, '-c', {step!r}], "
              f"Path({str(tmp_path / 'train.log')!r}), timeout=2, on_timeout='interrupt', check=True)\n"
              "print('took', round(time.monotonic() - started))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "train.log").read_text().splitlines() == ["training", "interrupted"]
    assert int(result.stdout.split("took")[-1]) < 15  # the first SIGINT did it, not the kill after 40 s


def test_ctrl_c_on_the_script_is_passed_on_to_the_step_in_its_own_session(tmp_path, monkeypatch):
    def pressed_ctrl_c(log_file):  # the first progress line is where the script is when Ctrl-C comes
        raise KeyboardInterrupt

    monkeypatch.setattr(steps, "PROGRESS_S", 0.5)
    monkeypatch.setattr(steps, "last_line", pressed_ctrl_c)
    monkeypatch.setattr(steps, "INTERRUPT_GRACE_S", (20, 20))
    step = ("import time\n"
            "try:\n    print('evaluating', flush=True); time.sleep(60)\n"
            "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n")
    with pytest.raises(KeyboardInterrupt):
        steps.run_step([sys.executable, "-c", step], tmp_path / "eval.log", check=True)
    assert (tmp_path / "eval.log").read_text().splitlines() == ["evaluating", "interrupted"]


def test_training_that_fails_before_its_budget_stops_the_script_with_the_log(tmp_path):
    with pytest.raises(SystemExit, match="exit code 3(.|\n)*out of memory"):
        steps.run_step([sys.executable, "-c", "print('out of memory'); raise SystemExit(3)"],
                       tmp_path / "train.log", timeout=5 * 60, on_timeout="interrupt", check=True)
    assert steps.run_step([sys.executable, "-c", "pass"], tmp_path / "ok.log", timeout=5 * 60, on_timeout="interrupt",
                          check=True).interrupted is False


def test_a_launch_that_ends_leaves_ray_alone_and_a_killed_one_has_its_ray_head_stopped(tmp_path, monkeypatch):
    """A launch that ends stops the Ray head it started and leaves a user's own cluster running."""
    from rftkit import cluster

    stops = []
    monkeypatch.setattr(cluster, "ray_cli", lambda *args: stops.append(args))
    code = steps.run_step([sys.executable, "-c", "print('done')"], tmp_path / "ends.log", label="ends", timeout=60).code
    assert (code, stops) == (0, [])
    step = steps.run_step([sys.executable, "-c", "import time; time.sleep(120)"], tmp_path / "hangs.log",
                          label="hangs", timeout=1)
    code, seconds = step.code, step.seconds
    assert code is None and seconds < 60
    assert stops == [("stop", "--force")]
