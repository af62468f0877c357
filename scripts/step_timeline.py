"""Where a run's steps go: a timeline of a few trainer steps and a table of seconds per step, from the run's own
records. Any launch writes them; nothing needs switching on.

    python scripts/step_timeline.py checkpoints/AgentScope-FrozenLake/frozenlake-grpo --out outputs/timeline

RUN is a run's folder (`<checkpoint dir>/<project>/<name>`). Read there:
- Trinity-RFT's tensorboard scalars (`monitor/tensorboard/{trainer,explorer}`), each logged when its step ends:
  the trainer's wait for experiences, its train step (reference log-probs and actor update inside), weight
  sync and checkpoint save; the explorer's wait for each step's rollouts, evaluations and experience pipeline;
  per rollout, its whole time and, from the examples' workflows, its model calls' (rftkit.timed_model);
- the trainer's log (`log/trainer.log`), only to tell a weight sync made while the trainer waited for
  experiences (drawn at the start of that wait, where the explorer's request for it falls) from one made
  after its train step;
- the GPUs' utilization, where the launch sampled it (`gpu_samples.csv`, rftkit.gpu_samples);
- the rollouts per task from the launch's config, where it is kept (the launcher writes it beside the project
  folder, `<checkpoint dir>/<project>-<name>.yaml`; a kept run's copy is `config.yaml` in RUN), to count how
  many episodes were going at once while the explorer waited for a step's rollouts.
A trainer step is placed by its end (when its scalars were logged) and its parts' durations, in Trinity-RFT
0.6.0's order: wait for experiences, train, sync, save. Writes timeline.png and timeline.md to --out and
prints the table. --steps A:B picks the trainer steps (default: five from the middle of the run).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from statistics import mean

from rftkit import gpu_samples
from rftkit.cli import ArgumentParser, at_least, step_range
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, reports_input_errors
from rftkit.reports.tensorboard import EVAL_TIME, MODEL_CALLS, ROLLOUT_WAIT, over_rollout_waits, read_points
from runkit.runs import group_size

# (the trainer's scalar, the phase it times), in the order a step runs them
TRAINER_PHASES = (("time/read_experience", "waiting for experiences"), ("time/train_step", "train step"),
                  ("time/sync_weight", "weight sync"), ("time/save_checkpoint", "checkpoint save"))
INSIDE_TRAIN_STEP = (("time/ref", "reference log-probs"), ("time/update_actor", "actor update"))
PIPELINE = "experience_pipeline/experience_pipeline/time/total"
EPISODE, MODEL = "rollout/time/run_execution/mean", "rollout/model_seconds/mean"
COLOURS = {"waiting for experiences": "0.8", "train step": "tab:blue", "reference log-probs": "tab:cyan",
           "actor update": "tab:blue", "weight sync": "tab:orange", "checkpoint save": "tab:red",
           "waiting for rollouts": "tab:green", "evaluation": "tab:purple"}
LOG_EVENT = re.compile(r"Trainer sync_weights at step (\d+) started|Training at step (\d+) finished"
                       r"|Sample data for step (\d+) started")


def syncs_while_waiting(log: Path) -> set[int]:
    """The trainer steps whose weight sync ran while the trainer waited for the step's experiences: one that does
    not follow its own step's training straight away. Trinity logs it under the step before."""
    if not log.is_file():
        return set()
    found, just_trained = set(), None
    for match in LOG_EVENT.finditer(log.read_text(encoding="utf-8", errors="replace")):
        synced, trained, _ = match.groups()
        if synced is not None and int(synced) != just_trained:
            found.add(int(synced) + 1)
        just_trained = int(trained) if trained is not None else None
    return found


def trainer_spans(trainer: dict, step: int, in_wait: bool) -> list[tuple[str, float, float]]:
    """(phase, start, end) of one trainer step, in seconds since the epoch, back from when it was logged."""
    values = {tag: {p.step: p for p in points} for tag, points in trainer.items()}
    end = values["time/train_step"][step].wall_time
    spans = []
    for tag, phase in reversed(TRAINER_PHASES):
        seconds = values.get(tag, {}).get(step)
        if seconds is None or (tag == "time/sync_weight" and in_wait):
            continue
        spans.append((phase, end - seconds.value, end))
        end -= seconds.value
    sync = values.get("time/sync_weight", {}).get(step)
    waiting = next((start for phase, start, _ in spans if phase == "waiting for experiences"), None)
    if in_wait and sync is not None and waiting is not None:
        # the explorer asks for it at its sync step, as the trainer starts to wait for the next batch
        spans.append(("weight sync", waiting, waiting + sync.value))
    train = next((start, stop) for phase, start, stop in spans if phase == "train step")
    cursor = train[0]
    for tag, phase in INSIDE_TRAIN_STEP:  # verl computes the reference log-probs before it updates the actor
        seconds = values.get(tag, {}).get(step)
        if seconds is not None:
            start = cursor if phase == "reference log-probs" else train[1] - seconds.value
            spans.append((phase, start, start + seconds.value))
            cursor = start + seconds.value
    return spans


