"""Where a trainer step's time goes, from one step under PyTorch's profiler: how much of it the GPU was busy, how
often the host stopped to wait for the GPU and in which function, and which functions the host was in while the
GPU had nothing to run.

A step whose GPU is busy for most of its wall time is bound by the GPU, and runs the same on a busy host. Each
wait for the GPU (`.item()`, a copy to the CPU) empties its queue: the GPU then idles until the host has launched
the next kernels, and that time grows with the host's load.
"""

from __future__ import annotations

import re
from collections import Counter

# The host-side calls that block until the GPU has caught up. On a CPU-only machine `.item()` is the one seen.
WAITS_ON_GPU = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}
WAITS_ON_CPU = {"aten::_local_scalar_dense"}
TOP = 8  # host ops and waiting functions listed


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals, in their unit: overlapping kernels count once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


PYTHON_FRAME = re.compile(r"\(\d+\): ")  # how the profiler names a Python call: "path(first line): function"


def python_frame(name: str) -> bool:
    return bool(PYTHON_FRAME.search(name)) or name.startswith("<built-in")


def caller(event) -> str:
    """The innermost Python function outside torch that the event ran under: who asked to wait."""
    while event is not None:
        if PYTHON_FRAME.search(event.name) and not event.name.startswith("torch/"):
            return event.name
        event = event.cpu_parent
    return "unknown"


def step_frames(events: list) -> list:
    """The Python calls outside torch on the thread that ran the step's Python (the one with the most calls)."""
    frames = [e for e in events if PYTHON_FRAME.search(e.name)]
    if not frames:
        return []
    thread = Counter(e.thread for e in frames).most_common(1)[0][0]
    return [e for e in frames if e.thread == thread and not e.name.startswith("torch/")]


def innermost_at(frames: list, times: list[float]) -> list[str]:
    """For each of `times` (the profiler's microseconds), the innermost of `frames` running then ("unknown": none)."""
    names, open_frames = ["unknown"] * len(times), []
    # one sweep in time order: the frames still open at a time are nested, the innermost last
    for start, is_time, i in sorted([(e.time_range.start, 0, i) for i, e in enumerate(frames)]
                                    + [(t, 1, i) for i, t in enumerate(times)]):
        while open_frames and open_frames[-1].time_range.end <= start:
            open_frames.pop()
        if is_time:
            names[i] = open_frames[-1].name if open_frames else "unknown"
        else:
            open_frames.append(frames[i])
    return names


def waits_by_caller(waits: list, frames: list) -> Counter:
    """How many of `waits` each function asked for (`caller`); `frames`: the step's (`step_frames`).

    On a GPU the profiler files the CUDA runtime's sync calls under a thread of their own, with no parent (they
    launch nothing that would link them to the op that made them). Such a wait goes to the innermost Python
    function outside torch, on the thread that ran the step's Python, running when the wait began.
    """
    counts = Counter(caller(w) for w in waits if w.cpu_parent is not None)
    orphans = [w.time_range.start for w in waits if w.cpu_parent is None]
    if orphans:
        counts.update(innermost_at(frames, orphans))
    return counts


def idle_by_caller(on_gpu: list[tuple[float, float]], frames: list) -> Counter:
    """Seconds the GPU had nothing to run, from the step's first Python call to its last, by the function the
    host was in halfway through each such gap: the parts of the step that the host, not the GPU, holds up.
    `on_gpu`: the (start, end) of the GPU's kernels and copies, in the profiler's microseconds; `frames`: the
    step's (`step_frames`)."""
    if not frames or not on_gpu:
        return Counter()
    begin, end = min(e.time_range.start for e in frames), max(e.time_range.end for e in frames)
    gaps, reach = [], begin
    for start, stop in [*sorted(on_gpu), (end, end)]:
        if min(start, end) > reach:
            gaps.append((reach, min(start, end)))
        reach = max(reach, stop)
    seconds = Counter()
    for name, (start, stop) in zip(innermost_at(frames, [(a + b) / 2 for a, b in gaps]), gaps):
        seconds[name] += (stop - start) / 1e6
    return seconds


def profiled(timed_call) -> tuple[object, dict]:
    """timed_call() under the profiler, with Python calls recorded; it returns (result, its wall seconds, the GPU's
    queued work included), as `worker.synced` does. Returns the result, and the wall time, the GPU's busy share
    of it, the host's waits for the GPU by the function that asked, and the host ops with the most self time.
    The profiler slows the host down, so a profiled step is not one of the timed ones."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])],
                 with_stack=True) as prof:
        result, seconds = timed_call()
    events = prof.events()
    waits = [e for e in events if e.name in (WAITS_ON_GPU if cuda else WAITS_ON_CPU)]
    # kernels and copies on the GPU; none where the profiler could not trace it (CUPTI missing): no share then
    on_gpu = [(e.time_range.start, e.time_range.end) for e in events if e.device_type == DeviceType.CUDA]
    busy = busy_seconds(on_gpu) / 1e6 if on_gpu else None
    frames = step_frames(events)
    host = sorted((a for a in prof.key_averages() if not python_frame(a.key)),
                  key=lambda a: a.self_cpu_time_total, reverse=True)[:TOP]
    return result, {
        "profiled step (s)": seconds, "on a GPU": cuda,
        "GPU busy (s)": busy, "GPU busy share": None if busy is None else busy / seconds,
        "waits for the GPU": len(waits),
        "waiting (s)": sum(e.time_range.elapsed_us() for e in waits) / 1e6,
        "waits by function": dict(waits_by_caller(waits, frames).most_common(TOP)),
        "GPU idle by function (ms)": {name: idle * 1000
                                      for name, idle in idle_by_caller(on_gpu, frames).most_common(TOP)},
        "host ops by self time (ms)": {a.key: a.self_cpu_time_total / 1000 for a in host},
    }


def summary_line(profile: dict) -> str:
    """One line for a setting's progress output."""
    if "error" in profile:
        return profile["error"]
    busy = (f"GPU busy {profile['GPU busy share']:.0%}, " if profile["GPU busy share"] is not None
            else "no GPU activity traced, " if profile["on a GPU"] else "")
    top = next(iter(profile["waits by function"].items()), None)
    return (f"profiled step {profile['profiled step (s)']:.1f} s: {busy}{profile['waits for the GPU']} waits for the "
            f"GPU ({profile['waiting (s)']:.2f} s)" + (f", most at {top[0]} ({top[1]})" if top else ""))
