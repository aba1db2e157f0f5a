# %% [markdown]
# # turnout from Python
#
# Run a small experiment, compare its variants with pandas, plot one curve. Each `# %%` block is a
# notebook cell (VS Code, Jupyter via jupytext); `python examples/api.py --out DIR` runs them all.
# About 20 seconds on a 2-core machine.

# %%
import argparse
from pathlib import Path

import turnout

parser = argparse.ArgumentParser(description="turnout's Python API, end to end")
parser.add_argument("--out", type=Path, default=Path("runs/api-example"), help="new run folder")
args, _ = parser.parse_known_args()

# %% [markdown]
# The experiment is a dict with the keys of an experiment file: FedAvg on Synthetic(0.5, 0.5) with
# 30 clients, two cohort sizes, two seeds (the variants of a seed share the population).

# %%
experiment = {
    "name": "api-example",
    "seeds": [0, 1],
    "rounds": 40,
    "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "num_clients": 30},
    "model": {"name": "logreg"},
    "train": {"batch_size": 50, "local_steps": 10, "lr": 0.2},
    "selector": {"name": "uniform", "clients_per_round": 5},
    "eval": {"every": 5, "target_accuracy": 0.6},
    "output": {"plots": False},
    "variants": [{"name": "K=5"}, {"name": "K=15", "set": {"selector.clients_per_round": 15}}],
}
results = turnout.run(experiment, out=args.out, quiet=True)
print(results)

# %% [markdown]
# `results.comparison` is `comparison.csv`: one row per variant × seed, then mean and std rows.

# %%
means = results.comparison[results.comparison["seed"] == "mean"].set_index("variant")
print(means[["final_accuracy", "rounds_to_target", "bytes_down", "sim_time_s"]].to_string())

# %% [markdown]
# `results.rounds` is `rounds.csv`, cumulative columns included: the bytes each variant spent to
# reach each accuracy, averaged over the seeds at the evaluated rounds.

# %%
evaluated = results.rounds.dropna(subset=["accuracy"])
curve = evaluated.groupby(["variant", "round"])[["accuracy", "cum_bytes_down"]].mean().reset_index()
print(curve.groupby("variant").tail(1).to_string(index=False))

# %% [markdown]
# One curve to a PNG: accuracy against megabytes downloaded, one line per variant.

# %%
import matplotlib  # noqa: E402  (a notebook imports where it first needs a module)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 4))
for variant, part in curve.groupby("variant", sort=False):
    ax.plot(part["cum_bytes_down"] / 1e6, part["accuracy"], marker="o", label=variant)
ax.set_xlabel("MB downloaded (cumulative)")
ax.set_ylabel("server test accuracy (mean over seeds)")
ax.legend()
png = results.folder / "accuracy_vs_mb.png"
fig.savefig(png, dpi=120, bbox_inches="tight")
print(f"wrote {png}")

# %% [markdown]
# `turnout.load` reads any run folder back — also an unfinished one, whose `incomplete` lists
# the units still missing.

# %%
again = turnout.load(results.folder)
assert again.rounds.equals(results.rounds) and again.complete
