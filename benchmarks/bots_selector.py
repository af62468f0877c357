"""BOTS against random task selection on a simulated learner, through Trinity's real selection loop.

    python benchmarks/bots_selector.py [--steps 400] [--tasks 2000] [--out outputs/bots_selector.png]
    python benchmarks/bots_selector.py --data TRAIN.parquet --features WEAK STRONG --steps 40

A GRPO group whose rollouts all succeed or all fail has zero advantage: its
rollouts teach nothing. This benchmark measures how often each selector picks
tasks that do teach, with everything but the model real:

* the selectors are built from configs/config_random.yaml and
  configs/config_difficulty.yaml by Trinity's own TasksetScheduler, reading a
  parquet taskset; feedback goes through the real pass_rate_calculator operator;
* the learner is simulated. Task i has two reference pass rates (weak w_i,
  strong s_i) and a latent pass rate p_i = w_i + c (s_i - w_i) + noise, in
  logit space; each selected task gets G Bernoulli(p_i) rollouts. When a
  group is informative (0 < successes < G) the learner improves on that task
  (its logit rises by LEARN_RATE) and slightly on every task (TRANSFER).

With --data, the taskset is a real split with measured reference pass rates
(`python -m experiments.math_pass_rates`), and the learner starts as the strong
reference measured it: p_i = s_i. That predicts what the selectors will do with
that model on that data, before a GPU run shows it. (The selectors' time per
batch at scale is then left out.)

Per step it records (and writes to a CSV beside the plot) the effective-task ratio (informative groups / batch), the
cumulative informative rollouts and the mean latent pass rate over all tasks;
at the end, the steps each selector needs to reach random's final mean, and
each selector's own time per batch at N = 54,400 and N = 1,000,000 tasks.
The last line printed is `effective_ratio bots=X random=Y`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from rftkit.cli import ArgumentParser, at_least
from rftkit.files import check_writable
from rftkit.inputs import reports_input_errors

# the curves' names -> the math example's task selectors, whose configs are simulated
SELECTORS = {"random": "random", "bots": "difficulty"}
FEATURES = ("qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate")
CAPABILITY = 0.3      # where the learner sits between the weak (0) and strong (1) reference
SHARPNESS = 2.0       # the learner's pass rates are more extreme than the references': mostly 0 or 1
NOISE = 0.5           # spread of the learner's logits around that
LEARN_RATE = 0.15     # logit gain on a task trained with an informative group
TRANSFER = 0.0002     # logit gain on every task per informative group
SEED = 0


def logit(p):
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def make_tasks(n: int, seed: int = SEED):
    """Reference features and the learner's latent logits: most tasks far too hard for the learner.

    As with a small model on competition math, where random selection's rollout
    accuracy stays low: the weak reference solves few tasks, the strong one more.
    """
    rng = np.random.default_rng(seed)
    weak = rng.beta(0.3, 2.0, n)
    strong = weak + (1 - weak) * rng.beta(1.0, 2.0, n)
    latent = SHARPNESS * logit(weak + CAPABILITY * (strong - weak)) + rng.normal(0, NOISE, n)
    return weak, strong, latent


def write_taskset(folder: Path, weak, strong) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    n = len(weak)
    pq.write_table(pa.table({"question": [f"task {i}" for i in range(n)], "answer": ["#### 0"] * n,
                             FEATURES[0]: weak, FEATURES[1]: strong}), folder / "train.parquet")


def measured_tasks(path: Path, features: list[str]):
    """A real split's two reference columns, and the learner's logits: the strong reference's pass rates."""
    from rftkit.inputs import InputError, open_split

    columns = {"question": "string", "answer": "string", **dict.fromkeys(features, "number")}
    table = open_split(path, columns, "--data").read(columns=features)
    weak, strong = (np.asarray(table.column(key).to_pylist(), dtype=float) for key in features)
    for key, rates in zip(features, (weak, strong)):
        bad = np.flatnonzero(~((rates >= 0) & (rates <= 1)))  # NaN fails both
        if bad.size:
            raise InputError(f"--data {path}: row {bad[0]}: {key} is {rates[bad[0]]}, expected a pass rate in [0, 1]")
    return weak, strong, logit(strong)