def explorer_spans(explorer: dict, since: float, until: float) -> list[tuple[str, float, float]]:
    """(phase, start, end) of the explorer's waits for rollouts and its evaluations, cut to [since, until]."""
    spans = []
    for tag, phase in ((ROLLOUT_WAIT, "waiting for rollouts"), (EVAL_TIME, "evaluation")):
        spans += [(phase, max(since, p.wall_time - p.value), min(until, p.wall_time)) for p in explorer.get(tag, [])
                  if p.wall_time - p.value < until and p.wall_time > since]
    return spans


def window_spans(trainer: dict, steps: list[int], waits: set[int]) -> list[tuple[str, float, float]]:
    """`trainer_spans` of each of `steps`, those in `waits` with their sync in the wait."""
    return [span for step in steps for span in trainer_spans(trainer, step, step in waits)]


def per_step(explorer: dict, trainer: dict, spans: list, steps: list[int], samples: list,
             group: int | None = None) -> list[tuple]:
    """The table's rows: (what, seconds a trainer step, share of the step's wall time or None, note), from
    `window_spans` of `steps`; `group`, the rollouts per task, adds how many episodes were going at once."""
    ends = {p.step: p.wall_time for p in trainer["time/train_step"]}
    since = ends.get(steps[0] - 1, min(start for _, start, _ in spans))
    until = ends[steps[-1]]
    wall = (until - since) / len(steps)
    rows = [("trainer step, wall time", wall, 1.0, f"steps {steps[0]} to {steps[-1]}")]
    phases = [phase for _, phase in TRAINER_PHASES]
    phases[2:2] = [phase for _, phase in INSIDE_TRAIN_STEP]  # under the train step they are part of
    for phase in phases:
        total = sum(end - start for name, start, end in spans if name == phase)
        rows.append((f"trainer: {phase}", total / len(steps), total / len(steps) / wall,
                     "inside the train step" if phase in dict(INSIDE_TRAIN_STEP).values() else ""))
    window = explorer_spans(explorer, since, until)
    for phase in ("waiting for rollouts", "evaluation"):  # an evaluation runs beside the training rollouts
        total = sum(end - start for name, start, end in window if name == phase)
        rows.append((f"explorer: {phase}", total / len(steps), total / len(steps) / wall,
                     "overlaps the trainer's rows and the other explorer row"))
    in_window = {tag: [p.value for p in explorer.get(tag, []) if since <= p.wall_time <= until]
                 for tag in (PIPELINE, EPISODE, MODEL, MODEL_CALLS)}
    explore_steps = len(in_window[PIPELINE])
    if explore_steps:
        rows.append(("explorer: experience pipeline", sum(in_window[PIPELINE]) / len(steps), None,
                     f"{explore_steps} explore steps in the window"))
    if in_window[EPISODE]:
        episode = mean(in_window[EPISODE])
        rows.append(("a rollout, whole", episode, None, "mean over the window's explore steps"))
        if in_window[MODEL]:
            model = mean(in_window[MODEL])
            rows.append(("a rollout: its model calls", model, model / episode,
                         "generation, HTTP, agentscope; share of the rollout"))
            rows.append(("a rollout: the rest", episode - model, (episode - model) / episode,
                         "environment, tools, workflow; share of the rollout"))
            if in_window[MODEL_CALLS]:  # a multi-turn episode's calls wait for each other: latency sets its pace
                calls = mean(in_window[MODEL_CALLS])
                rows.append(("a model call", model / calls, None, f"{calls:.1f} calls a rollout"))
        busy = over_rollout_waits(explorer, EPISODE, group, since, until) if group else None
        if busy is not None:
            rows.append(("episodes going at once", None, None, f"{busy:.1f} on average while the explorer waited "
                                                               f"for rollouts (episodes x their mean time / the wait)"))
            pace = over_rollout_waits(explorer, None, group, since, until)
            rows.append(("episodes a second", None, None, f"{pace:.1f} finished while the explorer waited for "
                                                          f"rollouts (the finished episodes / the wait)"))
    by_gpu = gpu_series(samples, since, until)
    for gpu, used in by_gpu.items():
        used = [utilization for _, utilization in used]
        rows.append((f"GPU {gpu} busy (utilization)", None, mean(used) / 100, f"{len(used)} samples"))
        rows.append((f"GPU {gpu} idle (samples at 0%)", None, gpu_samples.idle_share(used), ""))
    if not by_gpu:
        said = f"not sampled: no reading in this window in the run's {gpu_samples.FILE_NAME}, if it has one"
        rows.append(("GPU utilization", None, None, said))
    return rows


def gpu_series(samples: list, since: float, until: float) -> dict[int, list[tuple[float, float]]]:
    """Each GPU's (time, utilization) samples in [since, until]."""
    series: dict[int, list[tuple[float, float]]] = {}
    for sample in samples:
        if since <= sample.at <= until:
            series.setdefault(sample.gpu, []).append((sample.at, sample.utilization))
    return series


