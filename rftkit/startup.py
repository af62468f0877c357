"""A launch's start-up timeline: each phase, and the seconds from the launch to its end.

The process that finishes a phase appends one JSON line to `<checkpoint job dir>/startup.jsonl`
(the path reaches Ray's workers in `TIMELINE_ENV`), once per process and phase:

    {"phase": "rollout engines ready", "at": 1764681234.5, "pid": 4242}

The launcher marks its own phases (`mark`); in every worker, `worker_setup` wraps the Trinity-RFT
0.6.0 coroutines whose end is a phase, and fails at import, naming the method, if one has moved.
`Timeline` follows the file and prints each phase as it arrives.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

from rftkit.trainer.import_patch import patch_on_import

TIMELINE_ENV = "RFTKIT_STARTUP_TIMELINE"
FILE_NAME = "startup.jsonl"
TRINITY_VERSION = "0.6.0"  # the version the wrapped methods were read in

# (module, class, method, phase): the method's return is the phase's end. In the order a launch reaches them.
WORKER_PHASES = [
    ("trinity.trainer.trainer", "Trainer", "prepare", "trainer ready (FSDP workers, model loaded)"),
    ("trinity.common.models.allocator", "Allocator", "create_all_models", "rollout engines ready"),
    ("trinity.explorer.rollout_coordinator", "RolloutCoordinator", "_init_experience_pipeline",
     "experience pipeline ready"),
    ("trinity.explorer.scheduler", "Scheduler", "start", "workflow runners ready"),
    ("trinity.explorer.explorer", "Explorer", "prepare", "explorer ready"),
    ("trinity.explorer.explorer", "Explorer", "sync_weight", "first weights sent to the engine"),
    ("trinity.explorer.explorer", "Explorer", "_finish_explore_step", "first explore step"),
    ("trinity.trainer.trainer", "Trainer", "train_step", "first train step"),
]
LAST_PHASE = WORKER_PHASES[-1][3]

_marked: set[str] = set()  # the phases this worker process has marked


def mark(phase: str) -> None:
    """In a worker: append `phase`, now, to the timeline `TIMELINE_ENV` names (none, nothing); once per process."""
    path = os.environ.get(TIMELINE_ENV)
    if not path or phase in _marked:
        return
    _marked.add(phase)
    append(path, phase)


def append(path: str | os.PathLike, phase: str) -> None:
    """Append `phase`, now, to the timeline at `path`: one short write in append mode, so that lines from
    several processes never mix."""
    line = json.dumps({"phase": phase, "at": time.time(), "pid": os.getpid()}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:  # a node that does not share the run's folder: the timeline is not worth a failed run
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def marks_end(cls: type, method: str, phase: str) -> None:
    """Make `cls.method`, a coroutine function, mark `phase` when it first returns."""
    original = getattr(cls, method, None)
    if getattr(original, "_rftkit_phase", None) == phase:
        return
    if not inspect.iscoroutinefunction(original):
        raise RuntimeError(f"rftkit.startup: {cls.__module__}.{cls.__name__}.{method} is "
                           f"{'missing' if original is None else 'not a coroutine function'}; the start-up "
                           f"timeline was written against Trinity-RFT {TRINITY_VERSION}")

    @functools.wraps(original)
    async def marking(*args, **kwargs):
        result = await original(*args, **kwargs)
        mark(phase)
        return result

    marking._rftkit_phase = phase
    setattr(cls, method, marking)


def worker_setup() -> None:
    """In every worker of a launch (`rftkit.workers`): mark each of `WORKER_PHASES` where it ends."""
    if not os.environ.get(TIMELINE_ENV):
        return
    for module, cls, method, phase in WORKER_PHASES:
        def patch(loaded: ModuleType, cls=cls, method=method, phase=phase) -> None:
            marks_end(getattr(loaded, cls), method, phase)

        patch_on_import(module, patch)


def launched_at() -> float:
    """When this process started (the launch's zero), from the kernel's process table."""
    import psutil  # comes with Ray

    return psutil.Process().create_time()


def read(path: str | os.PathLike) -> list[dict]:
    """The phases in the timeline at `path`, in the order they were written (a line being written is left out)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


class Timeline(threading.Thread):
    """A launch's timeline: starts its file, prints each phase as it arrives, until `LAST_PHASE` or exit.

    `mark` marks the launcher's own phases. Used as a context manager around the run; on exit it
    prints what arrived since its last look.
    """

    def __init__(self, path: str | os.PathLike, interval: float = 1.0, out=None):
        super().__init__(name="rftkit-startup", daemon=True)
        self.path, self.interval, self.out = Path(path), interval, out or sys.stdout
        self.zero = launched_at()
        self.printed = 0
        self.finished = threading.Event()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # this launch's timeline, not a previous one's: the first line is the launch process's start
        launch = {"phase": "launch", "at": self.zero, "pid": os.getpid()}
        self.path.write_text(json.dumps(launch) + "\n", encoding="utf-8")

    def mark(self, phase: str) -> None:
        append(self.path, phase)

    def show_new(self) -> bool:
        """Print the phases that arrived since the last call; True once the last phase has."""
        entries = read(self.path)
        for entry in entries[self.printed:]:
            if entry["phase"] != "launch":
                print(f"start-up {entry['at'] - self.zero:6.0f} s  {entry['phase']}", file=self.out, flush=True)
        self.printed = len(entries)
        return any(entry["phase"] == LAST_PHASE for entry in entries)

    def run(self) -> None:
        while not self.finished.wait(self.interval):
            if self.show_new():
                return

    def __enter__(self) -> "Timeline":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.finished.set()
        self.join(timeout=self.interval + 5)
        self.show_new()
