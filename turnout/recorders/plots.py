"""PNG plots of a run folder (accuracy against rounds, downloaded bytes and simulated time), of an availability
model, and of a results page (curves over seeds, selection counts).

Every variant gets one colour; each seed is one line of that colour, so spread across seeds is
visible rather than averaged away.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..world.context import WorldContext

AXES = (("round", "round", "accuracy_vs_round.png"),
        ("cum_bytes_down", "cumulative bytes downloaded", "accuracy_vs_bytes_down.png"),
        ("sim_time_s", "simulated time (s)", "accuracy_vs_sim_time.png"))
#: decimal byte units, as the tables print them (MB = 1e6 bytes)
BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))


def byte_unit(largest: float) -> tuple[float, str]:
    """The unit an axis of byte counts up to ``largest`` reads best in: its divisor and name (never a bare 1e7)."""
    return next(((div, name) for div, name in BYTE_UNITS if largest >= div), (1.0, "B"))


def plot_accuracy(results: list, folder: Path, title: str) -> list[Path]:
    """Write the three accuracy plots; ``results`` are :class:`~turnout.sim.engine.RunResult` (cumulative columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r.variant for r in results))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []
    for key, label, fname in AXES:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        scale = 1.0
        if key.startswith("cum_bytes"):
            scale, unit = byte_unit(max((row[key] for r in results for row in r.rounds), default=0.0))
            label = f"{label} ({unit})"
        for vi, variant in enumerate(variants):
            for si, res in enumerate(r for r in results if r.variant == variant):
                x = np.array([row[key] for row in res.rounds], dtype=float) / scale
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


def availability_matrix(availability, rounds: int, round_s: float, clients: int) -> np.ndarray:
    """On/off matrix (clients × rounds) of an availability model sampled at ``t = round · round_s``."""
    out = np.zeros((clients, rounds), dtype=bool)
    for r in range(rounds):
        out[:, r] = availability.available(r, r * round_s)[:clients]
    return out


def plot_availability(matrix: np.ndarray, path: Path, title: str) -> Path:
    """A FedGS-Fig.-8-style picture: one row per client, one column per round, dark = available."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients, rounds = matrix.shape
    fig, (ax, side) = plt.subplots(1, 2, figsize=(8.0, 4.2), gridspec_kw={"width_ratios": [5, 1]}, sharey=True)
    ax.imshow(matrix, aspect="auto", cmap="Greys", interpolation="nearest", vmin=0, vmax=1)
    ax.set_xlabel("round")
    ax.set_ylabel("client")
    ax.set_title(title, fontsize=9)
    side.barh(np.arange(clients), matrix.mean(axis=1), height=1.0, color="0.4")
    side.set_xlim(0, 1)
    side.set_xlabel("fraction\navailable")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def availability_gallery(exp, data, seed: int, rounds: int, round_s: float, clients: int, path: Path) -> Path:
    """Build ``exp``'s availability model on ``data`` and draw its first ``clients`` × ``rounds`` on/off matrix."""
    comp = exp["availability"]
    world = WorldContext(num_clients=data.num_clients, n_train=data.n_train, seed=seed, rounds=rounds,
                         extras=data.extras, label_hist_fn=data.label_histogram)
    availability = comp.build(world)
    shown = min(clients, data.num_clients)
    matrix = availability_matrix(availability, rounds, round_s, shown)
    options = ", ".join(f"{k}={v}" for k, v in comp.cfg.model_dump().items()
                        if v is not None and not isinstance(v, (dict, list, bool)))
    import textwrap

    title = "\n".join(textwrap.wrap(f"availability: {comp.name}" + (f" ({options})" if options else "")
                                     + f" — {shown} of {data.num_clients} clients, mean {matrix.mean():.2f}", 80))
    return plot_availability(matrix, path, title)


def axis_label(x: str) -> tuple[str, float]:
    """Axis label and scale of a results page's x column (bytes in MB)."""
    if x == "round":
        return "round", 1.0
    if "vectors" in x:
        return f"model-sized vectors sent, {x.replace('cum_vectors_', '').replace('+', ' + ')}", 1.0
    if "bytes" in x:
        return f"{x.replace('+', ' + ')} (MB)", 1e-6
    if x.endswith("resource_s"):
        return f"{x} (client-seconds)", 1.0
    return x.replace("+", " + "), 1.0


def plot_curve_panels(panels: dict[str, tuple[list[str], dict]], column: str, out: Path, x: str = "round") -> Path:
    """A results page's curves: one panel per setting, ``column`` against ``x``, mean over seeds with a ± std band,
    one line per variant. ``panels`` maps a setting to its variants (in order) and their curves
    (variant → x values, mean, std, number of seeds; :func:`turnout.app.report.curves.curve_panels`).

    A variant keeps its colour in every panel, and one legend below the panels names them all with their
    number of seeds (settings may run different variants, e.g. FedSUM's Cases 1–4 beside P1–P3).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    every = list(dict.fromkeys(v for variants, _ in panels.values() for v in variants))
    cmap = plt.get_cmap("tab10" if len(every) <= 10 else "tab20")
    colour = {v: cmap(i % cmap.N) for i, v in enumerate(every)}
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    lines, n_seeds = {}, {}
    xlabel, scale = axis_label(x)
    for ax, (name, (variants, curves)) in zip(axes[0], panels.items()):
        for v in variants:
            if v not in curves:
                continue
            xs, mean, std, k = curves[v]
            lines[v], = ax.plot(xs * scale, mean, lw=1.1, color=colour[v])
            ax.fill_between(xs * scale, mean - std, mean + std, color=colour[v], alpha=0.2, lw=0)
            n_seeds.setdefault(v, set()).add(k)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"server test {column}\n(mean ± std over seeds)")
    shown = [v for v in every if v in lines]
    labels = [legend_label(v, n_seeds[v]) for v in shown]
    ncol = max(1, min(len(shown), max(2, 2 * n)))
    fig.legend([lines[v] for v in shown], labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows = math.ceil(max(1, len(shown)) / ncol)
    fig.tight_layout(rect=(0, 0.06 * rows + 0.02, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def legend_label(variant: str, seed_counts: set[int]) -> str:
    """``K=5 (3 seeds)``; a variant run with different numbers of seeds in different panels shows the range."""
    lo, hi = min(seed_counts), max(seed_counts)
    return f"{variant} ({lo if lo == hi else f'{lo}–{hi}'} seed{'s' * (hi > 1)})"


def plot_selection_counts(counts: dict[str, np.ndarray], setting: str, out: Path) -> Path:
    """FedGS Fig. 4: one bar chart per variant of how often each client was selected (``counts``: per variant,
    every client's count, mean over seeds) in the run folder named ``setting``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(counts)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 2.6 * rows), squeeze=False, sharey=True)
    for ax, (v, c) in zip(axes.flat, counts.items()):
        ax.bar(np.arange(len(c)), c, width=1.0)
        ax.set_title(f"{v} (var {np.var(c):.1f})", fontsize=9)
        ax.set_xlabel("client")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    for r in range(rows):
        axes[r][0].set_ylabel("times selected")
    fig.suptitle(f"{setting}: selection counts per client (mean over seeds)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
