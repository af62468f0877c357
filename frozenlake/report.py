"""FrozenLake's evaluation report: one episode played for scripts/evaluate.py, the episodes summed up
(success rate with its interval, steps, invalid actions, how episodes ended, success by map size),
report.md's rows and chart.png's panels; and two evaluations of the same maps compared, map by map
(before and after training)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from frozenlake.agent import FrozenLakeAgent
from frozenlake.data import layout
from frozenlake.env import moves_allowed
from frozenlake.maps import ACTIONS, distances_to_goal, find, neighbours, task_map
from frozenlake.policies import OracleModel, RandomModel, grid_from_prompt
from frozenlake.reference import WEAK, reference_pass_rates
from frozenlake.workflow import end_reason, run_frozen_lake
from rftkit.files import atomic_paths
from rftkit.inputs import read_json
from rftkit.inputs.held_out import seen_in
from rftkit.reports.evaluation import (SEEN, by_training, by_training_rows, episodes_file, rate, sign_test,
                                      task_by_task, wilson_interval)


async def play(task, model):
    out = await run_frozen_lake(task, model, {})
    for turn in model.turns:  # what the agent made of each reply; None marks a malformed action
        turn["action"] = FrozenLakeAgent.get_action(turn["reply"])
    text = out.response.get_text_content()
    return {"reward": out.reward, "metrics": out.metrics, "reason": end_reason(text), "response": text}


# scripts/evaluate.py --model NAME: the policies that play without a language model (seed -> chat model)
BASELINES = {"oracle": lambda seed: OracleModel(), "random": lambda seed: RandomModel(seed=seed)}


def summarize(episodes: list[dict]) -> dict:
    played = [e for e in episodes if e["error"] is None]
    steps = sum(e["metrics"]["env_steps"] for e in played)
    invalid = sum(e["metrics"]["invalid_actions"] for e in played)
    successes = sum(e["reward"] == 1.0 for e in episodes)
    by_size = defaultdict(list)
    for e in episodes:
        by_size[int(e["task"]["size"])].append(e["reward"] == 1.0)
    low, high = wilson_interval(successes, len(episodes))
    return {
        "episodes": len(episodes),
        "success_rate": successes / len(episodes),
        "success_rate_ci95": [low, high],
        "mean_steps": steps / len(played) if played else None,
        "invalid_action_rate": invalid / steps if steps else None,
        "termination": dict(Counter(e["reason"] if e["error"] is None else "error" for e in episodes)),
        "errors": len(episodes) - len(played),
        "by_size": {size: rate(sum(wins), len(wins)) for size, wins in sorted(by_size.items())},
        # success on the maps whose layout training had and had not, beside a random walk's expected rate
        "by_training": by_training(episodes, lambda e: e["reward"] == 1.0, WEAK, random_walk_rate),
    }


def random_walk_rate(task: dict) -> float:
    """A random walk's chance of reaching G on a task's map in the moves its episode allows: the split's column,
    worked out where the split has none (a split of seed, size and p alone)."""
    if task.get(WEAK) is not None:
        return task[WEAK]
    return reference_pass_rates(task_map(task), moves_allowed(task))[WEAK]


def _valid_moves(episodes: list[dict]):
    """(the grid the turn showed, the agent's tile, the valid move it made) for each kept turn."""
    for episode in episodes:
        for turn in episode.get("turns") or []:
            if turn["action"] is not None:
                grid = grid_from_prompt(turn["prompt"])
                yield grid, find(grid, "S"), turn["action"]


def hole_choices(episodes: list[dict]) -> dict | None:
    """Whether the agent reads the tiles next to it: over its valid moves from a tile with a hole next to it and a
    tile it could step to safely, the share that went into a hole, beside a uniform choice of the four moves'
    expected share there. None where no episode kept its turns."""
    moves = into = expected = 0
    for grid, here, action in _valid_moves(episodes):
        near = dict(neighbours(grid, here))
        holes = [move for move, (row, col) in near.items() if grid[row][col] == "H"]
        if holes and len(holes) < len(near):
            moves += 1
            into += action in holes
            expected += len(holes) / len(ACTIONS)
    return {"moves": moves, "into a hole": into / moves, "uniform choice": expected / moves} if moves else None


def goal_choices(episodes: list[dict]) -> dict | None:
    """Whether the agent finds the route: over its valid moves from a tile the goal can be reached from without a
    hole, the share that took it one step closer along such a route, beside a uniform choice of the four moves'
    expected share (a shortest-route policy: 1). None where no episode kept its turns."""
    moves = closer = expected = 0
    for grid, here, action in _valid_moves(episodes):
        distance = distances_to_goal(grid)
        if here not in distance:
            continue
        ahead = [move for move, cell in neighbours(grid, here) if distance.get(cell, distance[here]) < distance[here]]
        moves += 1
        closer += action in ahead
        expected += len(ahead) / len(ACTIONS)
    return {"moves": moves, "closer": closer / moves, "uniform choice": expected / moves} if moves else None


def move_shares(episodes: list[dict]) -> dict[str, float] | None:
    """Each direction's share of the valid moves made: a policy that favours one whatever the grid shows is not
    reading it. None where no episode kept its turns."""
    made = [turn["action"] for episode in episodes for turn in episode.get("turns") or [] if turn["action"]]
    return {action: made.count(action) / len(made) for action in ACTIONS} if made else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def report_rows(report: dict) -> list[str]:
    """report.md below the metric table's head: the figures, the model beside the baselines on the same maps,
    success by map size and how episodes ended."""
    low, high = report["success_rate_ci95"]
    lines = [f"| success rate | {report['success_rate']:.3f} (95% CI {low:.3f}-{high:.3f}) |",
             f"| mean steps | {_fmt(report['mean_steps'])} |",
             f"| invalid-action rate | {_fmt(report['invalid_action_rate'])} |"]
    baselines = report.get("baselines", {})
    if baselines:
        unseen = (report.get("by_training") or {}).get("unseen")  # the held-out figure, where it was checked
        extra = (" success on unseen layouts |", "---|") if unseen else ("", "")
        lines += ["", "| policy, same maps and seeds | success rate (95% CI) | invalid-action rate | mean steps |"
                      + extra[0], "|---|---|---|---|" + extra[1]]
        for name, r in {"this model": report, **baselines}.items():
            low, high = r["success_rate_ci95"]
            cell = f" {r['by_training']['unseen']['rate']:.3f} |" if unseen else ""
            lines.append(f"| {name} | {r['success_rate']:.3f} ({low:.3f}-{high:.3f}) | "
                         f"{_fmt(r['invalid_action_rate'])} | {_fmt(r['mean_steps'])} |{cell}")
    lines += by_training_rows(report.get("by_training"), "success rate", WEAK, "random walk's expected rate")
    lines += ["", "| map size | episodes | success rate | 95% CI |", "|---|---|---|---|"]
    lines += [f"| {s}x{s} | {v['n']} | {v['rate']:.3f} | {v['ci95'][0]:.3f}-{v['ci95'][1]:.3f} |"
              for s, v in report["by_size"].items()]
    lines += ["", "| episode ended by | episodes |", "|---|---|"]
    lines += [f"| {reason} | {count} |" for reason, count in report["termination"].items()]
    return lines


def policy_panels(overall, by_size, reports: dict[str, dict], emphasize_first: bool = False) -> None:
    """Draw `reports` (name -> report.json) side by side, one colour each in the order given: success
    rate with its interval and invalid-action rate as bars on `overall`, success by map size as lines on
    `by_size` (the first line thicker with `emphasize_first`)."""
    width = 0.8 / len(reports)
    sizes = sorted({size for r in reports.values() for size in r["by_size"]}, key=int)
    for i, (name, r) in enumerate(reports.items()):
        low, high = r["success_rate_ci95"]
        x = i * width - 0.4 + width / 2
        overall.bar(x, r["success_rate"], width, color=f"C{i}", label=name,
                    yerr=[[r["success_rate"] - low], [high - r["success_rate"]]], capsize=4)
        overall.bar(1 + x, r["invalid_action_rate"] or 0.0, width, color=f"C{i}")
        by_size.plot([int(s) for s in sizes], [r["by_size"].get(s, {}).get("rate") for s in sizes], marker="o",
                     color=f"C{i}", label=name, linewidth=3 if emphasize_first and i == 0 else 1.5)
    overall.set_xticks([0, 1], ["success rate (95% CI)", "invalid-action rate"])
    by_size.set_xticks([int(s) for s in sizes])
    by_size.set_xlabel("map size")
    by_size.set_title("success rate by map size")


def chart(report: dict):
    """chart.png's figure: success and invalid actions beside the baselines, success by map size against them,
    and how episodes ended."""
    from rftkit.reports.plots import plt

    fig, (overall, by_size, ends) = plt.subplots(1, 3, figsize=(14, 4.2))
    policy_panels(overall, by_size, {"this model": report, **report.get("baselines", {})}, emphasize_first=True)
    overall.set_title(f"overall: success {report['success_rate']:.2f}")
    for ax in (overall, by_size):  # room above the bars for the legend
        ax.set_ylim(0, 1.3)
        ax.legend(ncol=3, loc="upper center", fontsize="small")
    reasons = report["termination"]
    ends.bar(list(reasons), list(reasons.values()), color="tab:gray")
    ends.set_title("how this model's episodes ended")
    ends.set_ylabel("episodes")
    return fig


def map_key(task: dict) -> str:
    """What pairs a map across two evaluations: its uid and its layout, so that two splits reusing a uid for
    another map do not pass for the same maps."""
    return f"{task['uid']} {layout(task)}"


def goals(episodes: list[dict]) -> dict[str, float]:
    """Goals reached per map (`map_key`), from episodes.jsonl rows."""
    per_map: dict[str, float] = {}
    for episode in episodes:
        key = map_key(episode["task"])
        per_map[key] = per_map.get(key, 0.0) + episode["metrics"]["success"]
    return per_map


def map_by_map(before: dict[str, float], after: dict[str, float]) -> tuple[int, int, int]:
    """Maps where the second evaluation reached the goal more often, less often, as often, from `goals`."""
    try:
        return task_by_task(before, after)
    except ValueError:
        raise SystemExit("error: the two evaluations did not play the same maps; no map-by-map comparison") from None


def seen_maps(episodes: list[dict], train: Path | None) -> dict[str, bool] | None:
    """`map_key` -> whether the training split holds the map's layout: from `train` (a split file) where given,
    else from the episodes' own flags (evaluate.py's); None where neither says."""
    tasks = {map_key(e["task"]): e for e in episodes}
    if train is not None:
        return dict(zip(tasks, seen_in(train, [e["task"] for e in tasks.values()], layout)))
    if all(e.get(SEEN) is not None for e in tasks.values()):
        return {key: e[SEEN] for key, e in tasks.items()}
    return None


def held_out_table(before: list[dict], first: dict[str, float], second: dict[str, float],
                   seen: dict[str, bool]) -> list[str]:
    """before_after.md's rows for the maps training had not seen and had (`goals` of the two evaluations, the
    first's episodes), each with its map-by-map sign test and a random walk's expected rate on the same maps."""
    lines = ["| maps | number | before | after | better / worse | sign test p | random walk's expected rate |",
             "|---|---|---|---|---|---|---|"]
    repeats = len(before) / len(first)
    walk = {map_key(e["task"]): random_walk_rate(e["task"]) for e in before}
    for name, flag in (("layouts not in training", False), ("layouts in training", True)):
        maps = [key for key in first if seen[key] is flag]
        if not maps:
            continue
        better, worse, _ = map_by_map({m: first[m] for m in maps}, {m: second[m] for m in maps})
        lines.append(f"| {name} | {len(maps)} | {sum(first[m] for m in maps) / (repeats * len(maps)):.3f} | "
                     f"{sum(second[m] for m in maps) / (repeats * len(maps)):.3f} | {better} / {worse} | "
                     f"{sign_test(better, worse):.2g} | {sum(walk[m] for m in maps) / len(maps):.3f} |")
    return lines


def compare(before_dir: Path, after_dir: Path, out: Path, train: Path | None = None) -> str:
    """before_after.md (returned) and before_after.png from two evaluate.py output folders; with the maps split
    by whether their layout is in the training split (`train`, or the episodes' own flags)."""
    from rftkit.reports.plots import plt, save_png

    before, after = (read_json(d / "report.json") for d in (before_dir, after_dir))
    episodes = [read_json(episodes_file(d), lines=True) for d in (before_dir, after_dir)]
    per_map = [goals(e) for e in episodes]
    better, worse, same = map_by_map(*per_map)
    p_value = sign_test(better, worse)
    seen = seen_maps(episodes[0], train)

    def row(name: str, r: dict) -> str:
        low, high = r["success_rate_ci95"]
        invalid = r["invalid_action_rate"]
        return (f"| {name} | {r['success_rate']:.3f} ({low:.3f}-{high:.3f}) | "
                f"{'-' if invalid is None else f'{invalid:.3f}'} | {r['mean_steps'] or 0:.2f} | {r['episodes']} |")

    sizes = sorted({*before["by_size"], *after["by_size"]}, key=int)
    table = ["| model | success rate (95% CI) | invalid-action rate | mean steps | episodes |",
             "|---|---|---|---|---|", row("before", before), row("after", after), "",
             "| map size | " + " | ".join(str(s) for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name, r in (("before", before), ("after", after)):
        cells = [f"{r['by_size'][s]['rate']:.2f}" if s in r["by_size"] else "-" for s in sizes]
        table.append(f"| {name} | " + " | ".join(cells) + " |")
    table += ["", f"Map by map (same maps, same seeds): after reached the goal more often on {better} maps, "
                  f"less often on {worse}, as often on {same}; two-sided sign test p = {p_value:.2g}."]
    readings = (("Moves into a hole next to the agent, where a safe tile was next to it too", hole_choices,
                 "into a hole", "a safe walk: 0"),
                ("Moves one step closer to the goal along a route without holes", goal_choices, "closer",
                 "a shortest-route policy: 1"))
    for sentence, reading, share, ideal in readings:  # whether the agent reads the tiles next to it, and the route
        first, second = (reading(e) for e in episodes)
        if first and second:
            table += ["", f"{sentence}: {first[share]:.3f} of {first['moves']} before, {second[share]:.3f} of "
                          f"{second['moves']} after (a uniform choice of the four moves: {first['uniform choice']:.3f} "
                          f"and {second['uniform choice']:.3f}; {ideal})."]
    shares = [move_shares(e) for e in episodes]
    if None not in shares:
        table += ["", "Valid moves by direction, before -> after: " + ", ".join(
            f"{action} {shares[0][action]:.2f} -> {shares[1][action]:.2f}" for action in ACTIONS) + "."]
    if seen is None:
        table += ["", "Not compared with a training split: these figures include any map whose layout training saw."]
    else:
        table += ["", "Held out by layout (a map's grid, compared with the training split's):", "",
                  *held_out_table(episodes[0], *per_map, seen)]
    text = "\n".join(table) + "\n"

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.4))
    policy_panels(left, right, {"before": before, "after": after})  # before C0, after C1 in both panels
    left.set_title("test split")
    for ax in (left, right):
        ax.set_ylim(0, 1)
        ax.legend()
    fig.suptitle(f"map by map: after better on {better}, worse on {worse}, the same on {same} "
                 f"(sign test p = {p_value:.2g})")
    fig.tight_layout()
    with atomic_paths(out / "before_after.png", out / "before_after.md") as (png, md):
        save_png(fig, png)
        md.write_text(text)
    return text
