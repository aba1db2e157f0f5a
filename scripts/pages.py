"""The seed papers' results pages: what each runs, how it is written, and how a page is checked against the code.

``scripts/reproduce.sh`` is the entry point; it runs this file with the project's Python:

    bash scripts/reproduce.sh PAGE                 # run every setting of PAGE, write docs/results/PAGE.md
    bash scripts/reproduce.sh --check PAGE...      # re-run each page's check slice (or: --check all)
    bash scripts/reproduce.sh --check --full PAGE  # re-run the whole page and compare every table
    bash scripts/reproduce.sh --report PAGE        # re-write the page from runs/reproduce/PAGE (after editing notes)

A page runs its settings one after another, each as ``turnout run CONFIG --set ... --jobs $JOBS`` (default
2 worker processes; results do not depend on it) into ``runs/reproduce/PAGE/SETTING``, then writes the page
with :func:`turnout.app.report.write_report`. A page with a ``tune`` step (FedSUM) first runs the tuning grid,
picks the value its paper's protocol picks and passes it to every setting.

Every page records, in a machine-readable comment at its end, the commit and the hash of the resolved
configs it was made from, and the numbers of a **check slice**: one setting, seed 0, a few rounds, all of
the page's variants, run after the full settings. ``--check`` re-resolves the configs (a different hash: the
experiment files or the components' defaults changed since the page was made) and re-runs the slice (a
different number: the code no longer produces what the page shows); either fails the check, so a stale page
is caught in CI (``tests/test_pages.py``) without re-running the page. ``--check all`` skips (and names) the pages
listed in :data:`NOT_REGENERATED`, which have no record yet; ``--check PAGE`` on such a page fails.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# this checkout's turnout, not whichever one an editable install points at (a second worktree, a clone beside it):
# the runs below use it too (``python -m turnout`` from ROOT), and the config hash must describe the same code
sys.path.insert(0, str(ROOT))

from turnout.core.environment import CROSS_CPU_ATOL, CROSS_CPU_RTOL  # noqa: E402

RESULTS = ROOT / "docs" / "results"
RUNS = ROOT / "runs" / "reproduce"
RECORD_START, RECORD_END = "<!-- page-record", "-->"
#: numbers a check slice records per variant (from the run's summary)
SLICE_METRICS = ("final_loss", "final_accuracy", "bytes_up", "bytes_down", "sim_time_s", "resource_s")
#: relative tolerance of ``--check`` for floats; integers (bytes, counts) are compared exactly. A page may be
#: checked on another CPU than the one that made it: the tolerance is docs/determinism.md's across CPUs.
REL_TOL, ABS_TOL = CROSS_CPU_RTOL, CROSS_CPU_ATOL


@dataclass(frozen=True)
class Setting:
    """One column of a page: an experiment file and the ``--set`` values that make the setting."""

    name: str
    config: str
    sets: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()  # variants not run in this setting (e.g. a column that would repeat another's run)


@dataclass(frozen=True)
class Tune:
    """A grid run before the settings; the chosen value of ``key`` is passed to every setting."""

    settings: tuple[Setting, ...]
    key: str  # dotted config key the grid varies (and the settings receive)
    metric: str  # summary metric averaged over the tune settings and seeds
    lower_is_better: bool = True
    why: str = ""


@dataclass(frozen=True)
class Slice:
    """The check slice: ``setting``, seed 0, ``rounds`` rounds, every variant (or ``variants``)."""

    setting: str
    rounds: int
    variants: tuple[str, ...] = ()


@dataclass(frozen=True)
class Page:
    title: str
    settings: tuple[Setting, ...]
    metrics: tuple[str, ...]
    slice: Slice
    curve: str = "loss"
    curve_x: tuple[str, ...] = ("round",)
    counts: tuple[str, ...] = ()
    percent_of: str | None = None
    baseline: str | None = None
    tune: Tune | None = None
    extra: dict = field(default_factory=dict)


def _fedgs_synthetic(name: str, availability: str) -> Setting:
    return Setting(name, "experiments/fedgs/synthetic.yaml", (f"availability={availability}",))


def _fedgs_fmnist(name: str, availability: str) -> Setting:
    return Setting(name, "experiments/fedgs/fashion_mnist.yaml", (f"availability={availability}",))


FEDSUM_P = (("P1-m10", "availability={name: p1_uniform, m: 10}"), ("P2-Bernoulli", "availability={name: p2_bernoulli}"),
            ("P3-sine", "availability={name: p3_sine}"))
LABEL = "data.partition={name: shards, shards_per_client: 2}"
DL = "round_mode={name: deadline, deadline_s: 60}"
GLUEFL_METRICS = ("bytes_down_to_target", "bytes_up_to_target", "download_time_to_target_s", "sim_time_to_target_s",
                  "rounds_to_target", "final_accuracy")

#: variants of the FedGS page that the 1,000-round runs leave out: FedProx μ = 0.01 (= MDSample there), α > 0 (within
#: ±0.003 of α = 0 under MDF), and, for CPU time on the shared machine, MDSample and Power-of-Choice
FEDGS_1000_SKIP = ("MDSample", "Power-of-Choice", "FedProx mu=0.01", "FedGS a=0.5", "FedGS a=1", "FedGS a=2",
                   "FedGS a=5")

#: the async page's variants: FedAsync runs 2,000 updates (one per arrival), the others 200 rounds of 10 reports
ASYNC_ONE_AT_A_TIME = ("FedAsync (C=20)", "FedAsync (C=50)")
ASYNC_BATCHED = ("FedAvg (wait all)", "FedAvg (deadline 60 s)", "SAFA", "REFL (IPS + SAA, deadline 60 s)",
                 "FedBuff (C=20)", "FedBuff (C=50)")

PAGES: dict[str, Page] = {
    "fedgs": Page(
        "FedGS Table 2 (Synthetic(0.5, 0.5)) at laptop scale",
        (_fedgs_synthetic("IDL", "{name: idl}"), _fedgs_synthetic("LN-0.5", "{name: ln, beta: 0.5}"),
         _fedgs_synthetic("SLN-0.5", "{name: sln, beta: 0.5}"), _fedgs_synthetic("LDF-0.7", "{name: ldf, beta: 0.7}"),
         _fedgs_synthetic("MDF-0.7", "{name: mdf, beta: 0.7}")),
        ("best_loss", "final_accuracy", "selection_count_var"), Slice("LN-0.5", 8), counts=("LN-0.5",)),
    "fedgs_fmnist": Page(
        "FedGS Table 2 / Figs. 4-5 (Fashion-MNIST, two labels per client) at laptop scale",
        (_fedgs_fmnist("IDL", "{name: idl}"), _fedgs_fmnist("YMF-0.9", "{name: ymf, beta: 0.9}"),
         _fedgs_fmnist("YC-0.9", "{name: yc, beta: 0.9}")),
        ("best_loss", "final_accuracy", "selection_count_var"), Slice("YMF-0.9", 2), counts=("YMF-0.9",)),
    # the check slice stops after 3 rounds: at the tuned η = 1.0 training is chaotic, and another CPU's last-digit
    # difference reaches 7e-4 by round 4 (3e-6 by round 3), past the cross-CPU tolerance (docs/determinism.md)
    "fedsum": Page(
        "FedSUM Fig. 1 / App. H (digits, Dirichlet 0.1) at laptop scale, one η tuned on FedAvg",
        tuple(Setting(n, "experiments/fedsum/digits.yaml", (a,)) for n, a in FEDSUM_P)
        + (Setting("Cases-1-4", "experiments/fedsum/cases.yaml"),),
        ("final_loss", "final_accuracy", "best_accuracy", "tau_max", "tau_avg", "bytes_down", "bytes_up"),
        Slice("P1-m10", 3), curve_x=("round", "cum_bytes_up+cum_bytes_down"),
        tune=Tune(tuple(Setting(f"tune {n}", "experiments/fedsum/tune.yaml", (a,)) for n, a in FEDSUM_P),
                  "train.lr", "final_loss",
                  why="FedSUM App. H: one learning rate, the best of a grid search on FedAvg, for every algorithm")),
    # the check slice stops after 3 rounds: the seed code's task (loss near 50 at the start) amplifies another CPU's
    # last-digit difference to 4e-5 by round 4 and 2e-4 by round 5 (1e-6 by round 3) under ATEN_CPU_CAPABILITY=default
    "adaptive_ou": Page(
        "Adaptive-OU Table 3 / Figs. 4-6 on the seed code's synthetic task at laptop scale",
        (Setting("N=10", "experiments/adaptive_ou/code_synthetic.yaml"),),
        ("tail_accuracy", "tail_accuracy_std", "bytes_up"), Slice("N=10", 3), curve="accuracy",
        percent_of="Full"),
    "adaptive_ou_fedprox": Page(
        "Adaptive-OU on FedProx's Synthetic(0.5, 0.5), N in {10, 20, 50}, at laptop scale",
        tuple(Setting(f"N={n}", "experiments/adaptive_ou/synthetic.yaml", (f"selector.clients_per_round={n}",))
              for n in (10, 20, 50)),
        ("tail_accuracy", "tail_accuracy_std", "bytes_up"), Slice("N=10", 6), curve="accuracy", percent_of="Full"),
    "refl": Page(
        "REFL Figs. 6-9 (Fashion-MNIST, 1,000 learners, trace availability, FLASH devices) at laptop scale",
        (Setting("OC-IID", "experiments/refl/fashion_mnist.yaml"),
         Setting("OC-label", "experiments/refl/fashion_mnist.yaml", (LABEL,)),
         Setting("DL-IID", "experiments/refl/fashion_mnist.yaml", (DL,), skip=("SAFA",)),
         Setting("DL-label", "experiments/refl/fashion_mnist.yaml", (DL, LABEL), skip=("SAFA",))),
        ("final_accuracy", "best_accuracy", "resource_s", "wasted_s", "sim_time_s", "stale_per_round"),
        Slice("DL-label", 4), curve="accuracy", curve_x=("round", "cum_resource_s")),
    "refl_rules": Page(
        "REFL Fig. 10 / Fig. 19: stale-weight rules under both readings and both server steps",
        (Setting("DL-IID", "experiments/refl/rules.yaml"),
         Setting("DL-label", "experiments/refl/rules.yaml", (LABEL,))),
        ("final_accuracy", "best_accuracy", "wasted_s", "stale_per_round"), Slice("DL-label", 3), curve="accuracy"),
    "gluefl": Page(
        "GlueFL Table 2 / Fig. 5 / Fig. 9 (Fashion-MNIST, 1,000 clients, K = 30) at laptop scale",
        (Setting("K=30", "experiments/gluefl/main.yaml"),),
        GLUEFL_METRICS + ("download_share", "compute_share", "upload_share"), Slice("K=30", 2), curve="accuracy",
        curve_x=("round", "cum_bytes_down")),
    "gluefl_k10": Page(
        "GlueFL at K = 10 (S = 40, C = 8): a sensitivity of the main GlueFL page",
        (Setting("K=10", "experiments/gluefl/k10.yaml"),),
        GLUEFL_METRICS + ("download_share", "compute_share", "upload_share"), Slice("K=10", 3), curve="accuracy",
        curve_x=("round", "cum_bytes_down")),
    "gluefl_ablations": Page(
        "GlueFL App. E ablations (on GlueFL with unbiased weights, K = 30) at laptop scale",
        (Setting("App. E", "experiments/gluefl/ablations.yaml"),), GLUEFL_METRICS, Slice("App. E", 3),
        curve="accuracy", curve_x=("round", "cum_bytes_down")),
    "gluefl_sensitivity": Page(
        "GlueFL Figs. 6-8 sensitivities (S, C, q_shr; unbiased weights, K = 30) at laptop scale",
        (Setting("Figs. 6-8", "experiments/gluefl/sensitivity.yaml"),), GLUEFL_METRICS, Slice("Figs. 6-8", 2),
        curve="accuracy", curve_x=("round", "cum_bytes_down")),
    "async": Page(
        "Asynchronous FL (FedAsync, FedBuff) against synchronous FedAvg, SAFA and REFL on REFL's world",
        (Setting("sync + FedBuff", "experiments/async/refl_world.yaml", skip=ASYNC_ONE_AT_A_TIME),
         Setting("FedAsync", "experiments/async/refl_world.yaml", ("rounds=2000", "eval.every=100"),
                 skip=ASYNC_BATCHED)),
        ("final_accuracy", "sim_time_to_target_s", "sim_time_s", "reports_aggregated", "staleness_mean",
         "bytes_up", "bytes_down", "resource_s", "wasted_s"),
        Slice("sync + FedBuff", 3), curve="accuracy", curve_x=("sim_time_s", "cum_resource_s")),
    # FedSUM Fig. 1(b) under P1-P3, and Cases 1-4 over ten seeds and 2,000 rounds, at the η the fedsum page's App. H
    # tuning picks (1.0; passed here, not re-tuned); the check slices stop early for the fedsum page's reason (chaos at
    # η = 1)
    "fedsum_vectors": Page(
        "FedSUM Fig. 1(b): loss against communicated vectors (P1-P3, digits) at the tuned η",
        tuple(Setting(n, "experiments/fedsum/digits.yaml", (a, "train.lr=1.0")) for n, a in FEDSUM_P),
        ("final_loss", "final_accuracy", "bytes_down", "bytes_up"), Slice("P1-m10", 3),
        curve_x=("round", "cum_vectors_up+cum_vectors_down")),
    "fedsum_cases": Page(
        "FedSUM Cases 1-4 (App. H.4) over ten seeds at the tuned η and the paper's 2,000 rounds",
        (Setting("Cases-1-4", "experiments/fedsum/cases.yaml",
                 ("train.lr=1.0", "seeds=[0,1,2,3,4,5,6,7,8,9]", "rounds=2000")),),
        ("final_loss", "final_accuracy", "best_accuracy", "tau_max", "tau_avg"), Slice("Cases-1-4", 3)),
    # FedGS Table 4: the two learned 3DGs under the FedGS page's five availability modes; the oracle is that page's
    # "FedGS a=1"
    "fedgs_graphs": Page(
        "FedGS Table 4 (Synthetic(0.5, 0.5)): FedGS on learned 3DGs at laptop scale",
        tuple(Setting(s.name, "experiments/fedgs/graphs.yaml", s.sets) for s in (
            _fedgs_synthetic("IDL", "{name: idl}"), _fedgs_synthetic("LN-0.5", "{name: ln, beta: 0.5}"),
            _fedgs_synthetic("SLN-0.5", "{name: sln, beta: 0.5}"),
            _fedgs_synthetic("LDF-0.7", "{name: ldf, beta: 0.7}"),
            _fedgs_synthetic("MDF-0.7", "{name: mdf, beta: 0.7}"))),
        ("best_loss", "final_accuracy", "selection_count_var"), Slice("LN-0.5", 4)),
    # the FedGS page's IDL and MDF at the paper's 1,000 rounds (the page runs 500): UniformSample and FedGS (α = 0)
    "fedgs_1000": Page(
        "FedGS Table 2 (Synthetic(0.5, 0.5)) under IDL and MDF at the paper's 1,000 rounds",
        tuple(Setting(f"{s.name}-1000r", s.config, (*s.sets, "rounds=1000"), skip=FEDGS_1000_SKIP) for s in (
            _fedgs_synthetic("IDL", "{name: idl}"), _fedgs_synthetic("MDF-0.7", "{name: mdf, beta: 0.7}"))),
        ("best_loss", "final_accuracy", "selection_count_var"), Slice("MDF-0.7-1000r", 3)),
    "refl_apt": Page(
        "REFL Fig. 8: the Adaptive Participant Target (N_0 = 50, OC, label-limited) under DynAvail and AllAvail, "
        "and at N_0 = 10",
        (Setting("DynAvail", "experiments/refl/apt.yaml"),
         Setting("AllAvail", "experiments/refl/apt.yaml", ("availability={name: always}",)),
         Setting("DynAvail N_0=10", "experiments/refl/apt_small.yaml")),
        ("final_accuracy", "tail_accuracy", "best_accuracy", "resource_s", "wasted_s", "sim_time_s",
         "reports_aggregated"), Slice("DynAvail", 2), curve="accuracy", curve_x=("round", "cum_resource_s")),
    "refl_forecast": Page(
        "REFL §5.5: IPS with a forecaster of the paper's reported accuracy instead of the oracle",
        (Setting("DL-label", "experiments/refl/forecast.yaml", (DL,)),),
        ("final_accuracy", "tail_accuracy", "best_accuracy", "resource_s", "wasted_s", "stale_per_round"),
        Slice("DL-label", 3),
        curve="accuracy", curve_x=("round", "cum_resource_s")),
    "refl_large": Page(
        "REFL Fig. 11 at 10x the population: 10,000 learners, resources without training, accuracy trained",
        (Setting("1k (no train)", "experiments/refl/large.yaml", ("no_train=true", "data.num_clients=1000")),
         Setting("10k (no train)", "experiments/refl/large.yaml", ("no_train=true",)),
         Setting("10k-label (trained)", "experiments/refl/large.yaml", (LABEL,), skip=("SAFA",))),
        ("resource_s", "wasted_s", "reports_aggregated", "sim_time_s", "final_accuracy"),
        Slice("10k-label (trained)", 2), curve="accuracy", curve_x=("round", "cum_resource_s")),
    # issue 39: Adaptive-OU on Shakespeare (Table 3 / Table 4) and its 8-bit compression figure (Fig. 3); the
    # Shakespeare slice runs two variants for 3 rounds (the OU estimate is first used in round 2) to stay short
    "adaptive_ou_shakespeare": Page(
        "Adaptive-OU Table 3 / Table 4 on Shakespeare (next character, N = 10) at laptop scale",
        (Setting("Shakespeare", "experiments/adaptive_ou/shakespeare.yaml"),),
        ("tail_accuracy", "tail_accuracy_std", "final_accuracy", "bytes_up"),
        Slice("Shakespeare", 3, ("Full", "Adaptive-OU")), curve="accuracy", percent_of="Full"),
    "adaptive_ou_8bit": Page(
        "Adaptive-OU Fig. 3 (8-bit uploads) on the seed code's synthetic task and on Shakespeare at laptop scale",
        (Setting("synthetic", "experiments/adaptive_ou/compression.yaml"),
         Setting("Shakespeare", "experiments/adaptive_ou/compression_shakespeare.yaml")),
        ("tail_accuracy", "tail_accuracy_std", "final_accuracy", "bytes_up"), Slice("synthetic", 3),
        curve="accuracy", percent_of="Full"),
    "gluefl_network": Page(
        "GlueFL App. F (over-commitment) and Fig. 9(b, c) (5G and cloud links) at laptop scale",
        tuple(Setting(f"oc={oc}", "experiments/gluefl/over_commit.yaml", (f"round_mode.oc={oc}",))
              for oc in ("1.0", "1.3", "1.5"))
        + (Setting("strategies (oc=1.3)", "experiments/gluefl/oc_strategy.yaml"),
           Setting("5G", "experiments/gluefl/network.yaml"),
           Setting("cloud", "experiments/gluefl/network.yaml", ("devices.env=cloud",))),
        GLUEFL_METRICS + ("bytes_down", "download_time_s", "sim_time_s", "download_share", "compute_share",
                          "upload_share"),
        Slice("oc=1.3", 2), curve="accuracy", curve_x=("round", "cum_bytes_down")),
}


#: Pages whose docs/results/PAGE.md has no page record yet: not regenerated since the experiment files changed
#: (the second reproduction pass). ``--check all`` names them and checks every other page; tests/test_pages.py
#: asserts that exactly these pages lack a record, so take a page off when it is regenerated (and a page that
#: loses its record fails the test until it is regenerated or listed here).
NOT_REGENERATED: tuple[str, ...] = ()


def without_record() -> list[str]:
    """The pages whose docs/results/PAGE.md is missing or has no page record."""
    return [n for n in PAGES if read_record(RESULTS / f"{n}.md") is None]


# ---- provenance ------------------------------------------------------------------------------
def git_commit() -> str:
    """HEAD's short hash, with a note when code or experiment files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "turnout", "experiments", "scripts"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes" if dirty else "")