def table(rows: list[tuple]) -> str:
    lines = ["| what | seconds a trainer step | share | note |", "|---|---|---|---|"]
    for what, seconds, share, note in rows:
        lines.append(f"| {what} | {'' if seconds is None else f'{seconds:.2f}'} | "
                     f"{'' if share is None else f'{share:.0%}'} | {note} |")
    return "\n".join(lines) + "\n"


def draw(explorer: dict, trainer_lane: list, samples: list, title: str, path: Path):
    from rftkit.reports.plots import plt, save_png

    spans = {"trainer": trainer_lane}
    zero = min(start for _, start, _ in spans["trainer"])
    until = max(end for _, _, end in spans["trainer"])
    spans["explorer"] = explorer_spans(explorer, zero, until + 1e-6)
    fig, (lanes, gpu) = plt.subplots(2, 1, figsize=(12, 5), sharex=True, height_ratios=[3, 1])
    seen = set()
    for row, (lane, found) in enumerate(spans.items()):
        for phase, start, end in found:
            inside = phase in dict(INSIDE_TRAIN_STEP).values()
            lanes.barh(row + (0.25 if inside else 0), end - start, left=start - zero, height=0.3 if inside else 0.7,
                       color=COLOURS[phase], edgecolor="black", linewidth=0.3,
                       label=None if phase in seen else phase)
            seen.add(phase)
    lanes.set_yticks(range(len(spans)), list(spans))
    lanes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.05), ncol=4, fontsize=8)
    lanes.set_title(title, fontsize=10)
    series = gpu_series(samples, zero, until)
    for index, (number, used) in enumerate(series.items()):
        gpu.plot([at - zero for at, _ in used], [u for _, u in used], color=f"C{index}", linewidth=0.8,
                 label=f"GPU {number}")
    if len(series) > 1:
        gpu.legend(fontsize=8, loc="upper right")
    if not series:
        gpu.text(0.5, 0.5, "GPU utilization not sampled", ha="center", va="center", transform=gpu.transAxes)
    gpu.set_ylim(0, 105)
    gpu.set_ylabel("GPU %")
    gpu.set_xlabel("seconds")
    fig.tight_layout()
    save_png(fig, path)


def pick_steps(trainer: dict, wanted: tuple[int, int] | None, run: Path) -> list[int]:
    have = sorted(p.step for p in trainer.get("time/train_step", []))
    if not have:
        raise InputError(f"RUN {run}: its trainer logged no time/train_step: no trainer step finished, or its event "
                         f"files are empty, cut short or not tensorboard's")
    if wanted is None:
        middle = len(have) // 2
        return have[max(0, middle - 2):middle + 3]
    first, last = wanted
    picked = [step for step in have if first <= step <= last]
    if not picked:
        raise InputError(f"--steps {first}:{last}: the run's trainer logged steps {have[0]} to {have[-1]}")
    return picked


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python scripts/step_timeline.py", description=__doc__)
    parser.add_argument("run", metavar="RUN", type=Path, help="a run's folder, <checkpoint dir>/<project>/<name>")
    parser.add_argument("--steps", metavar="A:B", type=step_range(1),
                        help="trainer steps to draw and average (default: five from the middle of the run)")
    parser.add_argument("--out", type=Path, required=True, help="folder for timeline.png and timeline.md")
    parser.add_argument("--group", type=at_least(1), metavar="N",
                        help="rollouts per task, for a run whose launch config was not kept (default: the kept "
                             "config's algorithm.repeat_times)")
    args = parser.parse_args(argv)
    tensorboard = args.run / "monitor" / "tensorboard"
    if not (tensorboard / "trainer").is_dir():
        raise InputError(f"RUN {args.run}: no monitor/tensorboard/trainer in it; expected a run's folder, "
                         f"<checkpoint dir>/<project>/<name>")
    check_writable(args.out, "--out")
    trainer = read_points(tensorboard / "trainer")
    explorer = read_points(tensorboard / "explorer") if (tensorboard / "explorer").is_dir() else {}
    steps = pick_steps(trainer, args.steps, args.run)
    waits = syncs_while_waiting(args.run / "log" / "trainer.log")
    samples_file = args.run / gpu_samples.FILE_NAME
    samples = gpu_samples.read(samples_file) if samples_file.is_file() else []
    spans = window_spans(trainer, steps, waits)
    group = args.group or group_size(args.run)
    text = f"# Step timeline: {args.run}\n\n" + table(per_step(explorer, trainer, spans, steps, samples, group))
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_paths(args.out / "timeline.png", args.out / "timeline.md") as (png, md):
        draw(explorer, spans, samples, f"{args.run.name}: trainer steps {steps[0]} to {steps[-1]}", png)
        md.write_text(text + "\n![timeline](timeline.png)\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
