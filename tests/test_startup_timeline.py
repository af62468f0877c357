"""The start-up timeline: phases marked where Trinity's methods return, printed by the launcher as they arrive."""

import asyncio
import importlib
import io
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, as_module
from rftkit import startup
from rftkit.patches import PATCHES
from rftkit.patches.apply import PatchTargetMoved, applied


def copies_of(module: str):
    """A stand-in for Trinity's `module` holding a copy (a subclass) of each class whose methods end phases."""
    real = importlib.import_module(module)
    names = {cls for name, cls, _, _ in startup.STARTUP_PHASES if name == module}
    return as_module(module, **{name: type(name, (getattr(real, name),), {}) for name in names})


@pytest.mark.parametrize("module,cls,method,phase", startup.STARTUP_PHASES)
def test_every_phase_wraps_a_coroutine_trinity_still_has(module, cls, method, phase):
    copies = copies_of(module)
    startup.marks_ends(copies)
    wrapped = getattr(copies, cls).__dict__[method]
    assert applied(wrapped) == ["startup.timeline"] and wrapped.__name__ == method
    assert asyncio.iscoroutinefunction(wrapped)  # Ray still runs it as an async actor method
    startup.marks_ends(copies)
    assert getattr(copies, cls).__dict__[method] is wrapped, "a second patch must not wrap the wrapper"


def test_a_phase_ends_when_its_method_returns_and_is_marked_once(tmp_path, monkeypatch):
    timeline = tmp_path / "startup.jsonl"
    monkeypatch.setenv(startup.TIMELINE_ENV, str(timeline))
    monkeypatch.setattr(startup, "_marked", set())  # this process may have marked it before

    class Engine:
        async def prepare(self, fail=False):
            await asyncio.sleep(0.05)
            if fail:
                raise RuntimeError("no GPU")
            return "ready"

    Engine.prepare = startup.marking(Engine.prepare, "engine ready")
    with pytest.raises(RuntimeError):
        asyncio.run(Engine().prepare(fail=True))
    assert not timeline.exists(), "a method that raised ended no phase"
    before = time.time()
    assert asyncio.run(Engine().prepare()) == "ready"
    asyncio.run(Engine().prepare())
    [entry] = startup.read(timeline)
    assert entry["phase"] == "engine ready" and entry["pid"] == os.getpid() and entry["at"] >= before


@pytest.mark.parametrize("what,moved", [
    ("missing", "Scheduler.start is missing"),
    ("not a coroutine function", "Scheduler.start no longer has `async def start`"),
])
def test_a_method_that_moved_fails_naming_the_version(what, moved):
    class Scheduler:
        if what != "missing":
            def start(self):
                pass

    with pytest.raises(PatchTargetMoved, match=f"'startup.timeline'.*{moved}.*trinity-rft 0.6.0"):
        startup.marks_ends(as_module("trinity.explorer.scheduler", Scheduler=Scheduler))


def test_the_launcher_prints_each_phase_another_process_marks_and_stops_at_the_last(tmp_path):
    path = tmp_path / "run" / "startup.jsonl"
    path.parent.mkdir()
    path.write_text('{"phase": "a previous launch\'s", "at": 0, "pid": 1}\n')
    out = io.StringIO()
    marks = ["rollout engines ready", "rollout engines ready", startup.LAST_PHASE]
    worker = (f"from rftkit import startup\nfor phase in {marks!r}:\n    startup.mark(phase)\n")
    with startup.Timeline(path, interval=0.05, out=out) as timeline:
        timeline.mark("Ray connected")
        subprocess.run([sys.executable, "-c", worker], cwd=REPO, check=True, timeout=60,
                       env={**os.environ, startup.TIMELINE_ENV: str(path)})
        timeline.join(timeout=10)
        assert not timeline.is_alive(), "the timeline stops following once the first train step is marked"
    lines = out.getvalue().splitlines()
    assert [line.split(" s  ", 1)[1] for line in lines] == ["Ray connected", "rollout engines ready",
                                                              startup.LAST_PHASE]
    seconds = [float(line.split()[1]) for line in lines]
    assert seconds == sorted(seconds) and seconds[0] > 0  # counted from this process's start
    entries = startup.read(path)
    assert [e["phase"] for e in entries] == ["launch", "Ray connected", "rollout engines ready", startup.LAST_PHASE]
    assert entries[0]["pid"] == os.getpid() and entries[2]["pid"] != os.getpid()
    assert entries[0]["cpus"] == os.cpu_count() and entries[0]["cpu"] == startup.cpu_model()
    if sys.platform == "linux":
        assert entries[0]["cpu"]  # the model name /proc/cpuinfo gives
    assert json.loads(path.read_text().splitlines()[0])["at"] == timeline.zero


def test_without_a_timeline_nothing_is_marked_or_patched(tmp_path, monkeypatch):
    monkeypatch.delenv(startup.TIMELINE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    startup.mark("explorer ready")
    assert list(tmp_path.iterdir()) == []
    assert not PATCHES["startup.timeline"].switch.on(), "the workers' methods are not wrapped"
