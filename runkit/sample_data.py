"""Small data for both examples, made through the project's own scripts as a user would make it: what
the GPU smoke, the resume smoke and the step-cost measurement train on."""

from __future__ import annotations

import sys
from pathlib import Path

from rftkit.example import Example
from runkit.steps import run_step

# Below the work folder, the splits make_data writes for each example, by role
SAMPLE_DATA = {"frozenlake": {"train": "data/frozenlake", "eval": "data/frozenlake"},
               "math": {"train": "data/math/guru_math", "eval": "data/math/aime24"}}


def make_data(work: Path, tasks: int = 64) -> None:
    """Small data through the project's own scripts, as a user would make it: `tasks` training tasks per
    example (FrozenLake maps of sizes 2 to 6, upstream's range), and a few to evaluate on."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from math_bots.data import guru_row

    work.mkdir(parents=True, exist_ok=True)  # the data scripts' logs go there
    run_step([sys.executable, "scripts/get_frozenlake_data.py", "--map_max_size", "6", "--train_size", str(tasks),
              "--test_size", "8", "--local_dir", str(work / "data" / "frozenlake")], work / "frozenlake_data.log",
             check=True)
    raw = work / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rows = [guru_row(f"What is {i} times {i + 3}? Please output the final answer within \\boxed{{}}.",
                     str(i * (i + 3)), weak=(i % 10) / 10, strong=min(1.0, (i % 10) / 10 + 0.3)) for i in range(tasks)]
    pq.write_table(pa.Table.from_pylist(rows), raw / "guru.parquet")
    aime = [{"problem": f"Find the remainder when {7 ** i} is divided by 1000.", "answer": str(7 ** i % 1000)}
            for i in range(8)]
    pq.write_table(pa.Table.from_pylist(aime), raw / "aime.parquet")
    run_step([sys.executable, "scripts/prepare_math_data.py", "--input", str(raw / "guru.parquet"),
              "--aime_input", str(raw / "aime.parquet"), "--processed_data_dir",
              str(work / "data" / "math" / "guru_math"), "--aime_dir", str(work / "data" / "math" / "aime24")],
             work / "math_data.log", check=True)


def sample_data(example: Example, work: Path) -> dict[str, Path]:
    """The folders make_data wrote for `example`, by role."""
    return {role: work / folder for role, folder in SAMPLE_DATA[example.name].items()}
