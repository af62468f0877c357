"""A failed run ends and says so: fatal errors in Trinity's actor logs, the steps a run reached, the watchdog."""

import argparse
import threading
import time
from pathlib import Path

import pytest
import yaml

from frozenlake.workflow import run_frozen_lake
from rftkit import cluster, launch, supervise
from rftkit.overrides import load_yaml, resolve_config
from rftkit.trinity_config import validate

from conftest import REPO

TRACEBACK = """Traceback (most recent call last):
  File "trinity/explorer/explorer.py", line 299, in explore
    explore_contionue = await self.explore_step()
ModuleNotFoundError: No module named 'aiosqlite'"""


def log_line(level, when, message):
    """A record as Trinity's own formatter writes it to an actor's log file (multi-line messages included)."""
    import logging

    from trinity.utils.log import _LOG_DATE_FORMAT, _LOG_FORMAT, NewLineFormatter

    hour, minute, second = map(int, when.split(":"))
    record = logging.LogRecord("explorer", getattr(logging, level), "explorer.py", 308, message, None, None)
    record.created = time.mktime((2026, 11, 30, hour, minute, second, 0, 0, -1))
    return NewLineFormatter(_LOG_FORMAT, _LOG_DATE_FORMAT).format(record) + "\n"


def write_logs(log_dir, **files):
    log_dir.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        (log_dir / f"{name}.log").write_text("".join(lines))
    return log_dir


def test_the_earliest_fatal_error_is_found_with_its_traceback(tmp_path):
    logs = write_logs(
        tmp_path / "log",
        explorer=[log_line("INFO", "10:00:00", "Explore step 1 started."),
                  log_line("ERROR", "10:00:05", "Task 3 failed: see Error in Trainer"),  # not a marker
                  log_line("ERROR", "10:00:07", f"Error in Explorer: {TRACEBACK}"),
                  log_line("INFO", "10:00:08", "Explorer (explorer) finished.")],
        trainer=[log_line("ERROR", "10:00:09", "Error in Trainer:\nTraceback ...\nRuntimeError: later")],
    )
    error = supervise.first_fatal_error(logs)
    assert error.marker == "Error in Explorer" and error.log.name == "explorer.log"
    assert error.summary == "ModuleNotFoundError: No module named 'aiosqlite'"
    assert "explore_step()" in error.text and "finished" not in error.text
    assert "aiosqlite" in str(error) and str(error.log) in str(error)


def test_an_explorer_stopped_after_the_trainer_finished_is_not_a_failure(tmp_path):
    """Seen on GPUs: the Trainer reaches trainer.total_steps, Trinity shuts the Explorer's pipeline down
    under its running step, and the Explorer logs a fatal-looking error. The run did finish."""
    stopped = log_line("ERROR", "10:00:12", "Error in Explorer: Traceback\nRuntimeError: Experience pipeline "
                                            "is not initialized.")
    finished = log_line("INFO", "10:00:10", "--------------------\n> Trainer finished.\n--------------------")
    logs = write_logs(tmp_path / "log", explorer=[stopped], trainer=[finished])
    assert supervise.first_fatal_error(logs) is None
    early = write_logs(tmp_path / "early", trainer=[finished],
                       explorer=[log_line("ERROR", "10:00:05", f"Error in Explorer: {TRACEBACK}")])
    assert supervise.first_fatal_error(early).summary.endswith("aiosqlite'")
    trainer_failed = write_logs(tmp_path / "trainer", explorer=[stopped], trainer=[
        log_line("ERROR", "10:00:09", "Error in Trainer:\nTraceback\nRuntimeError: CUDA error"), finished])
    assert supervise.first_fatal_error(trainer_failed).summary == "RuntimeError: CUDA error"


def test_non_fatal_errors_and_info_lines_are_not_failures(tmp_path):
    logs = write_logs(tmp_path / "log", runner=[
        log_line("ERROR", "10:00:00", "Task 3 failed after 2 retries: ValueError"),
        log_line("INFO", "10:00:01", "no 'Error in Trainer' here: INFO level"),
    ])
    assert supervise.first_fatal_error(logs) is None
    assert supervise.first_fatal_error(tmp_path / "absent") is None


class Status:
    def __init__(self, success, error=None):
        self.success, self.error = success, error


@pytest.fixture
def trinity_config(tmp_path):
    """The validated config of a 2-step FrozenLake run, checkpoints under tmp_path."""
    raw = load_yaml(REPO / "configs" / "frozenlake.yaml")
    config = cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": str(tmp_path), "buffer.total_steps": 2}),
                               cluster.plan_cluster(1, 2, 1, None))
    return validate(config, run_frozen_lake)


