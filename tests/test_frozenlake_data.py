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
    assert len(set(uids)) == len(uids), "train and test share a map"


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
    train = rows(out / "train.parquet")
    assert {r["size"] for r in train} == {2, 3}
    assert all(r["env_max_steps"] == 2 and r["shortest_path_length"] <= 2 for r in train)


@pytest.mark.parametrize("flag,value", [("--map_max_size", "1"), ("--train_size", "0"),
                                        ("--test_size", "-1"), ("--env_max_steps", "0")])
def test_bad_arguments_fail_before_writing(tmp_path, flag, value):
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "get_frozenlake_data.py"),
                             "--local_dir", str(tmp_path / "out"), flag, value], capture_output=True, text=True)
    assert result.returncode == 2
    assert flag in result.stderr
    assert not (tmp_path / "out").exists()


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