def _resolved(setting: Setting, extra: tuple[str, ...] = ()) -> list[dict]:
    """The setting's variants as resolved configs, minus what does not change a number (output, runtime, data paths)."""
    from turnout.config.loader import parse_override, read_yaml
    from turnout.sim.composition import expand

    overrides = dict(parse_override(o) for o in (*setting.sets, *extra))
    out = []
    for v in expand(read_yaml(ROOT / setting.config), overrides):
        d = v.as_dict()
        d.pop("output", None), d.pop("runtime", None)
        if isinstance(d.get("data"), dict):
            d["data"].pop("path", None)
        out.append({"variant": v.variant, **d})
    return out


def tuned_sets(tuned: dict) -> tuple[str, ...]:
    return tuple(f"{k}={json.dumps(v)}" for k, v in sorted(tuned.items()))


def config_hash(page: Page, tuned: dict) -> str:
    """sha256 (16 hex digits) of every setting's resolved configs, the tuning grid's included."""
    tree = {}
    for s in page.tune.settings if page.tune else ():
        tree[f"tune/{s.name}"] = _resolved(s)
    for s in page.settings:
        tree[s.name] = [v for v in _resolved(s, tuned_sets(tuned)) if v["variant"] not in s.skip]
    blob = json.dumps(tree, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# ---- running ---------------------------------------------------------------------------------
def _children_cpu_s() -> float:
    """CPU seconds (user + system) used so far by finished child processes: the runs' own work, whatever else
    the machine is doing."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _variant_filter(setting: Setting, extra: tuple[str, ...] = ()) -> list[str]:
    """``--variant`` flags that leave out ``setting.skip`` (none when nothing is skipped)."""
    if not setting.skip:
        return []
    names = [v["variant"] for v in _resolved(setting, extra)]
    return [a for v in names if v not in setting.skip for a in ("--variant", v)]


def run_setting(setting: Setting, folder: Path, jobs: int, extra: tuple[str, ...] = ()) -> None:
    args = [sys.executable, "-m", "turnout", "run", str(ROOT / setting.config), "--quiet", "--jobs", str(jobs),
            "--out", str(folder), *_variant_filter(setting, extra)]
    for s in (*setting.sets, *extra):
        args += ["--set", s]
    log = folder.parent / f"{folder.name}.log"
    t0 = time.time()
    with open(log, "w") as f:
        rc = subprocess.run(args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"setting {setting.name} failed (exit {rc}), see {log}")
    print(f"done: {setting.name} ({(time.time() - t0) / 60:.1f} min)", flush=True)


def choose(page: Page, folder: Path) -> tuple[dict, str]:
    """The tuned value (the grid point with the best mean metric over the tune settings and seeds) and its table."""
    import yaml

    tune = page.tune
    values: dict[str, object] = {}
    per: dict[str, dict[str, list[float]]] = {}
    for s in tune.settings:
        sub = folder / "tune" / s.name
        cfg = yaml.safe_load((sub / "config.yaml").read_text())
        for name, v in cfg["variants"].items():
            node = v
            for part in tune.key.split("."):
                node = node[part]
            values[name] = node
        for r in json.loads((sub / "summary.json").read_text())["runs"]:
            x = r.get(tune.metric)
            bad = x is None or not math.isfinite(float(x)) or r.get("diverged_at_round") is not None
            per.setdefault(r["variant"], {}).setdefault(s.name, []).append(math.inf if bad else float(x))
    means = {v: sum(sum(xs) for xs in cols.values()) / sum(len(xs) for xs in cols.values()) for v, cols in per.items()}
    best = (min if tune.lower_is_better else max)(means, key=lambda v: means[v])
    cols = [s.name for s in tune.settings]
    lines = [f"| {tune.key} | " + " | ".join(cols) + " | mean |", "|---|" + "---|" * (len(cols) + 1)]

    def cell(xs):
        if any(math.isinf(x) for x in xs):
            return f"diverged or no value ({sum(math.isinf(x) for x in xs)}/{len(xs)} seeds)"
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))
        return f"{m:.3f} ± {sd:.3f}"

    for v in sorted(per, key=lambda v: float(values[v])):
        row = [cell(per[v].get(c, [math.inf])) for c in cols]
        mean = "—" if math.isinf(means[v]) else f"{means[v]:.3f}"
        text = f"| {values[v]} | " + " | ".join(row) + f" | {mean} |"
        lines.append(text.replace(f"| {values[v]} |", f"| **{values[v]}** (chosen) |") if v == best else text)
    table = "\n".join(lines) + "\n"
    return {tune.key: values[best]}, table


def run_slice(page: Page, tuned: dict) -> dict[str, dict[str, float]]:
    """The check slice's numbers per variant, run in this process."""
    from turnout.app.cli import main

    setting = next(s for s in page.settings if s.name == page.slice.setting)
    r = page.slice.rounds
    sets = (*setting.sets, *tuned_sets(tuned), f"rounds={r}", "seeds=[0]", f"eval.every={r}", "output.plots=false",
            "output.progress=false", "eval.centralized_baseline=false")
    with tempfile.TemporaryDirectory(prefix="turnout-slice-") as tmp:
        out = Path(tmp) / "run"
        args = ["run", str(ROOT / setting.config), "--quiet", "--out", str(out)]
        for s in sets:
            args += ["--set", s]
        for v in page.slice.variants:
            args += ["--variant", v]
        if not page.slice.variants:
            args += _variant_filter(setting, tuned_sets(tuned))
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(args)
        if rc != 0:
            raise SystemExit(f"the check slice of {setting.name} failed: turnout {' '.join(args)} exited {rc}")
        runs = json.loads((out / "summary.json").read_text())["runs"]
    return {run["variant"]: {m: run.get(m) for m in SLICE_METRICS} for run in runs}


# ---- the page ----------------------------------------------------------------------------------
def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, int) or float(x).is_integer() and abs(x) >= 1000:
        return f"{int(x):,}"
    return f"{x:.6g}"


