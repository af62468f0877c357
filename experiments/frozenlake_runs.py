"""Every FrozenLake learning run on the test maps whose layout training never had: one table and one chart.

    python -m experiments.frozenlake_runs NAME=OUT [NAME=OUT ...] --out DIR [--train NAME=SPLIT ...]

OUT is an `experiments.frozenlake_learning` output folder: before/ and after/, each an evaluation by
scripts/evaluate.py of the same maps with the same seeds. A map counts as unseen by its grid: from the episodes'
own flags (evaluate.py compares each map with the training split), or, for a run whose evaluations predate the
flags, from `--train NAME=SPLIT`, that run's training split (a .parquet file). For each run, on its unseen maps
only: success before and after (after with its 95% interval), the maps where after reached the goal more and
less often with a two-sided sign test, a random walk's expected rate on the same maps and after's multiple of
it, a safe walk's expected rate (one that never steps off the grid or into a hole: `frozenlake.reference`), the
invalid-action rate before and after, how episodes ended, how often a move went into a hole next to the agent
when a safe tile was there too, how often a move took it one step closer to the goal, and success by map size.
Writes runs.md (returned and printed) and runs.png (bars: before, after, a random walk and a safe walk for each
run; lines: after minus before by map size) to DIR.
"""

from __future__ import annotations

import sys
from pathlib import Path

from frozenlake.report import (goal_choices, goals, hole_choices, map_by_map, map_key, random_walk_rate, seen_maps,
                               summarize)
from frozenlake.reference import safe_walk_pass_rate
from rftkit.cli import ArgumentParser, labelled_path
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, read_json, reports_input_errors
from rftkit.reports.evaluation import episodes_file, sign_test


ENDS = ("goal", "hole", "max_steps")  # frozenlake.workflow.end_reason's names, as the table's columns


def unseen(out: Path, train: Path | None) -> dict:
    """One run's figures on the maps whose layout its training split lacks."""
    before, after = (read_json(episodes_file(out / part), lines=True) for part in ("before", "after"))
    seen = seen_maps(before, train)
    if seen is None:
        raise InputError(f"{out}/before: its episodes do not say which maps training had; give --train "
                         f"NAME=SPLIT with that run's training split")
    first, second = ([e for e in episodes if not seen.get(map_key(e["task"]), True)] for episodes in (before, after))
    if not first:
        raise InputError(f"{out}: every test map has a training map's layout; nothing is held out")
    better, worse, _ = map_by_map(goals(first), goals(second))
    tasks = {map_key(e["task"]): e["task"] for e in first}
    walks = {"random walk": {key: random_walk_rate(task) for key, task in tasks.items()},
             "safe walk": {key: safe_walk_pass_rate(task) for key, task in tasks.items()}}
    result = {"maps": len(tasks), "before": summarize(first), "after": summarize(second), "better": better,
              "worse": worse, "p": sign_test(better, worse),
              "hole choices": {"before": hole_choices(first), "after": hole_choices(second)},
              "goal choices": {"before": goal_choices(first), "after": goal_choices(second)}}
    for name, rates in walks.items():
        by_size: dict[int, list[float]] = {}
        for key, rate in rates.items():
            by_size.setdefault(tasks[key]["size"], []).append(rate)
        result[name] = sum(rates.values()) / len(rates)
        result[f"{name} by size"] = {size: sum(r) / len(r) for size, r in sorted(by_size.items())}
    return result


