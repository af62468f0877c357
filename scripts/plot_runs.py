"""Draw chosen scalars of several Trinity-RFT runs side by side, from their tensorboard logs.

    python scripts/plot_runs.py random=checkpoints/AgentScope-MathBOTS/math-random \\
        bots=checkpoints/AgentScope-MathBOTS/math-difficulty \\
        --scalars rollout/accuracy/mean eval/aime24/accuracy/mean@1 --out outputs/bots_vs_random.png

Each RUN is LABEL=FOLDER (or a folder, labelled by its name); every tensorboard event
file below the folder is read (Trinity writes explorer and trainer logs under
monitor/tensorboard/). Writes the PNG, one panel per scalar with one legend below them, and a
markdown table of each run's final, lowest and highest value and the mean of its first and last 4
steps beside it (same name, .md), which it also prints. Lowest and highest, not "best": for success
higher is better, for invalid actions or a loss lower is.

With --chain the runs are one training run's parts in order, each started from where the one before
ended on another machine (its weights or its checkpoint): each scalar's steps are counted on from its
last step in the parts before (explore steps and trainer updates apart), and a dashed line marks where
each part begins, so that a curve that continues shows as one.

With --paired (two runs) the table also compares them step by step over the steps both logged, for runs that
played the same tasks at the same steps: each one's mean there, how many steps the second was higher and lower,
and a two-sided sign test.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rftkit.cli import ArgumentParser, labelled_path
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, reports_input_errors
from rftkit.reports.evaluation import sign_test
from rftkit.reports.tensorboard import read_scalars

DEFAULT_SCALARS = ["rollout/accuracy/mean", "eval/aime24/accuracy/mean@1"]  # tags a GPU run wrote (docs/gpu.md)


EDGE = 4  # steps averaged at each end of a run: one step of a few maps is noisy, and a chain's seam is read there


def table(runs: dict[str, dict], scalars: list[str]) -> str:
    lines = ["| scalar | run | final (step) | lowest (step) | highest (step) | "
             f"mean of the first {EDGE} steps | mean of the last {EDGE} |", "|---|---|---|---|---|---|---|"]
    for tag in scalars:
        for label, series in runs.items():
            points = series.get(tag)
            if not points:
                lines.append(f"| {tag} | {label} | missing | missing | missing | missing | missing |")
                continue
            cells = [points[-1], min(points, key=lambda p: p[1]), max(points, key=lambda p: p[1])]
            means = [sum(v for _, v in part) / len(part) for part in (points[:EDGE], points[-EDGE:])]
            lines.append(f"| {tag} | {label} | " + " | ".join(f"{v:.4f} ({step})" for step, v in cells)
                         + "".join(f" | {m:.4f}" for m in means) + " |")
    return "\n".join(lines) + "\n"


def paired(runs: dict[str, dict], scalars: list[str]) -> str:
    """Two runs step by step, over the steps both logged of each scalar."""
    (first, a), (second, b) = runs.items()
    lines = ["| scalar | steps both logged | mean, " + first + " | mean, " + second + " | " + second
             + " higher / lower | sign test p |", "|---|---|---|---|---|---|"]
    for tag in scalars:
        x, y = dict(a.get(tag, [])), dict(b.get(tag, []))
        steps = sorted(x.keys() & y.keys())
        if not steps:
            lines.append(f"| {tag} | 0 | - | - | - | - |")
            continue
        higher, lower = sum(y[s] > x[s] for s in steps), sum(y[s] < x[s] for s in steps)
        lines.append(f"| {tag} | {len(steps)} | {sum(x[s] for s in steps) / len(steps):.4f} | "
                     f"{sum(y[s] for s in steps) / len(steps):.4f} | {higher} / {lower} | "
                     f"{sign_test(higher, lower):.2g} |")
    return "\n".join(lines) + "\n"


def chained(runs: dict[str, dict]) -> tuple[dict[str, dict], dict[str, list[int]]]:
    """The runs with each scalar's steps moved past that scalar's last step in the runs before, and for each
    scalar the steps where each run but the first begins. Per scalar because a run keeps two clocks: the
    explorer's tags count explore steps, the trainer's count updates, and a part makes more of one than the
    other."""
    moved, starts, last = {}, {}, {}
    for i, (label, series) in enumerate(runs.items()):
        moved[label] = {}
        for tag, points in series.items():
            offset = last.get(tag, 0)
            if i:
                starts.setdefault(tag, []).append(offset)
            moved[label][tag] = [(step + offset, value) for step, value in points]
            last[tag] = offset + max((step for step, _ in points), default=0)
    return moved, starts


def draw(runs: dict[str, dict], scalars: list[str], path: Path, starts: dict[str, list[int]]) -> None:
    from rftkit.reports.plots import plt, save_png

    legend_rows = -(-len(runs) // 3)
    fig, axes = plt.subplots(1, len(scalars), figsize=(5 * len(scalars), 4 + 0.3 * legend_rows), squeeze=False)
    for ax, tag in zip(axes[0], scalars):
        for i, (label, series) in enumerate(runs.items()):
            if series.get(tag):  # "C<i>": a run keeps its colour in every panel, also where another lacks the tag
                steps, values = zip(*series[tag])
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None, color=f"C{i}", label=label)
        for start in starts.get(tag, []):
            ax.axvline(start, color="gray", linestyle="--", linewidth=1)
        ax.set_title(tag)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    # one legend for all panels, below them: run labels are often longer than a panel is wide
    handles = {line.get_label(): line for ax in axes[0] for line in ax.get_lines()
               if not line.get_label().startswith("_")}  # matplotlib's unlabelled lines: the parts' dashed starts
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(len(handles), 3), frameon=False)
    fig.tight_layout(rect=(0, 0.07 * legend_rows, 1, 1))
    save_png(fig, path)


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN", type=labelled_path, help="LABEL=FOLDER or FOLDER")
    parser.add_argument("--scalars", nargs="+", default=DEFAULT_SCALARS, help="tags to draw (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("runs.png"), help="PNG to write (default: %(default)s)")
    parser.add_argument("--chain", action="store_true",
                        help="the runs are one run's parts in order: count each part's steps on from the one before")
    parser.add_argument("--paired", action="store_true",
                        help="two runs that played the same tasks at the same steps: compare them step by step")
    args = parser.parse_args(argv)
    if args.out.is_dir():
        raise InputError(f"--out {args.out}: a folder; expected the name of the PNG file to write")
    if args.out.suffix.lower() != ".png":
        raise InputError(f"--out {args.out}: expected a name ending in .png")
    if args.paired and len(args.runs) != 2:
        parser.error(f"--paired compares two runs; got {len(args.runs)}")
    check_writable(args.out.parent, "--out")

    runs = {}
    for label, folder in args.runs:
        if not folder.is_dir():
            raise InputError(f"RUN {folder}: no such folder")
        if label in runs:
            parser.error(f"two runs are labelled {label!r}; name them LABEL=FOLDER")
        try:
            runs[label] = read_scalars(folder)
        except FileNotFoundError as exc:
            parser.error(str(exc))
        if not runs[label]:
            raise InputError(f"RUN {folder}: its event files hold no scalars (empty, cut short or not tensorboard's)")
    found = [tag for tag in args.scalars if any(tag in series for series in runs.values())]
    if not found:
        available = sorted({tag for series in runs.values() for tag in series})
        parser.error(f"--scalars: none of {args.scalars} is in these runs; they have: {', '.join(available)}")

    runs, starts = chained(runs) if args.chain else (runs, {})
    summary = table(runs, args.scalars) + ("\n" + paired(runs, args.scalars) if args.paired else "")
    with atomic_paths(args.out, args.out.with_suffix(".md")) as (png, md):
        draw(runs, found, png, starts)
        md.write_text(summary)
    print(summary)
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
