"""The data script: solvable maps only, all sizes, reproducible, atomic, clear errors."""

import subprocess
import sys
from collections import deque

import pyarrow.parquet as pq
import pytest
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv

import frozenlake.data
from frozenlake.data import write_dataset
from frozenlake.maps import generate_map, shortest_path

from conftest import REPO
from rftkit.inputs import read_json
from rftkit.reports.evaluation import episodes_file


def gym_shortest_length(desc):
    """Breadth-first search over Gymnasium's own transition table, independent of frozenlake.maps."""
    env = GymFrozenLakeEnv(desc=desc, is_slippery=False)
    start = int(env.reset(seed=0)[0])
    depth, frontier = {start: 0}, deque([start])
    while frontier:
        state = frontier.popleft()
        for action in range(4):
            (_, nxt, reward, terminated), = env.P[state][action]
            if reward > 0:
                return depth[state] + 1
            if not terminated and nxt not in depth:
                depth[nxt] = depth[state] + 1
                frontier.append(nxt)
    return None


def rows(path):
    return pq.read_table(path).to_pylist()


def test_every_map_is_solvable_within_the_bound(frozenlake_data):
    for split in ("train", "test"):
        for row in rows(frozenlake_data / f"{split}.parquet"):
            length = gym_shortest_length(generate_map(row["size"], row["p"], row["seed"]))
            assert length is not None and length <= row["env_max_steps"] == 8, row
            assert length == row["shortest_path_length"], row


def test_columns_sizes_and_ranges(frozenlake_data):
    train, test = rows(frozenlake_data / "train.parquet"), rows(frozenlake_data / "test.parquet")
    assert len(train) == 300 and len(test) == 100
    assert set(train[0]) >= {"seed", "size", "p", "index", "uid"}
    assert {r["size"] for r in train} == {2, 3, 4, 5, 6}  # map_max_size is inclusive
    assert all(0.6 <= r["p"] <= 0.85 for r in train + test)
    assert [r["index"] for r in test] == list(range(100))
    assert all(r["uid"] == f"{r['seed']}_{r['size']}_{r['p']}" for r in train + test)
    uids = [r["uid"] for r in train + test]
    assert len(set(uids)) == len(uids), "train and test share a draw"


def grids(rows_):
    """Each row's map, drawn again from its seed, size and p: the content, not the ids."""
    return [tuple(generate_map(r["size"], r["p"], r["seed"])) for r in rows_]


@pytest.mark.parametrize("max_size,train_size,test_size", [(6, 300, 100), (3, 400, 40), (2, 50, 30)])
def test_no_test_map_has_a_training_layout_or_a_twin(tmp_path, frozenlake_data, max_size, train_size, test_size):
    folder = frozenlake_data
    if (max_size, train_size, test_size) != (6, 300, 100):  # the shared data, and small sides with few layouts
        folder = tmp_path
        write_dataset(folder, map_max_size=max_size, train_size=train_size, test_size=test_size, progress=False)
    train, test = grids(rows(folder / "train.parquet")), grids(rows(folder / "test.parquet"))
    assert len(test) == test_size and len(train) == train_size
    assert not set(test) & set(train), "a test map has the layout of a training map"
    assert len(set(test)) == len(test), "two test maps have the same layout"
    assert {len(g) for g in test} == set(range(2, max_size + 1)), "every size stays in the test split"


def test_the_layout_count_is_gymnasiums():
    """Every 2x2 map with one S and one G, solved by Gymnasium's own transitions: 44 have a route in 8 moves."""
    import itertools

    maps = []
    for tiles in itertools.product("SGFH", repeat=4):
        if tiles.count("S") == 1 and tiles.count("G") == 1:
            maps.append(["".join(tiles[:2]), "".join(tiles[2:])])
    assert len(maps) == 48
    solvable = sum(gym_shortest_length(desc) is not None for desc in maps)
    assert frozenlake.data.solvable_layouts(2, 8) == solvable == 44


