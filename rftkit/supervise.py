"""Watching a tune() run, and deciding whether it finished.

Trinity-RFT 0.6's Explorer and Trainer catch an exception in their main loops, log it and return
normally: a failed Explorer leaves the Trainer waiting for up to 30 minutes, and a Trainer that failed
at step 1 ends the run with tune() reporting success. So `Watchdog` follows the actors' log files
(`<checkpoint job dir>/log`) for the lines Trinity logs when a main loop dies, and kills the Explorer
and Trainer actors so that tune() returns at once; `outcome` compares the steps the Trainer saved
with the steps the run was meant to reach.
"""

from __future__ import annotations

import logging
import os
import _thread
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# What Trinity 0.6 logs when a main loop dies (trinity/explorer/explorer.py, trinity/trainer/trainer.py).
FATAL_MARKERS = ("Error in Explorer", "Error during explorer preparation", "Error in Trainer")
TRAINER_FINISHED = "> Trainer finished."  # trinity/trainer/trainer.py, the line after its main loop
# Trinity's log prefix, "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] " with dates as "%m-%d %H:%M:%S";
# its formatter repeats the prefix on every line of a multi-line message (a traceback).
LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) \[[^\]]*\] ")


@dataclass
class FatalError:
    """The first fatal error a run's actor logs show."""

    log: Path
    timestamp: str
    marker: str
    text: str  # the logged message with its traceback

    @property
    def summary(self) -> str:
        """The exception line that ends the traceback, e.g. "ModuleNotFoundError: No module named 'x'"."""
        lines = [line.strip() for line in self.text.splitlines() if line.strip()]
        return lines[-1] if lines else self.marker

    def __str__(self) -> str:
        return f"{self.marker}: {self.summary} (traceback in {self.log})"


def log_sizes(log_dir: str | os.PathLike) -> dict[Path, int]:
    """How long each actor log under `log_dir` is now. A resumed run appends to the logs of the run
    it continues, so a launch reads each log only from where it stood when the launch began."""
    return {log: log.stat().st_size for log in Path(log_dir).rglob("*.log")}


def new_text(log: Path, since: dict[Path, int] | None) -> str:
    """What `log` gained after `since` (`log_sizes` at a launch): all of it if it is new or was rotated."""
    start = (since or {}).get(log, 0)
    with open(log, "rb") as f:
        if start > os.fstat(f.fileno()).st_size:  # rotated since: all of it is new
            start = 0
        f.seek(start)
        return f.read().decode(errors="replace")


def _fatal_in(log: Path, since: dict[Path, int] | None = None) -> FatalError | None:
    lines = [line.rstrip("\r") for line in new_text(log, since).split("\n")]
    for i, line in enumerate(lines):
        head = LOG_LINE.match(line)
        if head is None or head.group(1) != "ERROR":
            continue
        marker = next((m for m in FATAL_MARKERS if line[head.end():].startswith(m)), None)
        if marker is None:
            continue
        prefix, block = head.group(0), [line[head.end():]]
        for following in lines[i + 1:]:  # the message goes on while lines repeat its prefix
            if not following.startswith(prefix):
                break
            block.append(following[len(prefix):])
        return FatalError(log=log, timestamp=head.group(2), marker=marker, text="\n".join(block))
    return None


def _trainer_finished_at(log_dir: Path, since: dict[Path, int] | None = None) -> str | None:
    """When the Trainer logged that it finished (its final line, after a last step or an error)."""
    for log in sorted(log_dir.rglob("*.log")):
        for line in new_text(log, since).split("\n"):
            head = LOG_LINE.match(line)
            if head and line[head.end():].startswith(TRAINER_FINISHED):
                return head.group(2)
    return None


def first_fatal_error(log_dir: str | os.PathLike, since: dict[Path, int] | None = None) -> FatalError | None:
    """The earliest fatal error in any actor log under `log_dir`, or None; with `since` (`log_sizes`
    at the launch), only in what the logs gained after it. An Explorer error logged once the Trainer has
    finished is not one: Trinity then shuts the experience pipeline down under the running step."""
    log_dir = Path(log_dir)
    found = [error for log in sorted(log_dir.rglob("*.log")) if (error := _fatal_in(log, since))]
    finished = _trainer_finished_at(log_dir, since)
    if finished is not None:
        found = [e for e in found if not (e.marker.startswith("Error in Explorer") and e.timestamp >= finished)]
    return min(found, key=lambda error: error.timestamp) if found else None


