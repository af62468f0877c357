"""The BOTS comparison's report: what the runs in <out> did, side by side.

Per step, from each run's tensorboard files: rollout accuracy, the effective-task ratio (Trinity's
`pass_rate_calculator`: the share of a step's tasks whose rollouts were neither all right nor all
wrong) and code executions per rollout, with means per WINDOW steps and BOTS over random on the steps
both runs made; from the experience queue, how often each run's picks were all wrong or all right,
what each selector picked against a reference model's pass rates, and how narrow its picks were (the share
from the most picked template, where the split names templates); held-out accuracy before and after
each run (`scripts/evaluate.py`'s folders), with 95% intervals and a task-by-task sign test; and, from
the runs' in-run evaluations, held-out accuracy along the way and the BOTS paper's time to baseline; from
each launch's log, the BOTS selector's own time per step. Written to <out>/comparison.{json,md,png}.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from math_bots.example import MATH
from rftkit.checkpoints import tracker_step
from rftkit.files import packed_or_plain
from rftkit.inputs import read_json
from rftkit.reports.evaluation import episodes_file
from runkit.runs import job_dir

CONFIGS = MATH.configs  # task selector -> config file: the runs' folders under <out>
DEFAULT_FEATURES = ["smollm2_pass_rate", "qwen_coder_0.5b_pass_rate"]  # BOTS's priors, weakest first
# Trinity's tensorboard tags: what the report draws.
ACCURACY, EFFECTIVE, TOOL_CALLS = ("rollout/accuracy/mean", "experience_pipeline/selection/valid_ratio",
                                   "rollout/tool_calls/mean")
HELD_OUT_SET = "held_out"  # the in-run evaluation's taskset: the test split
HELD_OUT = f"eval/{HELD_OUT_SET}/accuracy/mean@"  # Trinity appends the rollouts per task
TEMPLATE = "template"  # the GSM-Symbolic splits' column: which template a problem was generated from
WINDOW = 10  # steps per row of the report's table over time
GOAL = 1.5  # the report's bar: BOTS's effective-task ratio at 1.5 times random's or more, averaged over the steps


def explorer_points(folder: Path | None) -> dict[str, list]:
    """Every series of the explorer's tensorboard files in a run's folder (`rftkit.reports.tensorboard.Point`s),
    read once for all that the report takes from them; none without a run folder."""
    from rftkit.reports.tensorboard import read_points

    return read_points(folder / "monitor" / "tensorboard" / "explorer") if folder else {}


def curves(points: dict[str, list]) -> dict[str, list[tuple[int, float]]]:
    """The run's per-step scalars that the report uses, as (step, value) lists."""
    return {tag: [(p.step, p.value) for p in points.get(tag, [])] for tag in (ACCURACY, EFFECTIVE, TOOL_CALLS)}


def held_out_along_the_way(points: dict[str, list], folder: Path | None) -> list[dict]:
    """The run's in-run evaluations on the test split: step, accuracy, and minutes from the launch (None
    without the launch's start-up timeline in the run's folder)."""
    from rftkit import startup

    evaluations = next((series for tag, series in points.items() if tag.startswith(HELD_OUT)), [])
    timeline = folder / startup.FILE_NAME if folder else None
    launch = startup.phase_at(timeline, "launch") if timeline and timeline.is_file() else None
    return [{"step": p.step, "accuracy": p.value,
             "minutes": None if launch is None else (p.wall_time - launch) / 60} for p in evaluations]


def selector_cost(train_log: Path, points: dict[str, list]) -> dict | None:
    """The BOTS selector's own milliseconds per explore step (the line it prints in the launch's log after
    each step's feedback: choosing the batch, taking its feedback) and their share of a step, timed by the
    explorer's tensorboard points; None where the log has no such lines (the random selector prints none)."""
    from rftkit.trinity_plugins.digest import COST

    text = train_log.read_text(errors="replace") if train_log.is_file() else ""
    found = [(float(a), float(b)) for a, b in
             re.findall(re.escape(COST) + r" ([\d.]+) ms choosing and ([\d.]+) ms taking the feedback", text)]
    if not found:
        return None
    result = {"steps": len(found), "choosing ms": sum(a for a, _ in found) / len(found),
              "feedback ms": sum(b for _, b in found) / len(found)}
    result["ms per step"] = result["choosing ms"] + result["feedback ms"]
    steps = points.get(ACCURACY, [])
    if len(steps) >= 2 and steps[-1].step > steps[0].step and steps[-1].wall_time > steps[0].wall_time:
        result["seconds per step"] = (steps[-1].wall_time - steps[0].wall_time) / (steps[-1].step - steps[0].step)
        result["share of a step"] = result["ms per step"] / 1000 / result["seconds per step"]
    return result