def slice_section(name: str, page: Page, record: dict) -> str:
    sl = record["slice"]
    head = ("## Check slice\n\n"
            f"`bash scripts/reproduce.sh --check {name}` re-resolves this page's configs (hash above) and re-runs a "
            f"slice of it — setting {sl['setting']}, seed 0, {sl['rounds']} rounds, every variant, evaluated after the "
            "last round — and fails when a number below is no longer what the code produces (integers exactly, "
            f"floats within relative {REL_TOL:g}); `tests/test_pages.py` runs it for every page.\n\n")
    cols = SLICE_METRICS
    lines = ["| variant | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for v, nums in sl["numbers"].items():
        lines.append(f"| {v} | " + " | ".join(_fmt(nums.get(m)) for m in cols) + " |")
    blob = json.dumps(record, indent=1, sort_keys=True)
    return head + "\n".join(lines) + f"\n\n{RECORD_START}\n{blob}\n{RECORD_END}\n"


def render(name: str, page: Page, folder: Path, record: dict, out: Path) -> Path:
    from turnout.app.report import write_report

    notes_file = RESULTS / "notes" / f"{name}.md"
    notes = notes_file.read_text() if notes_file.is_file() else ""
    if page.tune:
        notes += ("\n\n## Tuning: " + page.tune.why + "\n\n"
                  f"FedAvg, {page.tune.metric} (mean ± std over seeds) for each {page.tune.key} of the grid "
                  "(`experiments/fedsum/tune.yaml`); the chosen value is passed to every setting below "
                  f"(`--set {tuned_sets(record['tuned'])[0]}`).\n\n" + record["tune_table"])
    load, cpu = record.get("load"), record.get("cpu_s")
    machine = (f"{os.cpu_count()} CPU cores shared with other jobs (load average {load[0]:.1f} at the start, "
               f"{load[1]:.1f} at the end)") if load else "unrecorded"
    if cpu:
        machine += (f"; the runs used {cpu / 60:.1f} CPU-minutes, i.e. about {cpu / 60 / 2:.0f} minutes of wall-clock "
                    "on an idle 2-core machine")
    provenance = {"commit": record["commit"], "config hash": record["config_hash"], "machine": machine}
    folders = [folder / s.name for s in page.settings]
    write_report(folders, out, list(page.metrics), page.title, f"bash scripts/reproduce.sh {name}",
                 record["elapsed_s"], page.curve, notes, page.percent_of, list(page.counts), page.baseline, None,
                 list(page.curve_x), provenance)
    text = out.read_text()
    out.write_text(text.rstrip("\n") + "\n\n" + slice_section(name, page, record))
    return out


def read_record(path: Path) -> dict | None:
    text = path.read_text() if path.is_file() else ""
    m = re.search(re.escape(RECORD_START) + r"\n(.*?)\n" + re.escape(RECORD_END), text, re.S)
    return json.loads(m.group(1)) if m else None


def make(name: str, jobs: int, folder: Path | None = None, out: Path | None = None) -> dict:
    """Run every setting of page ``name`` and write it; returns the page record."""
    page = PAGES[name]
    folder = folder or RUNS / name
    out = out or RESULTS / f"{name}.md"
    start, load0 = time.time(), os.getloadavg()[0]
    cpu0 = _children_cpu_s()
    commit = git_commit()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tuned, tune_table = {}, ""
    if page.tune:
        (folder / "tune").mkdir()
        for s in page.tune.settings:
            run_setting(s, folder / "tune" / s.name, jobs)
        tuned, tune_table = choose(page, folder)
        print(f"tuned: {tuned}", flush=True)
    for s in page.settings:
        run_setting(s, folder / s.name, jobs, tuned_sets(tuned))
    elapsed = time.time() - start  # the page's runs; the slice below takes seconds
    record = {"page": name, "commit": commit, "config_hash": config_hash(page, tuned), "tuned": tuned,
              "tune_table": tune_table, "elapsed_s": elapsed, "cpu_s": _children_cpu_s() - cpu0,
              "load": [load0, os.getloadavg()[0]],
              "slice": {**asdict(page.slice), "numbers": run_slice(page, tuned)}}
    (folder / "page.json").write_text(json.dumps(record, indent=1))
    render(name, page, folder, record, out)
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} "
          f"({elapsed / 60:.1f} min)", flush=True)
    return record


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, int) or isinstance(b, int):
        return a == b  # bytes and counts: exact on every CPU
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)


