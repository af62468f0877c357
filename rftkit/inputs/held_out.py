"""Held out means unseen: which tasks of an evaluation split the training split holds too.

Tasks are compared by content, through the example's task key (a FrozenLake map's grid, a problem's
normalised text), never by ids: two draws with different ids can give the same map or problem.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Hashable

import pyarrow.parquet as pq

from rftkit.inputs import tasksets

TaskKey = Callable[[dict], Hashable]


def seen_in(train_path: Path, rows: list[dict], key: TaskKey) -> list[bool]:
    """For each of `rows`, whether the split at `train_path` holds a task with the same content."""
    train = {key(row) for row in pq.read_table(train_path).to_pylist()}
    return [key(row) in train for row in rows]


def warning(seen: list[bool], evaluated: str, train_path: Path) -> str | None:
    """One line naming how many of an evaluation's tasks are training tasks too; None when none is."""
    if not any(seen):
        return None
    return (f"warning: {evaluated}: {sum(seen)} of {len(seen)} tasks are also in the training split {train_path} "
            f"(same content): figures on them are not held out")


def warn_seen_tasksets(config: dict, key: TaskKey) -> None:
    """Print `warning` for each eval taskset of a resolved launch config that shares tasks with its training
    taskset (the splits exist: check_task_splits has run)."""
    (train, _), *evals = tasksets(config)
    train_path = Path(train["path"]) / f"{train.get('split', 'train')}.parquet"
    for taskset, dotted in evals:
        path = Path(taskset["path"]) / f"{taskset.get('split', 'train')}.parquet"
        if path.resolve() == train_path.resolve():
            continue  # an evaluation of the training split itself is not meant to be held out
        line = warning(seen_in(train_path, pq.read_table(path).to_pylist(), key),
                       f"{dotted} ({taskset.get('name') or path})", train_path)
        if line:
            print(line, file=sys.stderr, flush=True)