def build_config(name: str, data: Path, scratch: Path, steps: int, features: list[str]):
    """The real config file, resolved as the launcher does, pointed at the simulated taskset."""
    from math_bots.example import MATH
    from rftkit import cluster
    from rftkit.overrides import load_yaml, resolve_config, write_yaml
    from rftkit.check_patches import no_gpu_banner
    from rftkit.trinity_config import build_trinity_config

    raw = load_yaml(MATH.config_path(SELECTORS[name]))
    config = cluster.with_plan(resolve_config(raw, {
        "buffer.explorer_input.taskset.path": str(data),
        "buffer.explorer_input.eval_tasksets.0.path": str(data),
        "buffer.explorer_input.eval_tasksets.0.split": "train",
        "buffer.total_steps": steps,
        **({"buffer.explorer_input.taskset.data_selector.feature_keys": features} if name == "bots" else {}),
        "checkpoint_root_dir": str(scratch / name)}), cluster.plan_cluster(1, 2, 1, None))
    with no_gpu_banner():  # a CPU benchmark: Trinity's boxed NO GPU DETECTED error would be noise
        return build_trinity_config(write_yaml(config, scratch / f"{name}.yaml"), MATH.workflow, MATH.judge)


async def simulate(config, latent: np.ndarray, steps: int) -> dict[str, np.ndarray]:
    import torch
    from trinity.buffer.operators import create_operators
    from trinity.buffer.task_scheduler import get_taskset_scheduler
    from trinity.common.experience import Experience

    scheduler = get_taskset_scheduler({}, config)
    operators = create_operators(config.data_processor.experience_pipeline.operators)
    group = config.algorithm.repeat_times
    latent = latent.copy()
    rng = np.random.default_rng(SEED + 1)
    tokens = torch.tensor([1, 2, 3, 4])
    curves = {"effective_ratio": [], "informative_rollouts": [], "mean_pass_rate": []}
    informative_total = 0
    for _ in range(steps):
        tasks = await scheduler.read()
        indices = np.array([task.index["index"] for task in tasks])
        successes = rng.binomial(group, 1 / (1 + np.exp(-latent[indices])))
        experiences = [Experience(tokens=tokens, prompt_length=2, reward=float(r < k),
                                  info={"task_index": dict(task.index)})
                       for task, k in zip(tasks, successes) for r in range(group)]
        metrics = {}
        for op in operators:
            experiences, op_metrics = await op.process(experiences)
            metrics.update(op_metrics)
        scheduler.feedback(metrics)

        informative = (successes > 0) & (successes < group)
        latent[indices[informative]] += LEARN_RATE
        latent += TRANSFER * informative.sum()
        informative_total += int(informative.sum()) * group
        curves["effective_ratio"].append(informative.mean())
        curves["informative_rollouts"].append(informative_total)
        curves["mean_pass_rate"].append(float(np.mean(1 / (1 + np.exp(-latent)))))
    return {key: np.array(values) for key, values in curves.items()}


def selector_time_per_batch(selector_type: str, n: int, batch: int = 16, repeats: int = 10) -> float:
    """Seconds for one get_indices + feedback of Trinity's selector over n tasks."""
    import datasets
    from trinity.buffer.reader.file_reader import _HFBatchReader
    from trinity.buffer.selector import SELECTORS
    from trinity.common.config import DataSelectorConfig

    weak, strong, _ = make_tasks(n)
    source = _HFBatchReader(datasets.Dataset.from_dict({FEATURES[0]: weak, FEATURES[1]: strong}),
                            name="timing", default_batch_size=batch, total_epochs=1, enable_progress_bar=False)
    kwargs = {"m": 8, "lamb": 0.1, "rho": 0.1, "target_reward": 0.8, "tau": 0, "do_sample": True}
    selector = SELECTORS.get(selector_type)(source, DataSelectorConfig(
        selector_type=selector_type, feature_keys=list(FEATURES), kwargs=kwargs))
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(repeats):
        indices = np.asarray(selector.get_indices(batch)).tolist()
        selector.feedback(indices=indices, values=rng.uniform(0, 1, batch).tolist())
    return (time.perf_counter() - start) / repeats


def steps_to_reach(curve: np.ndarray, level: float) -> int | None:
    hits = np.flatnonzero(curve >= level)
    return int(hits[0]) + 1 if hits.size else None


def write_csv(curves: dict, path: Path) -> None:
    """Every step's figures for both selectors, one row per step."""
    from rftkit.files import atomic_paths

    keys = list(next(iter(curves.values())))
    header = ["step"] + [f"{name}_{key}" for name in curves for key in keys]
    steps = len(next(iter(curves.values()))[keys[0]])
    with atomic_paths(path) as (tmp,):
        with tmp.open("w") as f:
            f.write(",".join(header) + "\n")
            for i in range(steps):
                values = [f"{curves[name][key][i]:g}" for name in curves for key in keys]
                f.write(",".join([str(i + 1), *values]) + "\n")


