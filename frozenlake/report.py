"""FrozenLake's evaluation report: one episode played for scripts/evaluate.py, the episodes summed up
(success rate with its interval, steps, invalid actions, how episodes ended, success by map size),
report.md's rows and chart.png's panels."""

from __future__ import annotations

from collections import Counter, defaultdict

from frozenlake.agent import FrozenLakeAgent
from frozenlake.workflow import end_reason, run_frozen_lake
from rftkit.evaluation import wilson_interval


async def play(task, model):
    out = await run_frozen_lake(task, model, {})
    for turn in model.turns:  # what the agent made of each reply; None marks a malformed action
        turn["action"] = FrozenLakeAgent.get_action(turn["reply"])
    text = out.response.get_text_content()
    return {"reward": out.reward, "metrics": out.metrics, "reason": end_reason(text), "response": text}


def rate(successes: float, trials: int) -> dict:
    low, high = wilson_interval(successes, trials)
    return {"rate": successes / trials if trials else 0.0, "ci95": [low, high], "n": trials}


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
    }


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def report_rows(report: dict) -> list[str]:
    """report.md below the metric table's head: the figures, then success by map size and how episodes ended."""
    low, high = report["success_rate_ci95"]
    lines = [f"| success rate | {report['success_rate']:.3f} (95% CI {low:.3f}-{high:.3f}) |",
             f"| mean steps | {_fmt(report['mean_steps'])} |",
             f"| invalid-action rate | {_fmt(report['invalid_action_rate'])} |", "",
             "| map size | episodes | success rate | 95% CI |", "|---|---|---|---|"]
    lines += [f"| {s}x{s} | {v['n']} | {v['rate']:.3f} | {v['ci95'][0]:.3f}-{v['ci95'][1]:.3f} |"
              for s, v in report["by_size"].items()]
    lines += ["", "| episode ended by | episodes |", "|---|---|"]
    lines += [f"| {reason} | {count} |" for reason, count in report["termination"].items()]
    return lines


def chart(report: dict):
    """chart.png's figure: success by map size, and how episodes ended."""
    from rftkit.plots import plt, rate_bars

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = report["by_size"]
    rate_bars(left, [f"{s}x{s}" for s in sizes], [v["rate"] for v in sizes.values()],
              [v["ci95"] for v in sizes.values()], "success rate (95% CI)")
    left.set_title(f"success by map size (overall {report['success_rate']:.2f})")
    reasons = report["termination"]
    right.bar(list(reasons), list(reasons.values()), color="tab:gray")
    right.set_title("how episodes ended")
    right.set_ylabel("episodes")
    return fig
