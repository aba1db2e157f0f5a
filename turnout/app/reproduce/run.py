"""Running a page: its tuning grid, its settings, and its check slice, each as ``turnout run`` in a child process.

Settings run one after another, each ``python -m turnout run CONFIG --set ... --jobs N`` into
``FOLDER/SETTING`` (results do not depend on ``N``). A child process, not this one, so a page's runs are what a
user's command gives, and so the check slice can run under another CPU's kernels (:mod:`.horizon`), whose
variables only take effect in a fresh process. A check runs its slice in the checking process instead
(``here``), through the same validation and run folder as ``turnout run``, under that process's kernels: checking
every page then pays torch's import and a run's start once per worker, not once per page.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ...core.errors import TurnoutError
from .spec import Page, Setting

#: seconds between a running setting's calls of ``tick``
TICK_S = 30.0

#: what a check slice records per variant (from the run's summary)
SLICE_METRICS = ("final_loss", "final_accuracy", "bytes_up", "bytes_down", "sim_time_s", "resource_s")


def package_parent() -> Path:
    """The folder holding this ``turnout`` package: a child process imports the same code from it."""
    return Path(__file__).resolve().parents[3]


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``extra``, with this turnout first on the import path."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(package_parent()), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def resolved(setting: Setting, extra: tuple[str, ...] = ()) -> list[dict]:
    """The setting's variants as resolved configs, minus what does not change a number (output, runtime, data
    paths)."""
    # imported here: resolving configs loads every component's registry (torch among them)
    from ...config.loader import parse_override, read_yaml
    from ...sim.composition import expand

    overrides = dict(parse_override(o) for o in (*setting.sets, *extra))
    out = []
    for v in expand(read_yaml(setting.path), overrides):
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
        tree[f"tune/{s.name}"] = resolved(s)
    for s in page.settings:
        tree[s.name] = [v for v in resolved(s, tuned_sets(tuned)) if v["variant"] not in s.skip]
    blob = json.dumps(tree, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def children_cpu_s() -> float:
    """CPU seconds used so far by finished child processes: the runs' own work, whatever else the machine does."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def variant_filter(setting: Setting, extra: tuple[str, ...] = ()) -> list[str]:
    """``--variant`` flags that leave out ``setting.skip`` (none when nothing is skipped)."""
    if not setting.skip:
        return []
    names = [v["variant"] for v in resolved(setting, extra)]
    return [a for v in names if v not in setting.skip for a in ("--variant", v)]


def run_command(setting: Setting, out: Path, sets: tuple[str, ...], flags: list[str]) -> list[str]:
    args = [sys.executable, "-m", "turnout", "run", str(setting.path), "--quiet", "--out", str(out), *flags]
    for s in sets:
        args += ["--set", s]
    return args


def setting_state(folder: Path) -> str:
    """``done`` (a finished run folder), ``partial`` (an interrupted one: ``FOLDER.partial``) or ``new``."""
    from ...runs.rundir import partial_of  # imported here: run folders load only where a page runs

    if (folder / "summary.json").is_file():
        return "done"
    return "partial" if partial_of(folder).is_dir() else "new"


def run_setting(setting: Setting, folder: Path, jobs: int, extra: tuple[str, ...] = (),
                tick: Callable[[], object] | None = None, page: str = "PAGE") -> None:
    """Run one setting into ``folder`` (its log beside it), or continue it where an interrupted page left
    ``FOLDER.partial`` (``turnout run --resume``, which refuses configs that no longer resolve to what it started
    with); a failure stops the page with the log's name.

    ``tick`` is called every half minute while the run goes on (the page saves its time spent). SIGINT or SIGTERM
    reaches the run, which checkpoints after its current round; the page then stops, saying how to continue."""
    resume = setting_state(folder) == "partial"
    args = run_command(setting, folder, (*setting.sets, *extra),
                       ["--jobs", str(jobs), *variant_filter(setting, extra)])
    if resume:
        args[args.index("--out")] = "--resume"
    log = folder.parent / f"{folder.name}.log"
    t0 = time.time()
    stopped: list[int] = []
    with open(log, "a" if resume else "w") as f:
        # a session of its own: Ctrl-C reaches the page alone, which passes it on once (twice would stop the run
        # at once, without its checkpoint)
        child = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=child_environment(),
                                 start_new_session=True)

        def forward(signum, frame):
            stopped.append(signum)
            child.send_signal(signum)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                try:
                    rc = child.wait(timeout=TICK_S)
                    break
                except subprocess.TimeoutExpired:
                    if tick:
                        tick()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
    if stopped:
        raise SystemExit(f"setting {setting.name} stopped by {signal.Signals(stopped[0]).name} (its run "
                         f"checkpointed, see {log}): continue with `turnout reproduce {page} --resume`")
    if rc != 0:
        raise SystemExit(f"setting {setting.name} failed (exit {rc}), see {log}")
    print(f"done: {setting.name}{' (resumed)' if resume else ''} ({(time.time() - t0) / 60:.1f} min)", flush=True)


def slice_sets(page: Page, tuned: dict, rounds: int, every: int = 1) -> tuple[str, ...]:
    """The overrides of the check slice: seed 0, ``rounds`` rounds, evaluated every ``every`` rounds (after every
    round when its horizon is measured, so every row is compared; only after the last when it is checked:
    evaluation reads the model and changes no number of training)."""
    setting = page.setting(page.slice.setting)
    return (*setting.sets, *tuned_sets(tuned), f"rounds={rounds}", "seeds=[0]", f"eval.every={every}",
            "output.plots=false", "output.progress=false", "eval.centralized_baseline=false")


def run_slice(page: Page, tuned: dict, rounds: int, out: Path, env: dict[str, str] | None = None,
              every: int = 1, here: bool = False) -> Path:
    """Run the check slice for ``rounds`` rounds into ``out``: in a child process (under ``env``'s kernels), or
    in this process when ``here``."""
    setting = page.setting(page.slice.setting)
    flags = [a for v in page.slice.variants for a in ("--variant", v)] or variant_filter(setting, tuned_sets(tuned))
    sets = slice_sets(page, tuned, rounds, every)
    if here:
        if env:
            raise ValueError("a slice under another CPU's kernels runs in a child process")
        try:
            _run_here(setting, sets, flags[1::2], out)
        except TurnoutError as e:
            raise SliceFailed(f"the check slice of {page.name} ({setting.name}) failed: turnout: error: "
                              f"{' '.join(str(e).split())}") from None
        return out
    res = subprocess.run(run_command(setting, out, sets, flags), capture_output=True, text=True,
                         env=child_environment(env))
    if res.returncode != 0:
        err = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SliceFailed(f"the check slice of {page.name} ({setting.name}) failed: {err}")
    return out


def _run_here(setting: Setting, sets: tuple[str, ...], only: list[str], out: Path) -> None:
    """``turnout run CONFIG --set ... [--variant ...] --out OUT`` in this process (the Python API's run)."""
    from ..api import run  # imported here: a run loads every component's registry (torch among them)

    run(setting.path, list(sets), out=out, quiet=True, variants=only)


def slice_numbers(out: Path) -> dict[str, dict]:
    """The slice's numbers per variant, from its ``summary.json``."""
    runs = json.loads((out / "summary.json").read_text())["runs"]
    return {run["variant"]: {m: run.get(m) for m in SLICE_METRICS} for run in runs}


class SliceFailed(Exception):
    """A check slice's run exited with an error (its last line says why); the page is reported as not checked."""


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
    return {tune.key: values[best]}, "\n".join(lines) + "\n"
