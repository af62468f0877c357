"""FrozenLake task splits: rows of (seed, size, p) whose maps are solvable within `env_max_steps` moves.

Each row fully determines its map through `generate_map(size, p, seed)`;
the columns `env_max_steps` and `shortest_path_length` record the route
budget the map was checked against and its shortest route. Two exact
reference pass rates (frozenlake/reference.py), the chance that a fixed
policy reaches G in an episode of AGENT_MAX_STEPS moves, are BOTS's
difficulty features.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from frozenlake.env import AGENT_MAX_STEPS, ENV_MAX_STEPS
from frozenlake.maps import P_RANGE, TILES, generate_map, shortest_path_length, task_map
from frozenlake.reference import STRONG, WEAK, reference_pass_rates
from rftkit.files import atomic_paths

DEFAULT_DIR = "data/frozenlake"
# The data script's defaults: map sides 2..6, 10,000 training and 100 test maps (upstream's), and the seed.
DEFAULT_MAP_MAX_SIZE, TRAIN_SIZE, TEST_SIZE, SEED = 6, 10000, 100, 42
# The test maps come from numpy's default_rng([seed, TEST_STREAM]), the training maps from default_rng(seed).
TEST_STREAM = 1
# What every task row must hold, as `rftkit.inputs` kinds: its map is generate_map(size, p, seed).
TASK_COLUMNS = {"seed": "integer", "size": "integer", "p": "number"}
# Every move's prompt shows the whole map (the agent keeps no history, so once a prompt): a side of 32, 1,024
# tiles, keeps that prompt short beside the configs' 23,552 prompt tokens.
LARGEST_MAP_SIZE = 32
# generate_map's bounds (numpy's generator takes seeds of 0 or more), and the side above.
TASK_RANGES = {"seed": (0, None), "size": (2, LARGEST_MAP_SIZE), "p": (0.0, 1.0)}

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

# Give up rather than spin forever when the settings make solvable (or new) maps too rare.
MAX_DRAWS_PER_ROW = 1000
# The largest side whose maps are few enough to count one by one (a side of 4 has about 3.9 million).
COUNTED_SIDE = 3
# A size whose solvable layouts the test split takes this share of or more gets a note: training sees the rest only.
NOTE_SHARE = 0.1


def layout(row: dict) -> str:
    """A task row's map as `grid` has it: what tells two maps apart (the uid only names the draw)."""
    return grid(task_map(row))


def task_problem(row: dict) -> str | None:
    """What is wrong with a task row's optional columns, or None: the map it gives in `desc` (rows of one
    length, of S, F, H and G, one S and a G), the moves it allows, whether it is slippery, and the reference
    pass rates the reports and BOTS read. The workflow reads them as given, so a bad one would fail or
    mislead every episode of the task."""
    desc = row.get("desc")
    if desc is not None:
        if not isinstance(desc, list) or not desc or not all(isinstance(line, str) and line for line in desc):
            return f"column 'desc' is {desc!r}; expected the map as a list of its rows, strings of tiles"
        if len({len(line) for line in desc}) > 1 or set("".join(desc)) - set(TILES):
            return (f"column 'desc' is {desc!r}; expected rows of one length, each tile one of {TILES} "
                    f"(start, ice, hole, goal)")
        tiles = "".join(desc)
        if tiles.count("S") != 1 or "G" not in tiles:
            return f"column 'desc' is {desc!r}; expected one start tile S and a goal G"
    steps = row.get("agent_max_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, float))
                              or not float(steps).is_integer() or steps < 1):
        return f"column 'agent_max_steps' is {steps!r}; expected a whole number of moves, 1 or more"
    slippery = row.get("is_slippery")
    if slippery is not None and not isinstance(slippery, bool):
        return f"column 'is_slippery' is {slippery!r}; expected true or false"
    for name in (WEAK, STRONG):
        rate = row.get(name)
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1):
            return f"column {name!r} is {rate!r}; expected a pass rate from 0 to 1"
    return None


def grid(desc: list[str]) -> str:
    """A map's rows joined by newlines, one hashable string."""
    return "\n".join(desc)


@functools.cache
def solvable_layouts(size: int, env_max_steps: int) -> int:
    """How many distinct maps of side `size` (at most COUNTED_SIDE) have a route of at most `env_max_steps` moves."""
    if size > COUNTED_SIDE:
        raise ValueError(f"side {size}: too many maps to count (at most {COUNTED_SIDE})")
    cells, count = size * size, 0
    for start, goal in itertools.permutations(range(cells), 2):
        for tiles in itertools.product("FH", repeat=cells - 2):
            tiles_in_order = list(tiles)
            tiles_in_order.insert(min(start, goal), "S" if start < goal else "G")
            tiles_in_order.insert(max(start, goal), "G" if start < goal else "S")
            desc = ["".join(tiles_in_order[r * size:(r + 1) * size]) for r in range(size)]
            length = shortest_path_length(desc)
            count += length is not None and length <= env_max_steps
    return count


