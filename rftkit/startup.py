"""A launch's start-up timeline: each phase, and the seconds from the launch to its end.

The process that finishes a phase appends one JSON line to `<checkpoint job dir>/startup.jsonl`
(the path reaches Ray's workers in `TIMELINE_ENV`), once per process and phase:

    {"phase": "rollout engines ready", "at": 1764681234.5, "pid": 4242}

The launcher marks its own phases (`mark`); in every worker, `marks_ends` (patch `startup.timeline`) wraps
the Trinity-RFT 0.6.0 coroutines whose end is a phase.
`Timeline` follows the file and prints each phase as it arrives. Its first line, the launch, also names the
machine's CPU and its count (`cpu`, `cpus`): hosts of the same GPU differ in rollout speed, and the card's name
alone does not tell them apart.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

from rftkit.patches import STARTUP_PHASES, TIMELINE_ENV
from rftkit.patches.apply import replace

FILE_NAME = "startup.jsonl"

LAST_PHASE = STARTUP_PHASES[-1][3]

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


def marks_ends(module: ModuleType) -> None:
    """Make each of `STARTUP_PHASES` in `module`, a coroutine function, mark its phase when it first returns."""
    for name, cls, method, phase in STARTUP_PHASES:
        if name == module.__name__:
            replace("startup.timeline", module, f"{cls}.{method}",
                    lambda original, phase=phase: marking(original, phase))


def marking(original, phase: str):
    async def marks_when_done(*args, **kwargs):
        result = await original(*args, **kwargs)
        mark(phase)
        return result
    return marks_when_done


def launched_at() -> float:
    """When this process started (the launch's zero), from the kernel's process table."""
    import psutil  # comes with Ray

    return psutil.Process().create_time()


def cpu_model() -> str | None:
    """The CPU's model name as Linux reports it (None elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next((line.partition(":")[2].strip() for line in info if line.startswith("model name")), None)
    except OSError:
        return None


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


def phase_at(path: str | os.PathLike, phase: str) -> float | None:
    """When the timeline at `path` first marks `phase` (seconds since the epoch); None where it does not."""
    return next((entry["at"] for entry in read(path) if entry["phase"] == phase), None)


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
        launch = {"phase": "launch", "at": self.zero, "pid": os.getpid(), "cpu": cpu_model(), "cpus": os.cpu_count()}
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
