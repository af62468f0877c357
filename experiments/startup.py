"""Start-up, measured: the same FrozenLake launch under several settings, one after the other, in one hold.

    python -m experiments.startup MODEL --out OUT --data DIR [--minutes 9] \\
        --variant default --variant trinity_order=RFTKIT_EARLY_RUNNERS=0,RFTKIT_CONCURRENT_START=0 \\
        --variant sequential=explorer.concurrent_mode=sequential,explorer.max_repeat_times_per_runner=1

MODEL is a Hugging Face model folder, or a GGUF file, which transformers turns into one (in
<out>/model, once). Each variant is `frozenlake/main.py` with the learning run's sizes (8 maps
of 16 rollouts a step, no evaluation, no checkpoints; the config's runners: 16, 4 episodes each at
once, so 64 at a time) plus its own values
(NAME=KEY=VALUE,KEY=VALUE): a dotted key is a config value (`--set`), an UPPER_CASE one an
environment variable of the launch. Each is stopped --minutes after its launch as Ctrl-C would.
The variants run in the order given, on the same machine, so their figures compare; each starts
with empty vLLM, Inductor and Triton compile caches of its own (<out>/<variant>/cache), as on a
new machine, unless it names them itself (for example VLLM_CACHE_ROOT=<out>/default/cache/vllm,
a warm start). A Ray cluster must not be running already: each launch starts its own, with the
variant's environment.

From each launch's start-up timeline (`startup.jsonl`, which every launch writes: rftkit.startup)
and the explorer's tensorboard file it reports: when each phase ended, launch to the first explore
step, the episodes finished in the first 5 minutes from the launch (--minutes if less), episodes
per second over the exploring it did (a faster start must not cost rollout speed), the trainer's updates
per minute and the share of GPU samples at 0% while exploring (the levers that overlap a step's parts
are judged by these; a variant's own rollouts per task come from its launch config). Writes
<out>/startup.md (the tables) and <out>/startup.png (each variant's phases on one time axis);
`--report-only` redraws them from the variants' folders.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from frozenlake.example import FROZENLAKE
from rftkit import gpu_samples, startup
from rftkit.cli import ArgumentParser, above
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import read_json, reports_input_errors
from rftkit.inputs.config_keys import check_set_key
from rftkit.inputs.model_path import check_model
from runkit.commands import launch_command
from runkit.runs import group_size, job_dir
from runkit.serving import model_folder
from runkit.steps import log, run_step
from runkit.training_flags import require_cuda

# The learning run's sizes (experiments/frozenlake_learning): what start-up is measured for.
SETTINGS = {"buffer.batch_size": 8, "algorithm.repeat_times": 16,
            "explorer.eval_on_startup": False, "explorer.eval_interval": 10 ** 6,
            "trainer.save_interval": 10 ** 6, "buffer.train_batch_size": 256}
# Every phase a launch marks, in the order a launch reaches them: table rows, and one colour each in every plot.
PHASES = ["config checked", "Ray connected", *(phase for *_, phase in startup.STARTUP_PHASES)]
FIRST_MINUTES = 5  # episodes finished this long after the launch: what a faster start buys
RAN = "variant.json"  # in a variant's folder: the minutes it was given, which bound the window a report counts
UPDATES = "time/train_step"  # the trainer logs it once an update
ENV_KEY = re.compile(r"[A-Z][A-Z0-9_]*")  # a variant's key in this form is an environment variable
CACHES = {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def parse_variant(text: str) -> tuple[str, list[str]]:
    """NAME or NAME=KEY=VALUE,KEY=VALUE -> (NAME, ["KEY=VALUE", ...]): config values and environment variables."""
    name, _, settings = text.partition("=")
    if not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME or NAME=KEY=VALUE,KEY=VALUE")
    pairs = [pair for pair in settings.split(",") if pair] if settings else []
    for pair in pairs:
        if "=" not in pair:
            raise argparse.ArgumentTypeError(f"{text!r}: {pair!r} is not KEY=VALUE")
    return name, pairs


def launch_env(variant: Path, pairs: list[str]) -> tuple[dict, list[str]]:
    """(the launch's environment, its --set values) from a variant's pairs: cold compile caches in
    <variant>/cache unless the variant names them, then its UPPER_CASE pairs."""
    env = {**os.environ, **{name: str(variant / "cache" / folder) for name, folder in CACHES.items()}}
    settings = []
    for pair in pairs:
        key, _, value = pair.partition("=")
        if ENV_KEY.fullmatch(key):
            env[key] = value
        else:
            settings.append(pair)
    return env, settings


def measure(variant: Path, group: int, first_minutes: float = FIRST_MINUTES) -> dict:
    """A variant's figures from its run folder (below <variant>/checkpoints); `group`, the rollouts per task,
    where the launch's config was not kept (a variant may set its own)."""
    run = job_dir(variant / "checkpoints")
    if run is None:
        raise SystemExit(f"error: {variant}: no run below checkpoints/ (did the launch start?)")
    group = group_size(run) or group
    entries = startup.read(run / startup.FILE_NAME)
    if not entries or entries[0]["phase"] != "launch":
        raise SystemExit(f"error: {run / startup.FILE_NAME}: no start-up timeline")
    zero = entries[0]["at"]
    phases = {entry["phase"]: entry["at"] - zero for entry in entries[1:]}
    from rftkit.reports.tensorboard import FINISHED_TASKS, MODEL_CALLS, over_rollout_waits, read_points

    def points(lane: str) -> dict:
        try:
            return read_points(run / "monitor" / "tensorboard" / lane)
        except FileNotFoundError:
            return {}

    explorer, trainer = points("explorer"), points("trainer")
    done = [(point.wall_time - zero, point.value * group) for point in explorer.get(FINISHED_TASKS, [])]
    first_step = phases.get("first explore step")
    exploring_from = phases.get("first weights sent to the engine", first_step)
    rate = None
    if done and exploring_from is not None and done[-1][0] > exploring_from:
        rate = sum(episodes for _, episodes in done) / (done[-1][0] - exploring_from)
    # model calls a second while the explorer waited for rollouts: what its runners got from the engine
    calls_per_second = over_rollout_waits(explorer, MODEL_CALLS, group)
    updates = [point.wall_time for point in trainer.get(UPDATES, [])]
    idle = None
    if done and exploring_from is not None and (run / gpu_samples.FILE_NAME).is_file():
        used = [s.utilization for s in gpu_samples.read(run / gpu_samples.FILE_NAME)
                if exploring_from <= s.at - zero <= done[-1][0]]
        idle = gpu_samples.idle_share(used)
    return {"phases": phases, "first explore step": first_step, "cpu": entries[0].get("cpu"),
            "episodes in the first minutes": sum(episodes for t, episodes in done if t <= first_minutes * 60),
            "episodes per second": rate, "explore steps": len(done),
            "updates per minute": (len(updates) - 1) / (updates[-1] - updates[0]) * 60 if len(updates) > 1 else None,
            "GPU idle": idle, "model calls per second while rolling out": calls_per_second}


def optional(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def report(out: Path, variants: list[str], group: int, first_minutes: float = FIRST_MINUTES) -> str:
    """startup.md (returned) and startup.png from the variants' folders below `out`; episodes are counted over
    `first_minutes` from each launch, or the shortest time a variant was given (its variant.json), which a run
    stopped earlier must not claim for its whole length."""
    from rftkit.reports.plots import plt, save_png

    ran = [read_json(out / name / RAN)["minutes"] for name in variants if (out / name / RAN).is_file()]
    first_minutes = min([first_minutes, *ran])
    results = {name: measure(out / name, group, first_minutes) for name in variants}
    seen = dict.fromkeys(phase for r in results.values() for phase in r["phases"])
    order = PHASES + [phase for phase in seen if phase not in PHASES]  # a phase's row and its colour
    phases = [phase for phase in order if phase in seen]

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    lines = ["| seconds from launch | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    lines += [f"| {phase} | " + " | ".join(seconds(results[v]["phases"].get(phase)) for v in variants) + " |"
              for phase in phases]
    lines += ["", "| | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants),
              "| the machine's CPU | " + " | ".join(results[v]["cpu"] or "-" for v in variants) + " |",
              "| launch to the first explore step (s) | "
              + " | ".join(seconds(results[v]["first explore step"]) for v in variants) + " |",
              f"| episodes finished in the first {first_minutes:g} minutes | "
              + " | ".join(f"{results[v]['episodes in the first minutes']:.0f}" for v in variants) + " |",
              "| episodes per second while exploring | "
              + " | ".join(optional(results[v]["episodes per second"], "{:.1f}") for v in variants) + " |",
              "| explore steps | " + " | ".join(str(results[v]["explore steps"]) for v in variants) + " |",
              "| model calls per second while rolling out | "
              + " | ".join(optional(results[v]["model calls per second while rolling out"], "{:.0f}")
                           for v in variants) + " |",
              "| trainer updates per minute, first to last | "
              + " | ".join(optional(results[v]["updates per minute"], "{:.1f}") for v in variants) + " |",
              "| GPU samples at 0% while exploring | "
              + " | ".join(optional(results[v]["GPU idle"], "{:.0%}") for v in variants) + " |"]
    text = "\n".join(lines) + "\n"

    # one bar per variant, a segment per phase from the previous phase's end to its own, a colour per phase
    legend_inches = 0.75
    fig, ax = plt.subplots(figsize=(10, 1.5 + legend_inches + 0.6 * len(variants)))
    colours = {phase: f"C{k % 10}" for k, phase in enumerate(order)}
    for i, name in enumerate(variants):
        start = 0.0
        for phase, end in sorted(results[name]["phases"].items(), key=lambda item: item[1]):
            ax.barh(i, end - start, left=start, color=colours[phase], edgecolor="white", height=0.6)
            start = end
    ax.set_yticks(range(len(variants)), variants)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from launch")
    ax.set_title("start-up phases: each segment ends where its phase ended")
    fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colours[phase]) for phase in phases], labels=phases,
               fontsize=7, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 1))
    with atomic_paths(out / "startup.png", out / "startup.md") as (png, md):
        save_png(fig, png)
        md.write_text(text)
    return text


