"""Reading the scalars Trinity-RFT's tensorboard monitor writes (`<run>/monitor/tensorboard/{explorer,trainer}`)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator


# The explorer's scalars that several reports read, per explore step.
ROLLOUT_WAIT = "explorer/time/wait_explore_step"  # seconds the step waited for its rollouts
EVAL_TIME = "time/eval"  # seconds an in-run evaluation took, logged at the step it ran after
FINISHED_TASKS = "rollout/finished_task_count"  # tasks the step finished, each `algorithm.repeat_times` episodes
MODEL_CALLS = "rollout/model_calls/mean"  # model calls an episode made, on average


class Point(NamedTuple):
    step: int
    value: float
    wall_time: float  # seconds since the epoch, when the point was logged


def read_points(folder: str | Path) -> dict[str, list[Point]]:
    """Every scalar series in the event files below `folder`, sorted by step (the last write of a step wins)."""
    files = sorted(Path(folder).rglob("events.out.tfevents.*"))
    if not files:
        raise FileNotFoundError(f"{folder}: no tensorboard event files below it")
    series: dict[str, dict[int, Point]] = {}
    for file in files:
        events = EventAccumulator(str(file), size_guidance={SCALARS: 0})  # 0: keep every point
        events.Reload()
        for tag in events.Tags()[SCALARS]:
            series.setdefault(tag, {}).update((e.step, Point(e.step, e.value, e.wall_time))
                                              for e in events.Scalars(tag))
    return {tag: [points[step] for step in sorted(points)] for tag, points in series.items()}


def read_scalars(folder: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series below `folder`, as sorted (step, value) lists."""
    return {tag: [(p.step, p.value) for p in points] for tag, points in read_points(folder).items()}


def over_rollout_waits(explorer: dict[str, list[Point]], tag: str | None, group: int, since: float = float("-inf"),
                       until: float = float("inf")) -> float | None:
    """Over the explore steps whose wait for rollouts ended in [since, until]: each step's episodes (its finished
    tasks x `group`) times `tag`, a per-episode mean, summed, over the steps' waits summed. With an episode's seconds
    that is the episodes going at once (Little's law); with its model calls, calls a second; with no tag, episodes
    a second. None without a wait."""
    names = (ROLLOUT_WAIT, FINISHED_TASKS) + ((tag,) if tag else ())
    by = {name: {p.step: p for p in explorer.get(name, [])} for name in names}
    steps = [step for step, p in by[ROLLOUT_WAIT].items() if since <= p.wall_time <= until
             and all(step in by[name] for name in names)]
    waited = sum(by[ROLLOUT_WAIT][step].value for step in steps)
    if not waited:
        return None
    return sum(by[FINISHED_TASKS][step].value * group * (by[tag][step].value if tag else 1)
               for step in steps) / waited