def kill_trinity_actors(trinity_config) -> None:
    """Kill the run's Explorer and Trainer (their engines and workers go with them)."""
    import ray

    for name in (trinity_config.explorer.name, trinity_config.trainer.name):
        try:
            ray.kill(ray.get_actor(name, namespace=trinity_config.ray_namespace), no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


class Watchdog(threading.Thread):
    """Polls the run's logs; on the first fatal error, reports it and calls `stop_run` (by default: kill the
    Trinity actors, so that tune() returns). `give_up` follows if the run has not returned `grace` s later.

    Ctrl-C while it watches (entered from the main thread): the first SIGINT does not interrupt the main thread
    at once. This thread calls `on_interrupt` (the launcher's lets a checkpoint being written finish, then
    kills the actors, so that Trinity's teardown cuts no save), then raises KeyboardInterrupt in the main
    thread. A second SIGINT raises it at once. A block during which a Ctrl-C came ends in KeyboardInterrupt,
    however the watched call returned. Errors the actors log after a Ctrl-C are the stop's own and are not
    reported."""

    def __init__(self, log_dir: str | os.PathLike, stop_run: Callable[[], None],
                 give_up: Callable[[FatalError], None], interval: float = 5.0, grace: float = 90.0,
                 since: dict[Path, int] | None = None, on_interrupt: Callable[[], None] = lambda: None):
        super().__init__(name="rftkit-watchdog", daemon=True)
        self.log_dir, self.stop_run, self.give_up = Path(log_dir), stop_run, give_up
        self.on_interrupt = on_interrupt
        self.interval, self.grace = interval, grace
        self.error: FatalError | None = None
        self.finished = threading.Event()
        self.since = dict(since or {})  # where each log stood at the launch (`log_sizes`)
        self._read_up_to: dict[Path, int] = dict(self.since)
        self.interrupted = threading.Event()  # a Ctrl-C came
        self._wake = threading.Event()
        self._lock = threading.RLock()  # the handler may run again inside itself (a second Ctrl-C)
        self._watching = False  # in the polling loop, so able to answer a Ctrl-C
        self._main_interrupted = False  # KeyboardInterrupt raised in the main thread, or on its way
        self._handler: tuple | None = None  # (the SIGINT handler before ours,) while ours is installed

    def _marker_in_new_text(self) -> bool:
        """Whether a fatal marker appeared in any log since the last look.

        Only the bytes added since then are read (plus a marker's length before them, in case
        one was half-written), so that polling stays cheap when logs grow to tens of megabytes;
        the full parse runs only when this says there is something to parse.
        """
        overlap = max(map(len, FATAL_MARKERS))
        seen = False
        for log in self.log_dir.rglob("*.log"):
            size = log.stat().st_size
            start = self._read_up_to.get(log, 0)
            if size < start:  # the file was rotated: read the new one from the start
                start = 0
            if size == start:
                continue
            chunk = new_text(log, {log: max(0, start - overlap)})
            self._read_up_to[log] = size
            seen = seen or any(marker in chunk for marker in FATAL_MARKERS)
        return seen

    def run(self) -> None:
        self._watching = True
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            if self.finished.is_set():
                return
            if self.interrupted.is_set():
                return self._stop_for_ctrl_c()
            if not self._marker_in_new_text():
                continue
            error = first_fatal_error(self.log_dir, self.since)
            if error is None:  # a marker in a non-fatal line, or an Explorer stopped after the Trainer finished
                continue
            time.sleep(1.0)  # let the traceback reach the file
            with self._lock:
                if self.interrupted.is_set():  # the Ctrl-C came first: its own stop
                    return self._stop_for_ctrl_c()
                self._watching = False  # a Ctrl-C from now on interrupts the main thread at once
            self.error = first_fatal_error(self.log_dir, self.since) or error
            print(f"error: the run failed, stopping it: {self.error}\n{self.error.text}", file=sys.stderr, flush=True)
            self.stop_run()
            if not self.finished.wait(self.grace):
                self.give_up(self.error)
            return

    def _stop_for_ctrl_c(self) -> None:
        try:
            self.on_interrupt()
        finally:
            with self._lock:  # (__exit__ sets `finished` under it: no interrupt once the watch is over)
                if not (self._main_interrupted or self.finished.is_set()):
                    self._main_interrupted = True
                    _thread.interrupt_main(signal.SIGINT)  # our handler runs again, and raises this time

    def _on_sigint(self, signum, frame) -> None:
        previous = self._handler[0]
        if previous == signal.SIG_IGN:
            return
        with self._lock:
            if not self.interrupted.is_set() and self._watching and self.is_alive():
                self.interrupted.set()  # the first: this thread stops the run, then interrupts the main thread
                self._wake.set()
                return
            self.interrupted.set()
            self._main_interrupted = True
        if callable(previous):  # Python's own handler raises KeyboardInterrupt
            previous(signum, frame)
        else:  # SIG_DFL: the process would end; let the launcher's handler run instead
            raise KeyboardInterrupt

    def __enter__(self) -> "Watchdog":
        if threading.current_thread() is threading.main_thread():
            self._handler = (signal.signal(signal.SIGINT, self._on_sigint),)
        self.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        with self._lock:
            self.finished.set()
            # A block during which a Ctrl-C came ends as interrupted, not as a run that returned: the stop can
            # make the watched call return (its actors killed) before this thread interrupts the main one, and
            # Ray's blocking calls catch a KeyboardInterrupt as a status, which they can drop when their wait ends.
            stopped_by_ctrl_c = self.interrupted.is_set()
        if self._handler is not None:
            previous = self._handler[0]  # None: a handler set outside Python, for which Python's own stands in
            signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
            self._handler = None
        self._wake.set()
        self.join(timeout=self.interval + 5)
        if stopped_by_ctrl_c and exc_type is not KeyboardInterrupt:
            raise KeyboardInterrupt


@dataclass
class Outcome:
    success: bool
    message: str
    trainer_step: int
    target_step: int


def reached_steps(trinity_config) -> tuple[int, int]:
    """(explorer step, trainer step) as the run's state files record them (0 if absent)."""
    from trinity.manager.state_manager import StateManager

    state = StateManager(path=trinity_config.checkpoint_job_dir, trainer_name=trinity_config.trainer.name,
                         explorer_name=trinity_config.explorer.name)
    level = state.logger.level
    state.logger.setLevel(logging.WARNING)  # its loaders announce "Continue training from this point"
    try:
        return (int(state.load_explorer().get("latest_iteration", 0)),
                int(state.load_trainer().get("latest_iteration", 0)))
    finally:
        state.logger.setLevel(level)


def outcome(status, watched: FatalError | None, trinity_config, since: dict[Path, int] | None = None) -> Outcome:
    """Success only if nothing failed and the Trainer saved the last step the run was meant to reach.

    The target is the configured `trainer.total_steps` or `buffer.total_steps`;
    with neither, the steps the Explorer produced (the Trainer must consume them all).
    Errors count from `since` (`log_sizes` at the launch): a resumed run's logs hold the run before it.
    """
    explorer_step, trainer_step = reached_steps(trinity_config)
    target = trinity_config.trainer.total_steps or trinity_config.buffer.total_steps or explorer_step
    error = watched or first_fatal_error(trinity_config.log.save_dir, since)
    if error is not None:
        message = str(error)
    elif not getattr(status, "success", False):
        message = str(getattr(status, "error", None) or status)
    elif trainer_step < target:
        message = (f"the run stopped early: the trainer saved step {trainer_step} of {target} "
                   f"(explorer at step {explorer_step}); see the logs in {trinity_config.log.save_dir}")
    else:
        return Outcome(True, f"training finished: {trainer_step} step(s)", trainer_step, target)
    return Outcome(False, message, trainer_step, target)