def check(name: str, page: Page | None = None, path: Path | None = None) -> list[str]:
    """Why page ``name`` (at ``path``, default docs/results/NAME.md) no longer matches the code (empty: it matches)."""
    page = page or PAGES[name]
    path = path or RESULTS / f"{name}.md"
    record = read_record(path)
    if record is None:
        return [f"{path} has no page record: regenerate it with bash scripts/reproduce.sh {name}"]
    problems = []
    now = config_hash(page, record.get("tuned", {}))
    if now != record["config_hash"]:
        problems.append(f"the resolved configs changed since the page was made (config hash {now}, the page "
                        f"records {record['config_hash']}): regenerate it")
    want = {k: v for k, v in asdict(page.slice).items()}
    got_spec = {k: v for k, v in record["slice"].items() if k != "numbers"}
    if {k: (list(v) if isinstance(v, tuple) else v) for k, v in want.items()} != got_spec:
        problems.append(f"the check slice changed ({want} vs the page's {got_spec}): regenerate the page")
        return problems
    numbers = run_slice(page, record.get("tuned", {}))
    recorded = record["slice"]["numbers"]
    for v in sorted(set(numbers) | set(recorded)):
        if v not in recorded or v not in numbers:
            problems.append(f"variant {v!r} is {'not on the page' if v not in recorded else 'no longer run'}")
            continue
        for m in SLICE_METRICS:
            if not _same(numbers[v].get(m), recorded[v].get(m)):
                problems.append(f"{v}: {m} is {numbers[v].get(m)!r} now, the page records {recorded[v].get(m)!r}")
    return problems