def check_config_keys(args: argparse.Namespace) -> None:
    """Refuse a config key of --set or of a variant that Trinity-RFT's config has no place for, before the first
    launch: the launcher would find it only when that variant's turn came, minutes in."""
    for pair in args.set:
        check_set_key(pair.partition("=")[0])
    for name, pairs in args.variant:
        for key in [pair.partition("=")[0] for pair in pairs]:
            if not ENV_KEY.fullmatch(key):
                check_set_key(key, f"--variant {name}")


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.startup", description=__doc__)
    parser.add_argument("model", type=Path, nargs="?", help="HF model folder, or a .gguf file to convert")
    parser.add_argument("--out", type=Path, required=True, help="a folder per variant, and the report")
    parser.add_argument("--data", type=Path, help="FrozenLake train and test splits (required unless --report-only)")
    parser.add_argument("--variant", action="append", type=parse_variant, required=True, metavar="NAME[=K=V,...]",
                        help="a variant to launch, in order: a name and its --set values")
    parser.add_argument("--minutes", type=above(0), default=9,
                        help="each variant's wall time from its launch (a report also reads it from each "
                             "variant's variant.json)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to every variant's launch, before its own values")
    parser.add_argument("--report-only", action="store_true", help="only redraw the report from <out>/<variant>/")
    args = parser.parse_args(argv)
    names = [name for name, _ in args.variant]
    if len(set(names)) != len(names):
        parser.error(f"--variant: each name once, got {names}")
    group = SETTINGS["algorithm.repeat_times"]
    if not args.report_only:
        if args.model is None or args.data is None:
            parser.error("model, --data: required unless --report-only")
        check_model(args.model, "model", gguf=True)
        if not (args.data / "train.parquet").is_file():
            parser.error(f"--data {args.data}: no train.parquet there (scripts/get_frozenlake_data.py makes it)")
        check_config_keys(args)
        require_cuda("training the model")
        out = args.out.resolve()
        check_writable(out, "--out")
        model = model_folder(args.model, out / "model")
        for name, pairs in args.variant:
            env, settings = launch_env(out / name, pairs)
            (out / name).mkdir(parents=True, exist_ok=True)
            command = launch_command(FROZENLAKE, model=model, checkpoints=out / name / "checkpoints",
                                     data={"train": args.data.resolve(), "eval": args.data.resolve()},
                                     settings=SETTINGS, extra=[*args.set, *settings])
            (out / name / RAN).write_text(json.dumps({"minutes": args.minutes}))
            log(f"variant {name}: {args.minutes:g} minutes")
            run_step(command, out / name / "train.log", label=f"variant {name}", timeout=args.minutes * 60,
                     on_timeout="interrupt", check=True, env=env)
    print(report(args.out, names, group, min(FIRST_MINUTES, args.minutes)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
