"""What choosing a step's tasks costs: Trinity's `random` selector against BOTS, timed in one process.

    python -m experiments.selector_cost                          # the shipped GSM-Symbolic split, 1,120 tasks
    python -m experiments.selector_cost --tasks 1120 92000       # and upstream's guru-RL-92k size
    python -m experiments.selector_cost --step-seconds 11.2      # also as a share of a training step

Both selectors come from Trinity's registry (`random`; the project's `difficulty_based_resumable`, which
selects as `difficulty_based` does), read the math config's batch size and BOTS kwargs, and run --steps
steps over the train split's pass-rate columns, repeated to --tasks rows where asked: a selector's cost
depends on how many tasks it scores, not on what they say. A step is `get_indices` plus `feedback` with
pass rates drawn per task. It prints milliseconds per step for each, BOTS over random, and with
--step-seconds (a run's seconds per explore step) each as a share of the step. The BOTS paper puts its
selection at 0.2% of a step or less.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import time
from pathlib import Path

from rftkit.cli import ArgumentParser, above, at_least
from rftkit.example import REPO
from rftkit.inputs import reports_input_errors

CONFIG = REPO / "configs" / "config_difficulty.yaml"
SELECTORS = ("random", "difficulty_based_resumable")
DATA = REPO / "math_bots" / "tasksets" / "gsm_symbolic" / "train.parquet"
FEATURES = ("smollm2_pass_rate", "qwen_coder_0.5b_pass_rate")  # the BOTS comparison's priors, weakest first


def make_selector(name: str, rows, batch: int, kwargs: dict, seed: int):
    import datasets
    from trinity.buffer.reader.file_reader import _HFBatchReader
    from trinity.buffer.selector import SELECTORS as REGISTRY
    from trinity.common.config import DataSelectorConfig

    import rftkit.trinity_plugins.resumable_bots  # noqa: F401 (registers the BOTS selector)

    reader = _HFBatchReader(datasets.Dataset.from_dict(rows), name="train", default_batch_size=batch,
                            total_epochs=1, enable_progress_bar=False)
    return REGISTRY.get(name)(reader, DataSelectorConfig(selector_type=name, seed=seed, feature_keys=list(FEATURES),
                                                         kwargs=dict(kwargs)))


def time_steps(selector, steps: int, batch: int, rng) -> list[float]:
    """Milliseconds of each step: choosing `batch` tasks, then taking their pass rates back (the BOTS selector's own
    line per step, which a run's log keeps, is not printed here)."""
    spent = []
    for _ in range(steps):
        started = time.perf_counter()
        chosen = selector.get_indices(batch).tolist()
        selector.feedback(indices=chosen, values=rng.integers(0, 9, len(chosen)) / 8)
        spent.append(1000 * (time.perf_counter() - started))
    return spent


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import pyarrow.parquet as pq

    from rftkit.overrides import load_yaml

    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="a train split with the pass-rate columns")
    parser.add_argument("--tasks", type=at_least(1), nargs="+", help="taskset sizes (default: the split's)")
    parser.add_argument("--steps", type=at_least(2), default=200, help="steps per selector (default: %(default)s)")
    parser.add_argument("--step-seconds", type=above(0), help="a run's seconds per explore step, for the shares")
    args = parser.parse_args(argv)
    config = load_yaml(CONFIG)
    batch = config["buffer"]["batch_size"]
    kwargs = config["buffer"]["explorer_input"]["taskset"]["data_selector"]["kwargs"]
    table = pq.read_table(args.data, columns=list(FEATURES))
    print(f"{args.steps} steps of batch {batch}, BOTS kwargs {kwargs} ({CONFIG.name}); rows from {args.data}")
    print("| tasks | random ms/step | BOTS ms/step | BOTS / random |" + (" random share | BOTS share |"
                                                                       if args.step_seconds else ""))
    print("|---|---|---|---|" + ("---|---|" if args.step_seconds else ""))
    for tasks in args.tasks or [table.num_rows]:
        repeats = -(-tasks // table.num_rows)
        rows = {name: (table.column(name).to_pylist() * repeats)[:tasks] for name in FEATURES}
        medians = []
        for name in SELECTORS:
            selector = make_selector(name, rows, batch, kwargs, seed=42)
            with contextlib.redirect_stdout(io.StringIO()):
                spent = time_steps(selector, args.steps, batch, np.random.default_rng(0))
            medians.append(statistics.median(spent))
        line = f"| {tasks:,} | {medians[0]:.3f} | {medians[1]:.3f} | {medians[1] / medians[0]:.1f} |"
        if args.step_seconds:
            line += "".join(f" {ms / 1000 / args.step_seconds:.4%} |" for ms in medians)
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
