"""The GSM-Symbolic splits shipped in math_bots/tasksets/gsm_symbolic: what they hold, what their README says
of them, and the README's offline command, which dry-runs on them as written."""

from __future__ import annotations

import asyncio
import hashlib
import re
import shlex
import subprocess
import sys

import pyarrow.parquet as pq

from math_bots.gsm_symbolic import LEFT_OUT
from math_bots.judge import gsm8k_judge
from rftkit.example import REPO

FOLDER = REPO / "math_bots" / "tasksets" / "gsm_symbolic"
FEATURES = ["smollm2_pass_rate", "qwen_coder_0.5b_pass_rate"]  # weakest first


def test_the_splits_are_the_documented_ones_with_a_rate_per_task():
    train, test = (pq.read_table(FOLDER / f"{split}.parquet") for split in ("train", "test"))
    templates = [set(table.column("template").to_pylist()) for table in (train, test)]
    assert (train.num_rows, test.num_rows) == (1120, 272) and [len(t) for t in templates] == [70, 17]
    assert not templates[0] & templates[1] and not (templates[0] | templates[1]) & set(LEFT_OUT)
    assert train.column_names == ["question", "answer", "template", "instance", *FEATURES]
    for name in FEATURES:  # 4 episodes a task: a rate is a multiple of 1/4, never missing
        assert {4 * rate for rate in train.column(name).to_pylist()} <= {0, 1, 2, 3, 4}, name
    rates = {name: train.column(name).to_pylist() for name in FEATURES}
    assert sum(rates[FEATURES[0]]) <= sum(rates[FEATURES[1]])  # the weaker model first, as feature_keys wants
    assert sum(rate > 0 for rate in rates[FEATURES[1]]) == 82  # the figure in the README and the results page


def test_no_test_problem_is_a_training_problem_by_its_text():
    """Held out by content: no question of the test split is a training question, up to case and whitespace
    (the templates are apart already, above; a template could still give two splits the same text)."""
    from math_bots.data import question_key
    from rftkit.inputs.held_out import seen_in

    test = pq.read_table(FOLDER / "test.parquet").to_pylist()
    assert not any(seen_in(FOLDER / "train.parquet", test, question_key))
    assert len({question_key(row) for row in test}) == len(test)


def test_the_readme_names_these_files_by_their_sha256():
    said = dict(re.findall(r"`(\w+\.parquet)` `([0-9a-f]{16})…`", (FOLDER / "README.md").read_text()))
    assert said.keys() == {"train.parquet", "test.parquet"}
    for name, prefix in said.items():
        assert hashlib.sha256((FOLDER / name).read_bytes()).hexdigest().startswith(prefix), name


def test_the_judge_takes_every_test_answer_and_refuses_another_number():
    for row in pq.read_table(FOLDER / "test.parquet").to_pylist():
        truth = row["answer"].split("####")[-1].strip()
        right = asyncio.run(gsm8k_judge(row, f"The answer is \\boxed{{{truth}}}."))
        wrong = asyncio.run(gsm8k_judge(row, f"The answer is \\boxed{{{truth}1}}."))
        assert (right.reward, wrong.reward) == (1.0, 0.0), row


def readme_command() -> list[str]:
    """README.md's offline math command, its continuation lines joined."""
    text = (REPO / "README.md").read_text().replace("\\\n", " ")
    lines = [line for line in text.splitlines() if "--train-dir math_bots/tasksets/gsm_symbolic" in line]
    assert len(lines) == 1, lines
    python, *rest = shlex.split(lines[0])
    assert python == ".venv/bin/python"
    return [sys.executable, *rest]


def test_the_readme_offline_command_dry_runs_on_a_fresh_clone():
    command = readme_command()
    assert "--dry-run" in command and f"feature_keys=[{','.join(FEATURES)}]" in " ".join(command)
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "dry run: the config is valid" in result.stdout + result.stderr
    assert str(FOLDER / "train.parquet") not in result.stderr  # no complaint about the shipped data
