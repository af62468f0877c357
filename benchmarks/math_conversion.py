"""Conversion time of 54,400 guru-shaped rows: the columnar convert_guru beside a row-wise pandas apply.

    python benchmarks/math_conversion.py
"""

import math
import time

import numpy as np
import pyarrow as pa

from math_bots.data import BOXED_INSTRUCTION, PASS_RATE_COLUMNS, convert_guru
from rftkit.cli import ArgumentParser

ROWS = 54_400


def guru_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    weak = rng.uniform(0, 1, n)
    weak[rng.random(n) < 0.01] = np.nan  # a few bad rows, as real data has
    return pa.table({
        "data_source": ["math"] * n,
        "prompt": [[{"role": "user", "content": f"Problem {i}: find the value of x if 3x + {i} = {i + 3}. "
                     f"{BOXED_INSTRUCTION}"}] for i in range(n)],
        "ability": ["math"] * n,
        "reward_model": [{"ground_truth": "1", "style": "rule"}] * n,
        PASS_RATE_COLUMNS[0]: weak,
        PASS_RATE_COLUMNS[1]: np.clip(weak + 0.2, 0, 1),
    })


def convert_rowwise(table: pa.Table):
    """The same rules, one row at a time with pandas' apply."""
    frame = table.to_pandas()

    def convert(row):
        messages = row["prompt"]
        question = (messages[0]["content"] if len(messages) else "") or ""
        question = question.replace(BOXED_INSTRUCTION, "").strip()
        truth = str((row["reward_model"] or {}).get("ground_truth") or "").strip()
        rates = [row[c] for c in PASS_RATE_COLUMNS]
        ok = bool(question and truth) and all(r is not None and not math.isnan(r) and 0 <= r <= 1 for r in rates)
        return {"ok": ok, "question": question, "answer": f"#### {truth}",
                **dict(zip(PASS_RATE_COLUMNS, rates))}

    converted = frame.apply(convert, axis=1, result_type="expand")
    return converted[converted["ok"]].drop(columns="ok")


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(argv: list[str] | None = None) -> None:
    ArgumentParser(description=__doc__).parse_args(argv)  # --help: the benchmark takes no flags
    table = guru_table(ROWS)
    columnar_time, (kept, _) = best_of(lambda: convert_guru(table), 5)
    rowwise_time, rowwise = best_of(lambda: convert_rowwise(table), 2)
    assert kept.num_rows == len(rowwise), "the two conversions disagree"
    print(f"{ROWS} guru-shaped rows, {kept.num_rows} kept")
    print(f"convert_guru (pyarrow compute)  {columnar_time:8.3f} s")
    print(f"row-wise pandas apply           {rowwise_time:8.3f} s  ({rowwise_time / columnar_time:.0f}x slower)")


if __name__ == "__main__":
    main()
