"""FrozenLake task splits: rows of (seed, size, p) whose maps are solvable within `env_max_steps` moves.

Each row fully determines its map through `generate_map(size, p, seed)`;
the columns `env_max_steps` and `shortest_path_length` record the route
budget the map was checked against and its shortest route. Two exact
reference pass rates (frozenlake/reference.py), the chance that a fixed
policy reaches G in an episode of AGENT_MAX_STEPS moves, are BOTS's
difficulty features.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from frozenlake.env import AGENT_MAX_STEPS, ENV_MAX_STEPS
from frozenlake.maps import P_RANGE, generate_map, shortest_path_length
from frozenlake.reference import STRONG, WEAK, reference_pass_rates
from rftkit.files import atomic_paths

DEFAULT_DIR = "data/frozenlake"
# The data script's defaults: map sides 2..6, 10,000 training and 100 test maps (upstream's), and the seed.
MAP_MAX_SIZE, TRAIN_SIZE, TEST_SIZE, SEED = 6, 10000, 100, 42
# What every task row must hold, as `rftkit.inputs` kinds: its map is generate_map(size, p, seed).
TASK_COLUMNS = {"seed": "integer", "size": "integer", "p": "number"}
# The map is in the prompt of each of an episode's moves: AGENT_MAX_STEPS renderings of a side of 32 (1,024
# tiles each) and their replies stay inside the configs' 25,600-token context, where a much larger side would not.
MAX_MAP_SIZE = 32
# generate_map's bounds (numpy's generator takes seeds of 0 or more), and the side above.
TASK_RANGES = {"seed": (0, None), "size": (2, MAX_MAP_SIZE), "p": (0.0, 1.0)}

SCHEMA = pa.schema([
    ("seed", pa.int64()),
    ("size", pa.int64()),
    ("p", pa.float64()),
    ("index", pa.int64()),
    ("uid", pa.string()),
    ("env_max_steps", pa.int64()),
    ("shortest_path_length", pa.int64()),
    (WEAK, pa.float64()),
    (STRONG, pa.float64()),
])

# Give up rather than spin forever when the settings make solvable maps too rare.
MAX_DRAWS_PER_ROW = 1000


def check_settings(map_max_size: int, train_size: int, test_size: int, env_max_steps: int) -> None:
    """Raise ValueError naming the flag for any setting that cannot produce a dataset."""
    if not 2 <= map_max_size <= MAX_MAP_SIZE:
        raise ValueError(f"--map_max_size: must be 2 (a map needs S and G) to {MAX_MAP_SIZE} (the map must fit "
                         f"the prompt of each move), got {map_max_size}")
    if train_size < 1:
        raise ValueError(f"--train_size: must be at least 1, got {train_size}")
    if test_size < 1:
        raise ValueError(f"--test_size: must be at least 1, got {test_size}")
    if not 1 <= env_max_steps <= AGENT_MAX_STEPS:
        raise ValueError(f"--env_max_steps: must be 1 to {AGENT_MAX_STEPS} (the moves of an episode), "
                         f"got {env_max_steps}")


def solvable_tasks(count: int, map_max_size: int, env_max_steps: int, seed: int, progress: bool = True):
    """`count` distinct task rows (without `index`), drawn reproducibly from `seed`.

    Sizes are uniform over 2..map_max_size inclusive and p over P_RANGE
    (rounded to two decimals); maps whose shortest route is longer than
    `env_max_steps`, or that have none, are skipped.
    """
    rng = np.random.default_rng(seed)
    rows, seen, draws = [], set(), 0
    with tqdm(total=count, desc="solvable maps", unit="map", disable=not progress) as bar:
        while len(rows) < count:
            draws += 1
            if draws > MAX_DRAWS_PER_ROW * count:
                raise RuntimeError(f"only {len(rows)} of {count} solvable maps after {draws - 1} draws; "
                                   f"raise --env_max_steps or lower --map_max_size")
            map_seed = int(rng.integers(0, 2**31 - 1))
            size = int(rng.integers(2, map_max_size + 1))
            p = round(float(rng.uniform(*P_RANGE)), 2)
            uid = f"{map_seed}_{size}_{p}"
            if uid in seen:
                continue
            desc = generate_map(size, p, map_seed)
            length = shortest_path_length(desc)
            if length is None or length > env_max_steps:
                continue
            seen.add(uid)
            rows.append({"seed": map_seed, "size": size, "p": p, "uid": uid, "env_max_steps": env_max_steps,
                         "shortest_path_length": length, **reference_pass_rates(desc, AGENT_MAX_STEPS)})
            bar.update()
    return rows


def write_dataset(local_dir: str | Path = DEFAULT_DIR, map_max_size: int = MAP_MAX_SIZE,
                  train_size: int = TRAIN_SIZE, test_size: int = TEST_SIZE, env_max_steps: int = ENV_MAX_STEPS,
                  seed: int = SEED, progress: bool = True) -> dict[str, Path]:
    """Write `train.parquet` and `test.parquet` (disjoint maps) to `local_dir`; return their paths."""
    check_settings(map_max_size, train_size, test_size, env_max_steps)
    rows = solvable_tasks(train_size + test_size, map_max_size, env_max_steps, seed, progress)
    splits = {"train": rows[:train_size], "test": rows[train_size:]}
    paths = {name: Path(local_dir) / f"{name}.parquet" for name in splits}
    with atomic_paths(*paths.values()) as temps:
        for (name, split_rows), tmp in zip(splits.items(), temps):
            table = pa.Table.from_pylist([{**row, "index": i} for i, row in enumerate(split_rows)], schema=SCHEMA)
            pq.write_table(table, tmp)
    return paths


def write_sample(folders: dict[str, Path], tasks: int) -> None:
    """Small data for the GPU smoke and the step-cost measurement: `tasks` training maps and 8 to evaluate,
    sizes 2 to MAP_MAX_SIZE, in the one folder both roles read."""
    write_dataset(folders["train"], train_size=tasks, test_size=8, progress=False)