def plot(curves: dict, path: Path, window: int) -> None:
    from rftkit.files import atomic_paths
    from rftkit.reports.plots import plt, save_png

    titles = {"effective_ratio": f"effective-task ratio ({window}-step mean)",
              "informative_rollouts": "cumulative informative rollouts",
              "mean_pass_rate": "mean latent pass rate, all tasks"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, key in zip(axes, titles):
        for name, series in curves.items():
            values = series[key]
            if key == "effective_ratio":
                values = np.convolve(values, np.ones(window) / window, mode="valid")
            ax.plot(np.arange(len(values)) + (window if key == "effective_ratio" else 1), values, label=name)
        ax.set_title(titles[key])
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    with atomic_paths(path) as (tmp,):
        save_png(fig, tmp)


@reports_input_errors
def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=at_least(1), default=400, help="selection steps per selector")
    parser.add_argument("--tasks", type=at_least(1), default=2000, help="tasks in the simulated taskset")
    parser.add_argument("--data", type=Path, help="a real split (.parquet) with reference pass-rate columns, "
                                                   "instead of --tasks simulated ones")
    parser.add_argument("--features", nargs=2, default=list(FEATURES), metavar=("WEAK", "STRONG"),
                        help="--data's pass-rate columns (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("outputs/bots_selector.png"),
                        help="the plot (a CSV beside it)")
    args = parser.parse_args()
    if args.features != list(FEATURES) and not args.data:
        parser.error("--features: names columns of --data, give --data too")
    if args.out.suffix != ".png":
        parser.error(f"--out {args.out}: expected a name ending in .png")
    check_writable(args.out.parent, "--out")  # before the simulation, which takes minutes

    if args.data:
        weak, strong, latent = measured_tasks(args.data, args.features)
    else:
        weak, strong, latent = make_tasks(args.tasks)
    curves, configs = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        if args.data:
            (scratch / "data").mkdir()
            shutil.copy(args.data, scratch / "data" / "train.parquet")
        else:
            write_taskset(scratch / "data", weak, strong)
        for name in SELECTORS:
            configs[name] = build_config(name, scratch / "data", scratch, args.steps, args.features)
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # the resumable selector prints its cost every step
                curves[name] = asyncio.run(simulate(configs[name], latent, args.steps))
            print(f"{name:>6}: {args.steps} steps in {time.perf_counter() - start:.1f} s", flush=True)

    bots = configs["bots"]
    print(f"\n{len(latent)} tasks, batch {bots.buffer.batch_size}, group {bots.algorithm.repeat_times}, "
          f"selector {bots.buffer.explorer_input.tasksets[0].data_selector.selector_type}, "
          f"initial mean latent pass rate "
          f"{np.mean(1 / (1 + np.exp(-latent))):.3f}")
    print(f"{'step':>5} | {'effective ratio':^17} | {'informative rollouts':^21} | {'mean pass rate':^17}")
    print(f"{'':>5} | {'bots':>8} {'random':>8} | {'bots':>10} {'random':>10} | {'bots':>8} {'random':>8}")
    every = max(1, min(50, args.steps // 8))  # a row per 50 steps, or 8 rows for a short run
    for step in range(every - 1, args.steps, every):
        window = slice(max(0, step - every + 1), step + 1)
        b, r = curves["bots"], curves["random"]
        print(f"{step + 1:>5} | {b['effective_ratio'][window].mean():8.3f} {r['effective_ratio'][window].mean():8.3f}"
              f" | {b['informative_rollouts'][step]:10d} {r['informative_rollouts'][step]:10d}"
              f" | {b['mean_pass_rate'][step]:8.3f} {r['mean_pass_rate'][step]:8.3f}")

    target = curves["random"]["mean_pass_rate"][-1]
    bots_steps = steps_to_reach(curves["bots"]["mean_pass_rate"], target)
    random_steps = steps_to_reach(curves["random"]["mean_pass_rate"], target)
    saving = f", {100 * (1 - bots_steps / random_steps):.0f}% fewer" if bots_steps and random_steps else ""
    print(f"\ntime to random's final mean pass rate ({target:.3f}): bots {bots_steps} steps, "
          f"random {random_steps} steps{saving}")

    for n in () if args.data else (54_400, 1_000_000):  # the selectors' own cost, on simulated tasksets
        timings = {t: 1000 * selector_time_per_batch(t, n) for t in ("difficulty_based", "random")}
        print(f"selector time per batch of 16 at N={n:,}: difficulty_based {timings['difficulty_based']:.2f} ms, "
              f"random {timings['random']:.2f} ms")

    plot(curves, args.out, window=max(1, min(20, args.steps // 8)))  # 20 steps, or less for a short run
    write_csv(curves, args.out.with_suffix(".csv"))
    print(f"plot: {args.out}, every step: {args.out.with_suffix('.csv')}")
    print(f"effective_ratio bots={curves['bots']['effective_ratio'].mean():.3f} "
          f"random={curves['random']['effective_ratio'].mean():.3f}")


if __name__ == "__main__":
    main()