def save_steps(trinity_config, explorer=None, trainer=None):
    from trinity.manager.state_manager import StateManager

    state = StateManager(trinity_config.checkpoint_job_dir, trainer_name=trinity_config.trainer.name,
                         explorer_name=trinity_config.explorer.name)
    if explorer is not None:
        state.save_explorer(current_step=explorer, taskset_states=[])
    if trainer is not None:
        state.save_trainer(current_step=trainer, sample_strategy_state={})


def test_a_run_that_stopped_before_its_last_step_is_not_finished(trinity_config):
    save_steps(trinity_config, explorer=2, trainer=1)
    result = supervise.outcome(Status(True), None, trinity_config)
    assert not result.success and (result.trainer_step, result.target_step) == (1, 2)
    assert "trainer saved step 1 of 2" in result.message
    save_steps(trinity_config, trainer=2)
    assert supervise.outcome(Status(True), None, trinity_config).success


def test_without_a_step_target_the_trainer_must_reach_the_explorer(trinity_config):
    trinity_config.buffer.total_steps = trinity_config.trainer.total_steps = None
    save_steps(trinity_config, explorer=5, trainer=4)
    assert not supervise.outcome(Status(True), None, trinity_config).success
    save_steps(trinity_config, trainer=5)
    assert supervise.outcome(Status(True), None, trinity_config).success


def test_a_logged_fatal_error_or_a_failed_status_fails_a_complete_run(trinity_config):
    save_steps(trinity_config, explorer=2, trainer=2)
    assert "boom" in supervise.outcome(Status(False, "boom"), None, trinity_config).message
    write_logs(Path(trinity_config.log.save_dir),
               trainer=[log_line("ERROR", "10:00:00", "Error in Trainer:\nTraceback\nOSError: disk full")])
    result = supervise.outcome(Status(True), None, trinity_config)
    assert not result.success and "OSError: disk full" in result.message


def test_the_watchdog_stops_the_run_on_the_first_fatal_error(tmp_path):
    log_dir = write_logs(tmp_path / "log", explorer=[log_line("INFO", "10:00:00", "Explore step 1 started.")])
    stopped, gave_up = threading.Event(), threading.Event()
    watchdog = supervise.Watchdog(log_dir, stopped.set, lambda error: gave_up.set(), interval=0.1, grace=0.5)
    with watchdog:
        time.sleep(0.3)
        assert not stopped.is_set()
        with open(log_dir / "explorer.log", "a") as log:
            log.write(log_line("ERROR", "10:00:03", f"Error in Explorer: {TRACEBACK}"))
        assert stopped.wait(5), "the watchdog did not react to the fatal error"
        assert gave_up.wait(5), "a run that does not return after the kill must be given up"
    assert watchdog.error.summary.endswith("aiosqlite'")


def test_the_watchdog_gives_nothing_up_when_the_run_returns(tmp_path):
    log_dir = write_logs(tmp_path / "log", explorer=[log_line("ERROR", "10:00:00", "Error in Explorer: x")])
    gave_up = threading.Event()
    with supervise.Watchdog(log_dir, lambda: None, lambda error: gave_up.set(), interval=0.05, grace=1.0):
        time.sleep(0.5)  # error seen and stop_run called; the run "returns" inside the grace period
    assert not gave_up.wait(1.5)


