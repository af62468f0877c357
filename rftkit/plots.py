"""Matplotlib for writing PNG files, never a screen: the backend is chosen once, here."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - must follow the backend choice


def save_png(fig, path) -> None:
    """Write `fig` to `path` as a PNG (format given: `path` may be a temporary name) and free it."""
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
