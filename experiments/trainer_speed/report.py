"""The trainer benchmark's checks and report: log-prob gaps between settings, the table and the chart."""

from __future__ import annotations

from pathlib import Path

from experiments.scales import SCALES
from experiments.trainer_speed.settings import LOGPROB_TOLERANCE, REFERENCE_SETTING, SETTINGS

GAP = f"log-prob gap to {REFERENCE_SETTING}"
IDLE_TOP = 4  # functions named in the table's idle column


def logprob_gap(a: list[float], b: list[float]) -> dict:
    """Mean and largest absolute difference between two settings' log-probs of the same tokens."""
    if len(a) != len(b) or not a:
        raise ValueError(f"log-probs of different batches: {len(a)} against {len(b)} tokens")
    gaps = [abs(x - y) for x, y in zip(a, b)]
    return {"mean": sum(gaps) / len(gaps), "max": max(gaps), "tokens": len(gaps)}


def add_gaps(results: dict) -> None:
    """Each setting's reference log-probs against REFERENCE_SETTING's, in place. Only the packed settings
    are held to the tolerance: `before` differs by its bf16 rounding, which is what it always did."""
    reference = results.get(REFERENCE_SETTING, {}).get("reference log-probs of the first step")
    for setting, r in results.items():
        if setting != REFERENCE_SETTING and reference and "reference log-probs of the first step" in r:
            gap = logprob_gap(r["reference log-probs of the first step"], reference)
            held = SETTINGS[setting]["attn"] == "varlen"
            r[GAP] = {**gap, "tolerance (mean)": LOGPROB_TOLERANCE if held else None,
                      "within": gap["mean"] <= LOGPROB_TOLERANCE if held else None}


def packing_changes_nothing(results: dict) -> dict | None:
    """The packed path's log-probs with two micro-batch budgets: each sequence packed beside others.

    Sequences that leaked into each other would give different log-probs in different company."""
    a, b = (results.get(name, {}).get("reference log-probs of the first step") for name in ("varlen", "varlen-32k"))
    if not (a and b):
        return None
    gap = logprob_gap(a, b)
    return {**gap, "within": gap["max"] <= 1e-3}


def sync_kind(result: dict) -> str:
    """What a setting's weight sync moved: the model in these dtypes, or a LoRA adapter's file of this size."""
    if "weight sync dtypes" in result:
        return result["weight sync dtypes"]
    return f"adapter, {result['weight sync bytes'] / 2 ** 20:.1f} MiB"


def compare(example: str, results: dict, ceiling: dict) -> list[str]:
    """Markdown rows for one example: each setting's figures and ratios."""
    rows = []
    before = results.get("before", {})
    best = ceiling.get("ceiling", {})
    for setting, r in results.items():
        if "error" in r:
            rows.append(f"| {example} | {setting} | failed: {r['error']} ||||||||||||")
            continue
        gap = r.get(GAP)
        gap_text = f"{gap['mean']:.4f} / {gap['max']:.3f}" + (" OUTSIDE" if gap["within"] is False else "") \
            if gap else "-"
        vs_before = r["trainer tokens/s"] / before["trainer tokens/s"] if "trainer tokens/s" in before else None
        vs_ceiling = best["tokens/s"] / r["update tokens/s"] if best else None
        ref_vs_forward = best["forward only tokens/s"] / r["reference pass tokens/s"] if best else None
        rows.append(
            f"| {example} | {setting} | {r['micro-batch token budget']} | {r['trainer tokens/s']:,.0f} | "
            f"{r['MFU of a trainer step']:.1%} | {r['reference log-probs (s)']:.2f} + {r['update (s)']:.2f} | "
            + (f"{ref_vs_forward:.2f}x | " if ref_vs_forward else "- | ")
            + f"{r['update tokens/s']:,.0f} | " + (f"{vs_ceiling:.2f}x | " if vs_ceiling else "- | ")
            + (f"{vs_before:.2f}x | " if vs_before else "- | ")
            + (f"{r['weight sync (s)']:.1f} ({sync_kind(r)})" if "weight sync (s)" in r else "-")
            + f" | {r['peak allocated (GiB)']:.1f} | {gap_text} | {r['warm-up step']['gradient norm']:.4g} |")
    if best:
        rows.append(f"| {example} | ceiling: bare model, {best['from']} | {ceiling['micro-batch token budget']} | "
                    f"{best['tokens/s']:,.0f} (forward+backward) | {best['MFU']:.1%} | "
                    f"{best['forward only (s)']:.2f} (forward only) + {best['seconds']:.2f} | 1.00x | "
                    f"{best['tokens/s']:,.0f} | 1.00x | | | {best['peak allocated (GiB)']:.1f} | | |")
    return rows


