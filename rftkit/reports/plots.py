"""Matplotlib for writing PNG files, never a screen: the backend is chosen once, here."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - must follow the backend choice


def save_png(fig, path) -> None:
    """Write `fig` to `path` as a PNG (format given: `path` may be a temporary name) and free it."""
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def rate_bars(ax, labels, rates, intervals, ylabel) -> None:
    """Bars of rates in [0, 1], each with its (low, high) interval as an error bar."""
    errors = [[r - lo for r, (lo, _) in zip(rates, intervals)], [hi - r for r, (_, hi) in zip(rates, intervals)]]
    ax.bar(labels, rates, yerr=errors, capsize=4, color="tab:blue")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel)