@pytest.fixture
def python_sigint():
    """SIGINT answered by Python's own handler for the test, however pytest was started (a background job
    inherits SIGINT ignored), and put back after."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield signal.default_int_handler
    signal.signal(signal.SIGINT, before)


def wait_for_interrupt(seconds: float) -> None:
    """Run Python code (where signals are handled) until a KeyboardInterrupt, which must come in `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    pytest.fail(f"no KeyboardInterrupt within {seconds} s")


def test_the_first_ctrl_c_interrupts_only_after_the_watchdogs_stop(tmp_path, capsys, python_sigint):
    """Ctrl-C: the watchdog's thread first runs `on_interrupt` (the launcher's lets a save finish and kills the
    actors), then the main thread gets its KeyboardInterrupt. Errors the actors log meanwhile (Trinity's
    shutdown of the Explorer) are not reported, and the SIGINT handler is put back afterwards."""
    import os
    import signal

    log_dir = write_logs(tmp_path / "log", explorer=[log_line("INFO", "10:00:00", "Explore step 1 started.")])
    stopped, stop_done = threading.Event(), threading.Event()

    def on_interrupt():  # as a save that takes a while to finish
        with open(log_dir / "explorer.log", "a") as log:
            log.write(log_line("ERROR", "10:00:03", "Error in Explorer: RuntimeError: Experience pipeline "
                                                    "is not initialized."))
        time.sleep(1.0)
        stop_done.set()

    watchdog = supervise.Watchdog(log_dir, stopped.set, lambda error: None, interval=0.05, grace=0.5,
                                  on_interrupt=on_interrupt)
    with pytest.raises(KeyboardInterrupt), watchdog:
        os.kill(os.getpid(), signal.SIGINT)
        try:
            wait_for_interrupt(10)
        except KeyboardInterrupt:
            assert stop_done.is_set(), "the main thread was interrupted before the stop had finished"
            raise
    assert watchdog.interrupted.is_set() and watchdog.error is None and not stopped.is_set()
    assert "error" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is python_sigint


def test_a_run_that_returns_because_the_ctrl_c_stopped_it_still_ends_as_interrupted(tmp_path, python_sigint):
    """The stop kills the actors, so the watched call (tune) may return before the watchdog's thread gets to
    interrupt the main one: the block must end in KeyboardInterrupt all the same, not as a finished run."""
    import os
    import signal

    log_dir = write_logs(tmp_path / "log", explorer=[log_line("INFO", "10:00:00", "Explore step 1 started.")])
    actors_killed = threading.Event()
    watchdog = supervise.Watchdog(log_dir, lambda: None, lambda error: None, interval=0.05,
                                  on_interrupt=lambda: (actors_killed.set(), watchdog.finished.wait(5)))
    with pytest.raises(KeyboardInterrupt), watchdog:
        os.kill(os.getpid(), signal.SIGINT)
        assert actors_killed.wait(5)  # tune() returns here, before the watchdog's thread interrupts
    assert not watchdog.is_alive()


def test_a_ctrl_c_the_watched_call_swallowed_still_ends_the_block_as_interrupted(tmp_path, python_sigint):
    """Ray's blocking calls run the SIGINT handler and turn its KeyboardInterrupt into a status, which they can drop
    when their wait ends at the same time (the stop killed the actors): the block must still end interrupted."""
    import os
    import signal

    log_dir = write_logs(tmp_path / "log", explorer=[log_line("INFO", "10:00:00", "Explore step 1 started.")])
    watchdog = supervise.Watchdog(log_dir, lambda: None, lambda error: None, interval=0.05)
    with pytest.raises(KeyboardInterrupt), watchdog:
        os.kill(os.getpid(), signal.SIGINT)
        try:  # as ray.wait returning its ready actor task
            wait_for_interrupt(10)
        except KeyboardInterrupt:
            pass
    assert not watchdog.is_alive()


def test_a_second_ctrl_c_interrupts_at_once_and_only_once(tmp_path, python_sigint):
    import os
    import signal

    log_dir = write_logs(tmp_path / "log", explorer=[log_line("INFO", "10:00:00", "Explore step 1 started.")])
    release = threading.Event()
    watchdog = supervise.Watchdog(log_dir, lambda: None, lambda error: None, interval=0.05,
                                  on_interrupt=lambda: release.wait(10))
    with pytest.raises(KeyboardInterrupt), watchdog:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)  # the first: swallowed while the stop runs
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            wait_for_interrupt(5)
        assert time.monotonic() - started < 1
        release.set()  # the stop ends: it must not interrupt the main thread a second time
        time.sleep(0.5)
    assert not watchdog.is_alive()


def test_the_launchers_stop_lets_a_save_finish_before_it_kills_the_actors(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from rftkit.checkpoints import TRACKER, tracker_step

    job = tmp_path / "job"
    (job / "global_step_2" / "actor").mkdir(parents=True)
    (job / TRACKER).write_text("1")

    def save():  # step 2's files keep changing for a second, then the tracker names it
        for part in range(5):
            (job / "global_step_2" / "actor" / f"part_{part}").write_bytes(b"x")
            time.sleep(0.2)
        (job / TRACKER).write_text("2")

    writer = threading.Thread(target=save)
    writer.start()
    time.sleep(0.1)  # the save is under way
    killed_at = []
    monkeypatch.setattr(supervise, "kill_trinity_actors", lambda config: killed_at.append(tracker_step(job)))
    launch.finish_save_then_stop(SimpleNamespace(checkpoint_job_dir=str(job)))
    writer.join()
    assert killed_at == [2], "the actors were killed before the save under way had finished"
    assert "waiting for it to finish" in capsys.readouterr().err


def test_a_hung_run_with_a_dead_explorer_exits_nonzero_within_seconds(tmp_path, monkeypatch, capsys):
    """The hang seen on GPUs, replayed with real Ray actors: the Explorer logs a fatal error and returns,
    the Trainer waits for experiences forever, tune() waits for the Trainer. The launcher must end it."""
    import agentscope.tuner
    import ray

    @ray.remote
    class Trainer:
        def train(self):
            time.sleep(3600)  # waiting for experiences that will never come

    def tune(config_path, **kwargs):  # Trinity's both(): wait for the Trainer after the Explorer returned
        trinity_config = validate(yaml.safe_load(open(config_path)), run_frozen_lake)
        trainer = Trainer.options(name=trinity_config.trainer.name, namespace=trinity_config.ray_namespace).remote()
        write_logs(Path(trinity_config.log.save_dir),
                   explorer=[log_line("ERROR", "10:00:00", f"Error in Explorer: {TRACEBACK}")])
        ray.wait([trainer.train.remote()], timeout=3600)
        return Status(True)

    monkeypatch.setattr(cluster, "detect_cluster", lambda: (1, 2))
    monkeypatch.setattr(cluster, "ensure_ray", lambda: False)
    monkeypatch.setattr(cluster, "connect_ray", lambda trinity_config, timeline: ray.init(
        namespace=trinity_config.ray_namespace, num_cpus=2, include_dashboard=False, logging_level="ERROR"))
    monkeypatch.setattr(agentscope.tuner, "tune", tune)
    parser = argparse.ArgumentParser()
    launch.add_arguments(parser, default_config=str(REPO / "configs" / "frozenlake.yaml"))
    args = parser.parse_args(["--checkpoint-dir", str(tmp_path), "--attn", "sdpa", "--set", "buffer.total_steps=2"])
    started = time.monotonic()
    try:
        assert launch.launch(args, run_frozen_lake) == 1
    finally:
        ray.shutdown()
    assert time.monotonic() - started < 60
    err = capsys.readouterr().err
    assert "error: training failed: Error in Explorer: ModuleNotFoundError: No module named 'aiosqlite'" in err


CTRL_C_DURING_TRAINING = """
import sys, time
import agentscope.tuner, ray, yaml
from frozenlake.workflow import run_frozen_lake
from rftkit import cluster, launch
from rftkit.trinity_config import validate

@ray.remote
class Trainer:
    def train(self):
        time.sleep(3600)

def tune(config_path, **kwargs):  # Trinity's both(): wait for the Explorer and the Trainer in ray.wait
    trinity_config = validate(yaml.safe_load(open(config_path)), run_frozen_lake)
    trainer = Trainer.options(name=trinity_config.trainer.name, namespace=trinity_config.ray_namespace).remote()
    open(sys.argv[2], "w").close()  # a file, not a line on stdout, which Ray's log threads can write into
    ray.wait([trainer.train.remote()], num_returns=1)

cluster.detect_cluster = lambda: (1, 2)
cluster.ensure_ray = lambda: False
cluster.connect_ray = lambda trinity_config, timeline: ray.init(namespace=trinity_config.ray_namespace, num_cpus=2,
                                                     include_dashboard=False, logging_level="ERROR")
agentscope.tuner.tune = tune
parser = launch.argparse.ArgumentParser()
launch.add_arguments(parser, default_config="configs/frozenlake.yaml")
code = launch.launch(parser.parse_args(["--checkpoint-dir", sys.argv[1], "--attn", "sdpa"]), run_frozen_lake)
print("exit code", code, flush=True)
"""


def test_ctrl_c_during_training_ends_the_launch_with_130_and_the_last_saved_step(tmp_path):
    import signal
    import subprocess
    import sys

    # SIGINT handled as in a terminal, however pytest was started: a background job of a script
    # (`cmd &` without job control) inherits SIGINT ignored, and Ctrl-C would then do nothing.
    waiting = tmp_path / "tune-waiting"
    process = subprocess.Popen([sys.executable, "-c", CTRL_C_DURING_TRAINING, str(tmp_path), str(waiting)],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not waiting.exists():  # until tune() sits in ray.wait
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the launch never reached tune()'s ray.wait"
            time.sleep(0.2)
        time.sleep(3)
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = process.communicate(timeout=90)
    finally:
        process.kill()
        process.wait()  # reaped: a zombie child would fail the next tests that look for leftover processes
    assert time.monotonic() - started < 60
    assert "exit code 130" in out, err[-3000:]
    assert "interrupted: the last complete checkpoint is none yet, in" in err
    assert "Traceback" not in err