def test_the_old_split_is_reproduced_and_30_of_its_test_maps_were_training_layouts():
    """The learning page's maps (`--seed 20261202`, drawn before test layouts were reserved): the training stream
    gives its 10,000 training maps and then its 100 test maps, the ones in the kept episodes; 30 of those have a
    training map's layout (24 of side 2, 6 of side 3), the figure the results pages split by."""
    import numpy as np

    rows_, layouts = frozenlake.data.draw_tasks(10100, 6, 8, np.random.default_rng(20261202), progress=False)
    kept = read_json(episodes_file(REPO / "docs" / "learning" / "run5" / "before"), lines=True)
    test_uids = list(dict.fromkeys(episode["task"]["uid"] for episode in kept))
    assert [r["uid"] for r in rows_[10000:]] == test_uids
    train = set(layouts[:10000])
    seen = [r["size"] for r, grid in zip(rows_[10000:], layouts[10000:]) if grid in train]
    assert (len(seen), seen.count(2), seen.count(3)) == (30, 24, 6)


def test_start_and_goal_are_distinct_and_the_path_is_optimal():
    for seed in range(300):
        desc = generate_map(4, 0.7, seed)
        assert "".join(desc).count("S") == 1 and "".join(desc).count("G") == 1
        path = shortest_path(desc)
        assert (None if path is None else len(path)) == gym_shortest_length(desc)


def test_same_arguments_give_identical_files(tmp_path):
    for name in ("a", "b"):
        write_dataset(tmp_path / name, map_max_size=5, train_size=50, test_size=10, seed=3, progress=False)
    for split in ("train.parquet", "test.parquet"):
        assert (tmp_path / "a" / split).read_bytes() == (tmp_path / "b" / split).read_bytes()
    write_dataset(tmp_path / "c", map_max_size=5, train_size=50, test_size=10, seed=4, progress=False)
    assert (tmp_path / "c" / "train.parquet").read_bytes() != (tmp_path / "a" / "train.parquet").read_bytes()


def test_script_writes_splits_with_its_flags(tmp_path):
    out = tmp_path / "fl"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "get_frozenlake_data.py"), "--map_max_size", "3",
         "--train_size", "40", "--test_size", "5", "--local_dir", str(out), "--env_max_steps", "2"],
        capture_output=True, text=True, check=True)
    assert "train: 40 rows" in result.stdout
    # the report: per split and size, rows and distinct layouts; the test's layouts in training, all 0
    table = [line.split() for line in result.stdout.splitlines() if line.startswith(("train ", "test "))]
    assert table and {row[0] for row in table} == {"train", "test"}
    assert sum(int(row[2]) for row in table if row[0] == "test") == 5
    assert all(row[4] == "0" for row in table if row[0] == "test")
    train = rows(out / "train.parquet")
    assert {r["size"] for r in train} == {2, 3}
    assert all(r["env_max_steps"] == 2 and r["shortest_path_length"] <= 2 for r in train)


@pytest.mark.parametrize("flags,named", [(["--map_max_size", "1"], "--map_max_size"),
                                         (["--train_size", "0"], "--train_size"),
                                         (["--test_size", "-1"], "--test_size"),
                                         (["--env_max_steps", "0"], "--env_max_steps"),
                                         # 44 layouts of side 2: 100 distinct test maps cannot be drawn
                                         (["--map_max_size", "2"], "--test_size"),
                                         (["--map_max_size", "2", "--test_size", "44"], "--test_size")])
def test_bad_arguments_fail_before_writing(tmp_path, flags, named):
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "get_frozenlake_data.py"),
                             "--local_dir", str(tmp_path / "out"), *flags], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and named in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_size_with_few_layouts_gets_a_note(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "get_frozenlake_data.py"), "--map_max_size", "2",
                             "--train_size", "20", "--test_size", "10", "--local_dir", str(tmp_path)],
                            capture_output=True, text=True, check=True)
    assert "note: size 2 has only 44 solvable layouts; the test split holds 10 of them, so training sees only " \
           "the other 34" in result.stdout


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    calls = []

    def failing_write(table, where):
        calls.append(where)
        if len(calls) == 2:
            raise OSError("disk full")
        real_write(table, where)

    real_write = pq.write_table
    monkeypatch.setattr(frozenlake.data.pq, "write_table", failing_write)
    with pytest.raises(OSError, match="disk full"):
        write_dataset(tmp_path, map_max_size=4, train_size=20, test_size=5, progress=False)
    assert list(tmp_path.iterdir()) == []
