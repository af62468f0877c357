"""experiments/frozenlake_runs.py: every kept FrozenLake learning run on the maps training never saw."""

import json
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from experiments import frozenlake_runs
from frozenlake.data import SCHEMA, draw_tasks, layout
from frozenlake.reference import safe_walk_pass_rate
from frozenlake.report import goal_choices, hole_choices, move_shares
from rftkit.reports.evaluation import SEEN

SWEEP = REPO / "docs/learning/sweep1"


def test_the_kept_sweep_runs_give_their_own_reports_figures(tmp_path):
    """The default data holds no training layout among its test maps: every map counts, and the figures are the
    ones each run's before_after.md gives for layouts not in training."""
    assert frozenlake_runs.main([f"lora={SWEEP / 'lora32_5e-5'}", f"whole={SWEEP / 'whole_1e-6'}",
                                 "--out", str(tmp_path)]) == 0
    text = (tmp_path / "runs.md").read_text()
    for name, folder in (("lora", "lora32_5e-5"), ("whole", "whole_1e-6")):
        row = next(line for line in (SWEEP / folder / "before_after.md").read_text().splitlines()
                   if line.startswith("| layouts not in training |"))
        maps, before, after, counts, p, walk = (cell.strip() for cell in row.split("|")[2:8])
        expected = f"| {name} | {maps} | {before} | {after} ("
        assert expected in text and f"| {counts}, p = {p} | {walk} |" in text
    assert (tmp_path / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def evaluation(folder, maps, successes, seen=None):
    """evaluate.py's episodes.jsonl for `maps` (size, uid), one episode each, reaching the goal where `successes`
    says; flagged as seen where `seen` gives one."""
    folder.mkdir(parents=True)
    rows = []
    for number, ((size, uid), success) in enumerate(zip(maps, successes)):
        row = {"task_number": number,
               "task": {"uid": uid, "size": size, "seed": number, "p": 0.8, "random_pass_rate": 0.25},
               "reward": float(success),
               "metrics": {"env_steps": 4.0, "invalid_actions": 1.0, "success": float(success)},
               "reason": "goal" if success else "hole", "error": None}
        if seen is not None:
            row[SEEN] = seen[uid]
        rows.append(row)
    (folder / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_only_the_unseen_maps_count(tmp_path):
    maps = [(2, "a"), (3, "b"), (3, "c"), (4, "d")]
    seen = {"a": True, "b": False, "c": False, "d": False}
    evaluation(tmp_path / "run/before", maps, [1, 0, 0, 0], seen)
    evaluation(tmp_path / "run/after", maps, [0, 1, 1, 0], seen)  # the seen map got worse: not counted
    result = frozenlake_runs.unseen(tmp_path / "run", None)
    assert result["maps"] == 3 and (result["better"], result["worse"]) == (2, 0)
    assert result["before"]["success_rate"] == 0 and result["after"]["success_rate"] == pytest.approx(2 / 3)
    assert sorted(result["after"]["by_size"]) == [3, 4] and result["random walk"] == pytest.approx(0.25)
    safe = [safe_walk_pass_rate({"size": size, "seed": number, "p": 0.8}) for number, (size, _) in enumerate(maps)]
    assert result["safe walk"] == pytest.approx(sum(safe[1:]) / 3)  # the unseen maps' own
    assert result["safe walk by size"] == pytest.approx({3: (safe[1] + safe[2]) / 2, 4: safe[3]})
    # the three unseen maps' episodes: before, three holes (the fixture's failures); after, two goals and a hole
    table = frozenlake_runs.markdown({"r": result})
    assert "| r | 0 -> 2 | 3 -> 1 | 0 -> 0 | 0 -> 0 |" in table
    assert table.count("| r | - | - | - |") == 2  # the fixture's episodes kept no turns: nothing on holes or route


def test_a_move_into_a_hole_counts_where_a_safe_tile_was_next_to_the_agent_too():
    def turn(grid, action):
        return {"prompt": f"Move 1 of 10.\nCurrent grid:\n{grid}\nWhat is your next move?", "action": action}

    beside_a_hole = "P O\n_ G"  # Right is the hole, Down safe; Left and Up leave the grid
    episodes = [{"turns": [turn(beside_a_hole, "Right"), turn(beside_a_hole, "Down"), turn(beside_a_hole, None),
                           turn("P _\n_ G", "Right"),  # no hole next to it: not counted
                           turn("P O\nO G", "Down")]},  # every tile next to it a hole: no choice, not counted
                {"turns": []}]
    assert hole_choices(episodes) == {"moves": 2, "into a hole": 0.5, "uniform choice": 0.25}
    assert hole_choices([{"task": {}}]) is None
    # closer to G without a hole: from beside the hole only Down is (Right is the hole); on the open grid Down and
    # Right both are; walled in by holes, G cannot be reached: not counted
    assert goal_choices(episodes) == {"moves": 3, "closer": pytest.approx(2 / 3),
                                      "uniform choice": pytest.approx((1 / 4 + 1 / 4 + 2 / 4) / 3)}
    assert goal_choices([{"task": {}}]) is None
    # every valid move, counted by direction, hole or not; the invalid one (None) left out
    assert move_shares(episodes) == {"Left": 0.0, "Down": 0.5, "Right": 0.5, "Up": 0.0}
    assert move_shares([{"task": {}}]) is None


def test_a_run_without_seen_flags_needs_its_training_split(tmp_path, capsys):
    rows, _ = draw_tasks(8, 3, 4, np.random.default_rng(0), progress=False)
    train = tmp_path / "train.parquet"  # the first three maps are the training split's
    pq.write_table(pa.Table.from_pylist([dict(r, index=i) for i, r in enumerate(rows[:3])], schema=SCHEMA), train)
    trained = {layout(r) for r in rows[:3]}
    for part, success in (("before", 0), ("after", 1)):
        folder = tmp_path / "run" / part
        folder.mkdir(parents=True)
        metrics = {"env_steps": 4.0, "invalid_actions": 0.0, "success": float(success)}
        folder.joinpath("episodes.jsonl").write_text("".join(json.dumps(
            {"task_number": i, "task": r, "reward": float(success), "metrics": metrics,
             "reason": "goal" if success else "hole", "error": None}) + "\n" for i, r in enumerate(rows)))
    with pytest.raises(SystemExit):
        frozenlake_runs.main([f"r={tmp_path / 'run'}", "--out", str(tmp_path / "out")])
    assert re.search(r"error: .*run/before: its episodes do not say which maps training had; give --train",
                     capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
    unseen = {r["uid"] for r in rows if layout(r) not in trained}
    assert 0 < len(unseen) < len(rows)
    result = frozenlake_runs.unseen(tmp_path / "run", train)
    assert result["maps"] == len(unseen) and result["better"] == len(unseen)


@pytest.mark.parametrize("argv,message", [
    (["a=X", "a=Y"], "each run needs its own name (given: a, a)"),
    (["a=X", "--train", "b=T"], "--train b: no run of that name"),
    (["=X"], "expected LABEL=PATH, both given, or PATH"),
])
def test_bad_command_lines_are_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        frozenlake_runs.main([*argv, "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_test_set_made_of_training_layouts_is_refused(tmp_path, capsys):
    maps = [(2, "a"), (3, "b")]
    for part in ("before", "after"):
        evaluation(tmp_path / "run" / part, maps, [0, 1], {"a": True, "b": True})
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    with pytest.raises(SystemExit):
        frozenlake_runs.main([f"r={tmp_path / 'run'}", "--out", str(tmp_path / "out")])
    assert "every test map has a training map's layout; nothing is held out" in capsys.readouterr().err