def time_to_baseline(random: list[dict], bots: list[dict]) -> dict | None:
    """The BOTS paper's time to baseline: BOTS's first evaluation at or above random's last one, in steps
    and minutes, over random's (its `ttb`, below 1 when BOTS got there sooner); None without both curves."""
    if not random or not bots:
        return None
    target = random[-1]
    reached = next((point for point in bots if point["accuracy"] >= target["accuracy"]), None)
    result = {"random's last": target, "BOTS reached it": reached}
    if reached:
        result["ttb, steps"] = reached["step"] / target["step"]
        if reached["minutes"] is not None and target["minutes"]:
            result["ttb, minutes"] = reached["minutes"] / target["minutes"]
    return result


def groups(folder: Path | None) -> dict[tuple[int, int], list[float]] | None:
    """Every task the selector picked, (explore step, train-split row), with its rollouts' rewards.

    Read from the trainer's experience queue, which Trinity also writes to
    buffer/experience_buffer.jsonl (gzipped where the run was kept): each experience names its explore step
    (`eid.batch`), its rollout (`eid.run`) and its task's row (`info.task_index.index`). None if there is no such
    file."""
    queue = packed_or_plain(folder / "buffer" / "experience_buffer.jsonl") if folder else None
    if queue is None or not queue.is_file():
        return None
    rewards: dict[tuple[int, int], dict[int, float]] = {}
    for experience in read_json(queue, lines=True):
        task = (experience["eid"]["batch"], experience["info"]["task_index"]["index"])
        rewards.setdefault(task, {})[experience["eid"]["run"]] = experience["reward"]  # one reward a rollout
    return {task: list(by_rollout.values()) for task, by_rollout in rewards.items()}


def outcome(rewards: list[float]) -> str:
    """A task's group of rollouts: "all wrong", "all right", or "mixed", the only kind GRPO learns from."""
    share = sum(rewards) / len(rewards)
    return "all wrong" if share == 0 else "all right" if share == 1 else "mixed"


def largest_template_share(rows: list[int], templates: list[int]) -> float:
    """The share of these train-split rows that come from their most frequent template."""
    return Counter(templates[row] for row in rows).most_common(1)[0][1] / len(rows)


def picks(chosen: dict[tuple[int, int], list[float]], reference: list[float], templates: list[int] | None) -> dict:
    """What the selector chose, against a reference model's pass rates (train-split row -> rate), and from how
    many of the problem templates (train-split row -> template) where the split names them."""
    solved = [task for task in chosen if reference[task[1]] > 0]
    unsolved = [task for task in chosen if reference[task[1]] == 0]

    def effective(tasks):
        return sum(outcome(chosen[t]) == "mixed" for t in tasks) / len(tasks) if tasks else None

    result = {"picks": len(chosen), "distinct": len({row for _, row in chosen}),
              "reference above 0": len(solved) / len(chosen),
              "effective, reference 0": effective(unsolved), "effective, reference above 0": effective(solved)}
    if templates:
        result["templates"] = len({templates[row] for _, row in chosen})
        result["largest template share"] = largest_template_share([row for _, row in chosen], templates)
    return result


