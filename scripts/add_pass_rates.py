"""Add a reference model's pass rate per task to a split, from an evaluation of that model on it.

    python scripts/evaluate.py --task math --data data/math_bots/gsm_symbolic --split train \\
        --model openai --base-url http://127.0.0.1:8000/v1 --model-name smollm2 --repeats 4 --out outputs/smollm2
    python scripts/add_pass_rates.py --data data/math_bots/gsm_symbolic --split train \\
        --episodes outputs/smollm2/episodes.jsonl --column smollm2_pass_rate

BOTS (Trinity's `difficulty_based` selector) starts each task's difficulty estimate from feature
columns: the pass rates of reference models of different strength, as guru-RL-92k ships them for
Qwen2.5-7B and Qwen3-30B. For another task set, upstream's advice is to measure them: run a few
models over the training split and record how often each solves each task. This takes the
episodes.jsonl of `scripts/evaluate.py` (every task, `--repeats` k times) and writes the mean reward
of each task's k episodes into `<column>` of `<data>/<split>.parquet` (replaced if present), then
prints a histogram and draws `<data>_<column>.png` beside the folder. A task set whose rates are all
0 (or all 1) gives BOTS nothing to choose between: the counts at 0 and 1 are printed.

The episodes must be of this split: one task per row, in order, each with the row's question
(`--limit` evaluations are refused), and nothing is written otherwise.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rftkit.cli import ArgumentParser
from rftkit.files import atomic_paths
from rftkit.inputs import InputError, open_split, read_json, reports_input_errors


def pass_rates(tasks: list[dict], episodes: list[dict], source: str) -> tuple[list[float], int]:
    """(mean reward per task in row order, episodes per task), checked against the split's rows."""
    rewards: dict[int, list[float]] = defaultdict(list)
    for line, episode in enumerate(episodes, 1):
        if not isinstance(episode, dict) or not isinstance(episode.get("task"), dict):
            raise InputError(f"{source}: line {line}: expected an episode of scripts/evaluate.py (a JSON object "
                             f"with its task), got {str(episode)[:80]}")
        reward = episode.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not 0 <= reward <= 1:
            raise InputError(f"{source}: line {line}: reward {reward!r}, expected a number from 0 to 1")
        number = episode.get("task_number")
        if not isinstance(number, int) or not 0 <= number < len(tasks):
            raise InputError(f"{source}: line {line}: task_number {number!r} is not a row of the split "
                             f"({len(tasks)} rows)")
        if episode["task"].get("question") != tasks[number]["question"]:
            raise InputError(f"{source}: line {line}: task {number}'s question is not row {number}'s of the split "
                             f"(an evaluation of another split or file?)")
        rewards[number].append(float(reward))
    missing = [i for i in range(len(tasks)) if i not in rewards]
    if missing:
        raise InputError(f"{source}: no episode of row {missing[0]} ({len(missing)} of {len(tasks)} rows have none; "
                         f"evaluate the whole split, without --limit)")
    counts = {len(r) for r in rewards.values()}
    if len(counts) != 1:
        raise InputError(f"{source}: tasks have different numbers of episodes ({sorted(counts)}): one run "
                         f"with --repeats, please")
    return [sum(rewards[i]) / len(rewards[i]) for i in range(len(tasks))], counts.pop()


def histogram(rates: list[float], column: str) -> list[str]:
    counts, edges = np.histogram(rates, bins=np.linspace(0, 1, 11))
    lines = [f"{column}: {len(rates)} tasks, mean {np.mean(rates):.3f}; "
             f"{sum(r == 0 for r in rates)} at 0, {sum(r == 1 for r in rates)} at 1"]
    lines += [f"[{edges[i]:.1f}, {edges[i + 1]:.1f}{']' if i == 9 else ')'}  {counts[i]:>6}" for i in range(10)]
    return lines


def draw(rates: list[float], column: str, title: str, path: Path) -> None:
    from rftkit.reports.plots import plt, save_png

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.hist(rates, bins=20, range=(0, 1), color="tab:blue")
    ax.set_xlabel(column)
    ax.set_ylabel("tasks")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    save_png(fig, path)


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, required=True, help="folder with <split>.parquet")
    parser.add_argument("--split", default="train", help="split to add the column to (default: %(default)s)")
    parser.add_argument("--episodes", type=Path, required=True, help="episodes.jsonl of scripts/evaluate.py on it")
    parser.add_argument("--column", required=True, help="column to write, e.g. smollm2_pass_rate")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[\w.-]+", args.column):
        raise InputError(f"--column {args.column!r}: expected a name of letters, digits, '_', '.' or '-'")
    split_path = args.data / f"{args.split}.parquet"
    table = open_split(split_path, {"question": "string"}, "--data").read()
    if args.column in table.column_names and not pa.types.is_floating(table.schema.field(args.column).type):
        raise InputError(f"--column {args.column}: {split_path} has this column already, of "
                         f"{table.schema.field(args.column).type} values, not pass rates; name another")
    if not args.episodes.is_file():
        raise InputError(f"--episodes {args.episodes}: " + ("a folder, expected evaluate.py's episodes.jsonl in it"
                                                            if args.episodes.is_dir() else "no such file"))
    source = f"--episodes {args.episodes}"
    episodes = read_json(args.episodes, lines=True, flag="--episodes")
    rates, repeats = pass_rates(table.select(["question"]).to_pylist(), episodes, source)

    column = pa.array(rates, pa.float64())
    if args.column in table.column_names:
        table = table.set_column(table.column_names.index(args.column), args.column, column)
    else:
        table = table.append_column(args.column, column)
    plot = args.data.with_name(f"{args.data.name}_{args.column}.png")  # outside the folder: loaders read it whole
    with atomic_paths(split_path, plot) as (table_tmp, plot_tmp):
        pq.write_table(table, table_tmp)
        draw(rates, args.column, f"{args.column}: {len(rates)} tasks x {repeats} episodes", plot_tmp)
    print("\n".join(histogram(rates, args.column)))
    print(f"wrote {args.column} ({repeats} episodes a task) to {split_path}; plot: {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