def check_settings(map_max_size: int, train_size: int, test_size: int, env_max_steps: int) -> None:
    """Raise ValueError naming the flag for any setting that cannot produce a dataset."""
    if not 2 <= map_max_size <= LARGEST_MAP_SIZE:
        raise ValueError(f"--map_max_size: must be 2 (a map needs S and G) to {LARGEST_MAP_SIZE} (the map must "
                         f"fit the prompt of each move), got {map_max_size}")
    if train_size < 1:
        raise ValueError(f"--train_size: must be at least 1, got {train_size}")
    if test_size < 1:
        raise ValueError(f"--test_size: must be at least 1, got {test_size}")
    if not 1 <= env_max_steps <= AGENT_MAX_STEPS:
        raise ValueError(f"--env_max_steps: must be 1 to {AGENT_MAX_STEPS} (the moves of an episode), "
                         f"got {env_max_steps}")
    if map_max_size <= COUNTED_SIDE:
        layouts = sum(solvable_layouts(size, env_max_steps) for size in range(2, map_max_size + 1))
        if test_size >= layouts:
            raise ValueError(f"--test_size: {test_size} test maps need as many distinct layouts, and training at "
                             f"least one more, but sides 2 to {map_max_size} have only {layouts} maps solvable in "
                             f"{env_max_steps} moves; lower --test_size or raise --map_max_size")


def draw_tasks(count: int, map_max_size: int, env_max_steps: int, rng: np.random.Generator, *,
               reserved: frozenset[str] = frozenset(), distinct: bool = False, name: str = "maps",
               progress: bool = True) -> tuple[list[dict], list[str]]:
    """`count` task rows (without `index`) drawn from `rng`, and their layouts.

    Sizes are uniform over 2..map_max_size inclusive and p over P_RANGE
    (rounded to two decimals). A draw is skipped when its map has no route
    of at most `env_max_steps` moves, when its uid was drawn before, when its
    layout is in `reserved`, and, with `distinct`, when its layout was drawn before.
    """
    rows, layouts, uids, draws = [], [], set(), 0
    taken = set(reserved)
    with tqdm(total=count, desc=name, unit="map", disable=not progress) as bar:
        while len(rows) < count:
            draws += 1
            if draws > MAX_DRAWS_PER_ROW * count:
                raise RuntimeError(f"only {len(rows)} of {count} {name} after {draws - 1} draws; raise "
                                   f"--env_max_steps or --map_max_size, or lower --test_size")
            map_seed = int(rng.integers(0, 2**31 - 1))
            size = int(rng.integers(2, map_max_size + 1))
            p = round(float(rng.uniform(*P_RANGE)), 2)
            uid = f"{map_seed}_{size}_{p}"
            if uid in uids:
                continue
            desc = generate_map(size, p, map_seed)
            key = grid(desc)
            if key in taken:
                continue
            length = shortest_path_length(desc)
            if length is None or length > env_max_steps:
                continue
            uids.add(uid)
            if distinct:
                taken.add(key)
            rows.append({"seed": map_seed, "size": size, "p": p, "uid": uid, "env_max_steps": env_max_steps,
                         "shortest_path_length": length, **reference_pass_rates(desc, AGENT_MAX_STEPS)})
            layouts.append(key)
            bar.update()
    return rows, layouts


def split_paths(local_dir: str | Path) -> dict[str, Path]:
    """Where write_dataset puts each split."""
    return {name: Path(local_dir) / f"{name}.parquet" for name in ("train", "test")}


def write_dataset(local_dir: str | Path = DEFAULT_DIR, map_max_size: int = DEFAULT_MAP_MAX_SIZE,
                  train_size: int = TRAIN_SIZE, test_size: int = TEST_SIZE, env_max_steps: int = ENV_MAX_STEPS,
                  seed: int = SEED, progress: bool = True) -> dict[str, Path]:
    """Write `train.parquet` and `test.parquet` to `local_dir`; return their paths.

    The test maps are drawn first, from a stream of their own, with no layout twice; the training maps are
    drawn from `seed`'s stream as before, skipping every layout the test split holds (repeats among
    themselves are kept, as upstream's generator has them). So no test map is a training map by content.
    """
    check_settings(map_max_size, train_size, test_size, env_max_steps)
    paths = split_paths(local_dir)
    test, test_layouts = draw_tasks(test_size, map_max_size, env_max_steps, np.random.default_rng([seed, TEST_STREAM]),
                                    distinct=True, name="test maps", progress=progress)
    train, _ = draw_tasks(train_size, map_max_size, env_max_steps, np.random.default_rng(seed),
                          reserved=frozenset(test_layouts), name="training maps", progress=progress)
    splits = {"train": train, "test": test}
    with atomic_paths(*paths.values()) as temps:
        for (name, split_rows), tmp in zip(splits.items(), temps):
            table = pa.Table.from_pylist([{**row, "index": i} for i, row in enumerate(split_rows)], schema=SCHEMA)
            pq.write_table(table, tmp)
    return paths


def split_summary(train: list[dict], test: list[dict]) -> list[dict]:
    """Per split and map size: rows, distinct layouts and, for the test split, layouts also in training; for
    the sides small enough to count, how many solvable layouts the side has (else None)."""
    train_layouts = {layout(row) for row in train}
    steps = int(test[0]["env_max_steps"])  # the maps' route budget, the same in every row the script writes
    summary = []
    for name, rows in (("train", train), ("test", test)):
        by_size: dict[int, list[str]] = {}
        for row in rows:
            by_size.setdefault(int(row["size"]), []).append(layout(row))
        for size, grids in sorted(by_size.items()):
            summary.append({"split": name, "size": size, "rows": len(grids), "layouts": len(set(grids)),
                            "in_train": None if name == "train" else len(set(grids) & train_layouts),
                            "solvable": solvable_layouts(size, steps) if size <= COUNTED_SIDE else None})
    return summary


def write_sample(folders: dict[str, Path], tasks: int) -> None:
    """Small data for the GPU smoke and the step-cost measurement: `tasks` training maps and 8 to evaluate,
    sizes 2 to DEFAULT_MAP_MAX_SIZE, in the one folder both roles read."""
    write_dataset(folders["train"], train_size=tasks, test_size=8, progress=False)