def outcomes(chosen: dict[tuple[int, int], list[float]], templates: list[int] | None = None) -> list[dict]:
    """Per WINDOW explore steps, the shares of picked tasks whose rollouts were all wrong and all right:
    where the groups that teach nothing come from; with the split's templates, the share of the window's
    picks from its most picked template: whether the picks narrow as the run goes on."""
    windows: dict[int, list[tuple[int, int]]] = {}
    for task in chosen:
        windows.setdefault((task[0] - 1) // WINDOW, []).append(task)
    rows = []
    for w, tasks in sorted(windows.items()):
        row = {"first": w * WINDOW + 1, **{kind: sum(outcome(chosen[t]) == kind for t in tasks) / len(tasks)
                                           for kind in ("all wrong", "all right")}}
        if templates:
            row["largest template share"] = largest_template_share([r for _, r in tasks], templates)
        rows.append(row)
    return rows


def train_column(data: Path | None, column: str) -> list | None:
    """The train split's `column`, or None when there is no such split or column (a report on its own)."""
    import pyarrow.parquet as pq

    path = data / "train.parquet" if data else None
    if path is None or not path.is_file() or column not in pq.read_schema(path).names:
        return None
    return pq.read_table(path, columns=[column]).column(column).to_pylist()


def held_out(folder: Path) -> dict | None:
    """{accuracy, interval, per-task mean reward} of an evaluation folder, or None if it is not there."""
    if not (folder / "report.json").is_file():
        return None
    report = read_json(folder / "report.json")
    rewards: dict[int, list[float]] = {}
    for episode in read_json(episodes_file(folder), lines=True):
        rewards.setdefault(episode["task_number"], []).append(episode["reward"])
    return {"accuracy": report["accuracy"], "ci95": report["accuracy_ci95"], "episodes": report["episodes"],
            "format rate": report["format_rate"],
            "per task": {task: sum(r) / len(r) for task, r in sorted(rewards.items())}}


def paired(before: dict, after: dict) -> dict:
    """Task-by-task: tasks the second evaluation solves more often, less often, and the sign test's p."""
    from rftkit.reports.evaluation import sign_test, task_by_task

    try:
        wins, losses, _ = task_by_task(before["per task"], after["per task"])
    except ValueError:
        return {"error": "the two evaluations are of different tasks"}
    return {"better": wins, "worse": losses, "p": sign_test(wins, losses)}


def intervals(random: dict, bots: dict) -> str:
    """Whether the two held-out accuracies' 95% intervals are apart (and which is above) or overlap."""
    if bots["ci95"][0] > random["ci95"][1]:
        return "apart, BOTS above"
    if random["ci95"][0] > bots["ci95"][1]:
        return "apart, random above"
    return "overlapping"


def mean(points: list[tuple[int, float]], first: int = 1, last: float = float("inf")) -> float | None:
    """The mean of the (step, value) points from step `first` to step `last`, or None if there are none."""
    values = [v for step, v in points if first <= step <= last]
    return sum(values) / len(values) if values else None


def report(out: Path, data: Path | None = None, reference: str = DEFAULT_FEATURES[-1]) -> dict:
    """The comparison of whatever runs <out> holds: written to comparison.{json,md,png}, and returned.

    With `data`, what each selector picked is set against the train split's `reference` pass rates."""
    before = held_out(out / "before")
    rates, templates = train_column(data, reference), train_column(data, TEMPLATE)
    runs = {}
    for selector in CONFIGS:
        if not (out / selector).is_dir():
            continue
        folder = job_dir(out / selector / "checkpoints")
        points = explorer_points(folder)
        series = curves(points)
        after = held_out(out / selector / "after")
        chosen = groups(folder)
        runs[selector] = {"steps": len(series[ACCURACY]), "series": series,
                          "held-out along the way": held_out_along_the_way(points, folder),
                          **{f"mean {tag}": mean(series[tag]) for tag in series},
                          "held-out after": after,
                          # the step whose weights `after` played: runs.py serves the newest complete save
                          "checkpoint evaluated after": tracker_step(folder) if folder else None,
                          "picks": picks(chosen, rates, templates) if chosen and rates else None,
                          "outcomes": outcomes(chosen, templates) if chosen else None,
                          "selector cost": selector_cost(out / selector / "train.log", points),
                          "after vs before": paired(before, after) if before and after else None}
    result = {"held-out before": before, "runs": runs, "reference": reference}
    if {"random", "difficulty"} <= runs.keys():
        # A time budget gives the runs different step counts; later steps are easier to learn from, so
        # the two are compared over the steps both made.
        shared = min(runs[s]["steps"] for s in ("random", "difficulty"))
        both = {s: {tag: mean(runs[s]["series"][tag], last=shared) for tag in (ACCURACY, EFFECTIVE)}
                for s in ("random", "difficulty")}
        result["shared steps"] = {"steps": shared, **both}
        if both["random"][EFFECTIVE] and both["difficulty"][EFFECTIVE] is not None:
            result["effective-task ratio, BOTS / random"] = both["difficulty"][EFFECTIVE] / both["random"][EFFECTIVE]
        result["time to baseline"] = time_to_baseline(runs["random"]["held-out along the way"],
                                                      runs["difficulty"]["held-out along the way"])
    afters = [runs.get(s, {}).get("held-out after") for s in ("random", "difficulty")]
    if None not in afters:
        result["BOTS after vs random after"] = paired(afters[0], afters[1])
        result["held-out intervals"] = intervals(afters[0], afters[1])
    (out / "comparison.json").write_text(json.dumps(result, indent=2))
    (out / "comparison.md").write_text(markdown(result))
    draw(result, out / "comparison.png")
    return result


def minutes(point: dict) -> str:
    return "" if point["minutes"] is None else f" ({point['minutes']:.1f} min from the launch)"


def span(first: int, longest: int) -> str:
    """The steps of the table row that starts at `first`, the last row ending at the longest run's last step
    (counted by its scalars: a queue that got further than them, as a killed run's may, keeps whole rows)."""
    last = min(first + WINDOW - 1, longest) if longest >= first else first + WINDOW - 1
    return str(first) if last == first else f"{first}-{last}"


def markdown(result: dict) -> str:
    def number(value, form=".3f"):
        return "-" if value is None else format(value, form)

    def evaluation(value):
        return "-" if not value else f"{value['accuracy']:.3f} ({value['ci95'][0]:.3f}-{value['ci95'][1]:.3f})"

    def boxed(value):
        return "-" if not value else f"{value['format rate']:.3f}"

    before = result["held-out before"]
    lines = ["| run | steps | rollout accuracy (mean over steps) | effective-task ratio (mean) | code executions "
             "per rollout (mean) | held-out accuracy after (95% CI) | held-out replies with \\boxed{} | "
             "tasks better / worse than before, sign test p |",
             "|---|---|---|---|---|---|---|---|",
             f"| base model | | | | | {evaluation(before)} | {boxed(before)} | |"]
    for selector, r in result["runs"].items():
        change = r["after vs before"]
        change_text = f"{change['better']} / {change['worse']}, p = {change['p']:.3g}" \
            if change and "p" in change else "-"
        lines.append(f"| {selector} | {r['steps']} | {number(r[f'mean {ACCURACY}'])} | "
                     f"{number(r[f'mean {EFFECTIVE}'])} | "
                     f"{number(r[f'mean {TOOL_CALLS}'], '.2f')} | {evaluation(r['held-out after'])} | "
                     f"{boxed(r['held-out after'])} | {change_text} |")
    longest = max((r["steps"] for r in result["runs"].values()), default=0)
    if longest:
        lines += ["", f"Means over each {WINDOW} steps (rollout accuracy / effective-task ratio):", "",
                  "| steps | " + " | ".join(result["runs"]) + " |", "|---|" + "---|" * len(result["runs"])]
    for first in range(1, longest + 1, WINDOW):
        last = first + WINDOW - 1
        cells = [f"{number(mean(r['series'][ACCURACY], first, last))} / "
                 f"{number(mean(r['series'][EFFECTIVE], first, last))}" for r in result["runs"].values()]
        lines.append(f"| {span(first, longest)} | " + " | ".join(cells) + " |")
    split = {selector: {w["first"]: w for w in r["outcomes"]} for selector, r in result["runs"].items()
             if r.get("outcomes")}
    by_template = any("largest template share" in w for windows in split.values() for w in windows.values())
    if split:
        lines += ["", "Tasks whose rollouts were all wrong / all right"
                      + (" / share of the picks from the most picked template" if by_template else "")
                      + f", per {WINDOW} steps (from the experience queue):", "",
                  "| steps | " + " | ".join(split) + " |", "|---|" + "---|" * len(split)]
    for first in sorted({first for windows in split.values() for first in windows}):
        cells = [f"{w['all wrong']:.3f} / {w['all right']:.3f}"
                 + (f" / {w['largest template share']:.3f}" if "largest template share" in w else "")
                 if (w := windows.get(first)) else "-" for windows in split.values()]
        lines.append(f"| {span(first, longest)} | " + " | ".join(cells) + " |")
    chosen = {selector: r["picks"] for selector, r in result["runs"].items() if r.get("picks")}
    if chosen:
        lines += ["", f"What each selector picked, against `{result['reference']}` on the train split:", "",
                  "| run | problems picked | distinct | share with a reference rate above 0 | effective share "
                  "of those at 0 | effective share of those above 0 | templates | share from the most picked "
                  "template |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {selector} | {c['picks']} | {c['distinct']} | {c['reference above 0']:.3f} | "
                  f"{number(c['effective, reference 0'])} | {number(c['effective, reference above 0'])} | "
                  f"{c.get('templates', '-')} | {number(c.get('largest template share'))} |"
                  for selector, c in chosen.items()]
    shared = result.get("shared steps")
    if shared:
        random, bots = shared["random"], shared["difficulty"]
        lines += ["", f"Over the {shared['steps']} steps both runs made: rollout accuracy {number(bots[ACCURACY])} "
                      f"(BOTS) against {number(random[ACCURACY])} (random), effective-task ratio "
                      f"{number(bots[EFFECTIVE])} against {number(random[EFFECTIVE])}."]
    ratio = result.get("effective-task ratio, BOTS / random")
    if ratio is not None:
        lines.append(f"Effective-task ratio, BOTS over random: {ratio:.2f}x (goal: {GOAL}x or more).")
    ttb = result.get("time to baseline")
    if ttb:
        target, reached = ttb["random's last"], ttb["BOTS reached it"]
        line = (f"Time to baseline: random's last held-out accuracy in the run, {target['accuracy']:.3f} at step "
                f"{target['step']}{minutes(target)}, ")
        if reached is None:
            line += "was not reached by BOTS."
        else:
            line += (f"BOTS reached at step {reached['step']}{minutes(reached)}: {ttb['ttb, steps']:.2f} of the steps"
                     + (f", {ttb['ttb, minutes']:.2f} of the time." if "ttb, minutes" in ttb else "."))
        lines.append(line)
    for selector, r in result["runs"].items():
        cost = r.get("selector cost")
        if cost:
            share = (f", {cost['share of a step']:.3%} of a step of {cost['seconds per step']:.1f} s (the BOTS paper: "
                     "0.2% or less)") if "share of a step" in cost else ""
            lines.append(f"The {selector} selector's own time: {cost['ms per step']:.2f} ms a step (choosing "
                         f"{cost['choosing ms']:.2f} ms, feedback {cost['feedback ms']:.2f} ms, over "
                         f"{cost['steps']} steps){share}.")
    if "held-out intervals" in result:
        random, bots = (result["runs"][s]["held-out after"] for s in ("random", "difficulty"))
        steps = [result["runs"][s].get("checkpoint evaluated after") for s in ("difficulty", "random")]
        at = [f" at step {step}" if step is not None else "" for step in steps]
        lines.append(f"Held-out accuracy after training: BOTS {evaluation(bots)}{at[0]} against random "
                     f"{evaluation(random)}{at[1]}; the 95% intervals are {result['held-out intervals']}"
                     + (" (the checkpoints' steps differ: this compares the runs' lengths as well as their "
                        "selectors)." if None not in steps and steps[0] != steps[1] else "."))
    head_to_head = result.get("BOTS after vs random after")
    if head_to_head and "p" in head_to_head:
        lines.append(f"Held-out, BOTS's model against random's, task by task: {head_to_head['better']} better, "
                     f"{head_to_head['worse']} worse (sign test p = {head_to_head['p']:.3g}).")
    return "\n".join(lines) + "\n"


def draw(result: dict, path: Path) -> None:
    """Upstream's chart: rollout accuracy and the effective-task ratio over steps, random against BOTS, and
    held-out accuracy along the way where the runs evaluated in-run."""
    from rftkit.reports.plots import plt, save_png

    along = any(r["held-out along the way"] for r in result["runs"].values())
    fig, axes = plt.subplots(1, 3 if along else 2, figsize=(15 if along else 10, 3.8))
    for selector, r in result["runs"].items():
        label = "BOTS (difficulty_based)" if selector == "difficulty" else "random"
        for ax, tag in zip(axes, (ACCURACY, EFFECTIVE)):
            points = r["series"][tag]
            ax.plot([s for s, _ in points], [v for _, v in points], marker=".", label=label)
        if along:
            points = r["held-out along the way"]
            axes[2].plot([p["step"] for p in points], [p["accuracy"] for p in points], marker="o", label=label)
    titles = ["rollout accuracy", "effective-task ratio (tasks neither all right nor all wrong)",
              "held-out accuracy (in-run evaluation)"]
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("explore step")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
