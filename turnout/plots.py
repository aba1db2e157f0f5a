"""PNG plots of a run folder: accuracy against rounds, downloaded bytes and simulated time.

Every variant gets one colour; each seed is one line of that colour, so spread across seeds is
visible rather than averaged away.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

AXES = (("round", "round", "accuracy_vs_round.png"),
        ("cum_bytes_down", "cumulative bytes downloaded", "accuracy_vs_bytes_down.png"),
        ("sim_time_s", "simulated time (s)", "accuracy_vs_sim_time.png"))


def plot_accuracy(results: list, folder: Path, title: str) -> list[Path]:
    """Write the three accuracy plots; ``results`` are :class:`~turnout.engine.RunResult` with cumulative columns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r.variant for r in results))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []
    for key, label, fname in AXES:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for vi, variant in enumerate(variants):
            for si, res in enumerate(r for r in results if r.variant == variant):
                x = np.array([row[key] for row in res.rounds], dtype=float)
                y = np.array([row["accuracy"] for row in res.rounds], dtype=float)
                ok = ~np.isnan(y)
                if key == "round":
                    x = x + 1  # accuracy is measured after the round's aggregation
                ax.plot(x[ok], y[ok], color=colours[vi % len(colours)], lw=1.2, alpha=0.85,
                        label=variant if si == 0 else None)
        ax.set_xlabel(label)
        ax.set_ylabel("server test accuracy")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if len(variants) > 1:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = folder / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