HEADER = ["| example | setting | tokens per micro-batch | trainer tokens/s | MFU (step) | "
          "seconds: reference + update | bare forward / reference pass | update tokens/s | ceiling / update | "
          "vs before | weight sync s (dtype) | "
          f"peak GiB | log-prob gap to {REFERENCE_SETTING}, mean / max (nats) | "
          # the same batch from the same weights: equal whatever the setting cuts it into (rftkit.trainer.loss_scale)
          "first step's gradient norm |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def step_seconds(result: dict) -> list[float]:
    """Each timed step's seconds: the reference pass and the update."""
    return [s["reference log-probs (s)"] + s["update (s)"] for s in result["timed steps"]]


def step_spread(result: dict) -> str:
    """The shortest and longest timed step: a spread as wide as the gap between two runs says the step itself
    varies; a narrow one, that the machine differed between them."""
    seconds = step_seconds(result)
    return f"{min(seconds):.2f} to {max(seconds):.2f} s"


def idle_in_timed_steps(result: dict) -> str:
    """The share of each timed step the GPU had no work, from the profiled step's GPU time: the profiler slows
    the host, not the kernels, so a timed step runs the same GPU work in less wall time."""
    busy = result["profile"]["GPU busy (s)"]
    idle = sorted(max(0.0, 1 - busy / step) for step in step_seconds(result))
    least, most = f"{idle[0]:.0%}", f"{idle[-1]:.0%}"
    return least if least == most else f"{least} to {most}"


def profile_table(summary: dict) -> list[str]:
    """Markdown lines for the profiled steps (`--profile`), none without them."""
    rows = []
    for example in summary:
        for setting, r in summary[example]["settings"].items():
            p = r.get("profile")
            if p and "error" in p:
                rows.append(f"| {example} | {setting} | {p['error']} |||||||")
            elif p:
                busy, idle = ("-", "-") if p["GPU busy (s)"] is None else (
                    f"{p['GPU busy (s)']:.2f} s ({p['GPU busy share']:.0%})", idle_in_timed_steps(r))
                waits = "; ".join(f"{where} ({n})" for where, n in p["waits by function"].items())
                idle_under = "; ".join(f"{where} ({ms:.0f})" for where, ms in
                                       list(p.get("GPU idle by function (ms)", {}).items())[:IDLE_TOP])
                rows.append(f"| {example} | {setting} | {p['profiled step (s)']:.2f} | {busy} | {idle} | "
                            f"{p['waits for the GPU']} ({p['waiting (s)']:.2f} s) | {waits or '-'} | "
                            f"{idle_under or '-'} |")
    return ["", "One step under the profiler (slower than the timed ones, on the host only):", "",
            "| example | setting | step (s) | GPU busy | GPU idle in the timed steps | host waits for the GPU "
            "(s waiting) | waits by function | the GPU idle while the host ran (ms) |",
            "|---|---|---|---|---|---|---|---|", *rows] if rows else []


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    examples = [e for e in summary if summary[e]["settings"]]
    fig, axes = plt.subplots(1, len(examples), figsize=(5.5 * len(examples), 4), squeeze=False)
    for ax, example in zip(axes[0], examples):
        settings = {k: v for k, v in summary[example]["settings"].items() if "error" not in v}
        names = list(settings)
        ax.bar([n + "\n(step)" for n in names], [settings[n]["trainer tokens/s"] for n in names], color="tab:blue",
               label="trainer step (reference + update)")
        ax.bar([n + "\n(update)" for n in names], [settings[n]["update tokens/s"] for n in names], color="tab:orange",
               label="update pass")
        ceiling = summary[example]["ceiling"].get("ceiling")
        if ceiling:
            ax.axhline(ceiling["tokens/s"], color="k", linestyle="--", label=f"bare model fwd+bwd ({ceiling['from']})")
        ax.set_title(f"{example} ({SCALES[example].architecture} shape, one GPU)")
        ax.set_ylabel("tokens per second")
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