def markdown(runs: dict[str, dict]) -> str:
    lines = ["| run | unseen maps | before | after (95% CI) | better / worse, sign test p | random walk (expected) "
             "| after / random walk | safe walk (expected) | invalid actions, before / after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        low, high = r["after"]["success_rate_ci95"]
        lines.append(f"| {name} | {r['maps']} | {r['before']['success_rate']:.3f} | {r['after']['success_rate']:.3f} "
                     f"({low:.3f}-{high:.3f}) | {r['better']} / {r['worse']}, p = {r['p']:.2g} | "
                     f"{r['random walk']:.3f} | {r['after']['success_rate'] / r['random walk']:.2f}x | "
                     f"{r['safe walk']:.3f} | "
                     f"{r['before']['invalid_action_rate']:.3f} / {r['after']['invalid_action_rate']:.3f} |")
    lines += ["", "A safe walk moves at random among the tiles next to it that are on the grid and not holes: no "
              "route, only the local view (`frozenlake.reference`, policy `safe`), its exact expected rate."]
    lines += ["", "How the unseen maps' episodes ended, before -> after:", "",
              "| run | reached the goal | fell in a hole | ran out of moves | other |", "|---|---|---|---|---|"]
    for name, r in runs.items():
        ends = [r[part]["termination"] for part in ("before", "after")]
        other = [sum(n for reason, n in e.items() if reason not in ENDS) for e in ends]
        lines.append(f"| {name} | " + " | ".join(f"{ends[0].get(reason, 0)} -> {ends[1].get(reason, 0)}"
                                                for reason in ENDS) + f" | {other[0]} -> {other[1]} |")
    readings = (("hole choices", "into a hole", "Moves into a hole next to the agent, of its valid moves from a tile "
                 "with a hole next to it and a safe tile to step to (before -> after; a uniform choice of the four "
                 "moves, a safe walk never):"),
                ("goal choices", "closer", "Moves one step closer to the goal along a route without holes, of the "
                 "valid moves from a tile the goal can be reached from (before -> after; a uniform choice of the four "
                 "moves; a shortest-route policy: 1):"))
    for key, share, intro in readings:
        lines += ["", intro, "", f"| run | moves, before -> after | {share}, before -> after | uniform choice |",
                  "|---|---|---|---|"]
        for name, r in runs.items():
            first, second = (r[key][part] for part in ("before", "after"))
            lines.append(f"| {name} | - | - | - |" if first is None or second is None else
                         f"| {name} | {first['moves']} -> {second['moves']} | {first[share]:.3f} -> "
                         f"{second[share]:.3f} | {first['uniform choice']:.3f} -> {second['uniform choice']:.3f} |")
    sizes = sorted({int(s) for r in runs.values() for s in r["random walk by size"]})
    lines += ["", "Success by map size on the unseen maps, after (before; a random walk's and a safe walk's expected "
              "rates):", "",
              "| run | " + " | ".join(f"{s}x{s}" for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name, r in runs.items():
        cells = []
        for size in sizes:
            after, before = (r[part]["by_size"].get(size) for part in ("after", "before"))
            walk, safe = (r[f"{walker} by size"].get(size) for walker in ("random walk", "safe walk"))
            cells.append("-" if after is None else
                         f"{after['rate']:.2f} ({before['rate']:.2f}; {walk:.2f}, {safe:.2f}), {after['n']} episodes")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def chart(runs: dict[str, dict]):
    from rftkit.reports.plots import plt

    many = len(runs) > 8  # wider bars, slanted names and a legend beside the lines, so that none overlap
    fig, (bars, gains) = plt.subplots(1, 2, figsize=(max(13.0, 5 + 0.8 * len(runs)), 5.2 if many else 4.2),
                                      gridspec_kw={"width_ratios": [3, 2]})
    colors = plt.get_cmap("tab20" if len(runs) > 10 else "tab10")
    width = 0.2
    for k, (label, value) in enumerate((("before", lambda r: r["before"]["success_rate"]),
                                        ("after", lambda r: r["after"]["success_rate"]),
                                        ("random walk (expected)", lambda r: r["random walk"]),
                                        ("safe walk (expected)", lambda r: r["safe walk"]))):
        bars.bar([i + (k - 1.5) * width for i in range(len(runs))], [value(r) for r in runs.values()], width,
                 label=label, color=("tab:gray", "tab:blue", "tab:orange", "tab:green")[k])
    bars.set_xticks(range(len(runs)), list(runs), rotation=40 if many else 20, ha="right")
    bars.set_ylabel("success on unseen maps")
    bars.legend(fontsize="small", ncol=4, loc="lower left", bbox_to_anchor=(0, 1))  # above the bars it would hide
    for i, (name, r) in enumerate(runs.items()):
        sizes = sorted(r["after"]["by_size"])
        gains.plot(sizes, [r["after"]["by_size"][s]["rate"] - r["before"]["by_size"][s]["rate"] for s in sizes],
                   marker="o", color=colors(i % colors.N), label=name)
    gains.set_xticks(sorted({s for r in runs.values() for s in r["after"]["by_size"]}))
    gains.axhline(0, color="black", linewidth=0.8)
    gains.set_xlabel("map size")
    gains.set_ylabel("after minus before")
    gains.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.frozenlake_runs", description=__doc__)
    parser.add_argument("runs", metavar="NAME=OUT", type=labelled_path, nargs="+",
                        help="a run's name and its experiments.frozenlake_learning output folder")
    parser.add_argument("--train", metavar="NAME=SPLIT", type=labelled_path, action="append", default=[],
                        help="the training split of run NAME, where its evaluations do not flag seen maps")
    parser.add_argument("--out", type=Path, required=True, help="folder for runs.md and runs.png")
    args = parser.parse_args(argv)
    names = [name for name, _ in args.runs]
    if len(set(names)) != len(names):
        parser.error(f"NAME=OUT: each run needs its own name (given: {', '.join(names)})")
    splits = dict(args.train)
    if set(splits) - set(names):
        parser.error(f"--train {', '.join(sorted(set(splits) - set(names)))}: no run of that name")
    check_writable(args.out, "--out")
    runs = {name: unseen(out, splits.get(name)) for name, out in args.runs}
    text = markdown(runs)
    from rftkit.reports.plots import save_png

    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_paths(args.out / "runs.md", args.out / "runs.png") as (md, png):
        md.write_text(text, encoding="utf-8")
        save_png(chart(runs), png)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
