"""The math example's evaluation report: one problem played and judged for scripts/evaluate.py, the
episodes summed up (accuracy with its interval, answers in \\boxed{}, code executions), report.md's
rows and chart.png's bars."""

from __future__ import annotations

from math_bots.judge import gsm8k_judge
from math_bots.workflow import run_react_agent
from rftkit.reports.evaluation import by_training, by_training_rows, wilson_interval


async def play(task, model):
    out = await run_react_agent(task, model, {})
    judged = await gsm8k_judge(task, out.response, {})
    return {"reward": judged.reward, "metrics": {**(out.metrics or {}), **judged.metrics},
            "response": out.response.get_text_content()}


BASELINES: dict = {}  # scripts/evaluate.py --model NAME: none for math; an endpoint or a local model plays


def summarize(episodes: list[dict]) -> dict:
    played = [e for e in episodes if e["error"] is None]
    correct = sum(e["reward"] == 1.0 for e in episodes)
    boxed = sum(e["metrics"]["format"] for e in played)
    low, high = wilson_interval(correct, len(episodes))
    return {
        "episodes": len(episodes),
        "accuracy": correct / len(episodes),
        "accuracy_ci95": [low, high],
        "format_rate": boxed / len(episodes),
        "tool_calls_mean": sum(e["metrics"]["tool_calls"] for e in played) / len(played) if played else 0.0,
        "errors": len(episodes) - len(played),
        "by_training": by_training(episodes, lambda e: e["reward"] == 1.0),  # problems training had and had not
    }


def report_rows(report: dict) -> list[str]:
    """report.md below the metric table's head."""
    low, high = report["accuracy_ci95"]
    return [f"| accuracy | {report['accuracy']:.3f} (95% CI {low:.3f}-{high:.3f}) |",
            f"| format rate (has \\boxed{{}}) | {report['format_rate']:.3f} |",
            f"| code executions per episode | {report['tool_calls_mean']:.2f} |",
            *by_training_rows(report.get("by_training"), "accuracy")]


def chart(report: dict):
    """chart.png's figure: accuracy and format rate with their intervals."""
    from rftkit.reports.plots import plt, rate_bars

    fig, ax = plt.subplots(figsize=(5, 4))
    n = report["episodes"]
    rate_bars(ax, ["accuracy", "format"], [report["accuracy"], report["format_rate"]],
              [report["accuracy_ci95"], wilson_interval(report["format_rate"] * n, n)], "rate (95% CI)")
    return fig