def _tables(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def check_full(name: str, jobs: int) -> list[str]:
    """Re-run page ``name`` completely (in a temporary folder) and compare every table line with the page's."""
    path = RESULTS / f"{name}.md"
    if not path.is_file():
        return [f"{path.relative_to(ROOT)} does not exist"]
    with tempfile.TemporaryDirectory(prefix=f"turnout-page-{name}-") as tmp:
        fresh = Path(tmp) / f"{name}.md"
        make(name, jobs, Path(tmp) / "runs", fresh)
        new, old = _tables(fresh.read_text()), _tables(path.read_text())
    diff = [f"page: {a}\nnow:  {b}" for a, b in zip(old, new) if a != b]
    if len(new) != len(old):
        diff.append(f"the page has {len(old)} table lines, a fresh run {len(new)}")
    return diff


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bash scripts/reproduce.sh", description=__doc__.splitlines()[0])
    p.add_argument("pages", nargs="*", metavar="PAGE", help=f"one of: {', '.join(PAGES)} (with --check: or all)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="re-run each page's check slice and compare")
    mode.add_argument("--report", action="store_true", help="re-write the page from its run folders")
    mode.add_argument("--list", action="store_true", help="list the pages and their settings")
    p.add_argument("--full", action="store_true", help="with --check: re-run the whole page, compare every table")
    p.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", "2")), help="worker processes (env JOBS)")
    args = p.parse_args(argv)
    names = list(PAGES) if args.pages == ["all"] and args.check else args.pages
    if args.list:
        for n, page in PAGES.items():
            print(f"{n}: " + "; ".join(f"{s.name} = {s.config} {' '.join(s.sets)}".strip() for s in page.settings))
        return 0
    unknown = [n for n in names if n not in PAGES]
    if not names or unknown:
        p.error(f"give one or more pages out of: {', '.join(PAGES)}" + (f" (unknown: {', '.join(unknown)})"
                                                                          if unknown else ""))
    if args.full and not args.check:
        p.error("--full goes with --check")
    if args.check:
        failed = 0
        if args.pages == ["all"] and not args.full:  # CI: a page not regenerated yet is named, not failed
            missing = without_record()
            for n in missing:
                print(f"{n}: not regenerated since the experiment files changed; run bash scripts/reproduce.sh {n}",
                      flush=True)
            names = [n for n in names if n not in missing]
        if args.full:
            results = ((n, check_full(n, args.jobs)) for n in names)
        elif args.jobs > 1 and len(names) > 1:  # slices are independent: one worker process each
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"))
            results = zip(names, pool.map(check, names))
        else:
            results = ((n, check(n)) for n in names)
        t0 = time.time()
        for n, problems in results:
            if problems:
                failed += 1
                print(f"STALE {n}: " + "\n  ".join(["", *problems]), flush=True)
            else:
                print(f"ok    {n}", flush=True)
        print(f"{len(names) - failed} of {len(names)} pages match the code ({time.time() - t0:.1f} s)")
        return 1 if failed else 0
    if args.report:
        for n in names:
            folder = RUNS / n
            record = json.loads((folder / "page.json").read_text())
            print(f"wrote {render(n, PAGES[n], folder, record, RESULTS / f'{n}.md').relative_to(ROOT)}")
        return 0
    for n in names:
        make(n, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
