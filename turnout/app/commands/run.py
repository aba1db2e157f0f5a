"""``turnout run CONFIG...`` and ``turnout resume DIR...``: run experiments (every variant × seed) into run folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...core.errors import ConfigError
from .. import bundled
from ..process import BOUNDARY, stop_on_signals
from .options import add_no_train_arg, add_plugin_arg, with_cli_options


def add_run_parser(sub) -> None:
    run = sub.add_parser("run", help="run experiments (all variants × seeds) and write a run folder each")
    run.add_argument("config", nargs="+", help="experiment YAML file(s) or bundled experiment names (`turnout list "
                                               "experiments`); several run as one sweep")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set selector.clients_per_round=20 (repeatable)")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=None,
                       help="new run folder (default: runs/<name>-<timestamp>-<random>); must not exist; with "
                            "several files, a parent folder holding one run folder per experiment")
    where.add_argument("--resume", type=Path, default=None, metavar="DIR",
                       help="continue the unfinished run in DIR "
                            "(CONFIG and --set must resolve to what it started with)")
    run.add_argument("--variant", action="append", default=[], metavar="NAME",
                     help="run only this variant (repeatable)")
    run.add_argument("--seed", action="append", default=[], type=int, metavar="S",
                     help="run only this seed of the experiment's seeds (repeatable)")
    add_plugin_arg(run)
    add_no_train_arg(run)
    _add_execution_args(run)


def add_resume_parser(sub) -> None:
    res = sub.add_parser("resume", help="continue interrupted runs from their last checkpoints")
    res.add_argument("resume", type=Path, nargs="+", metavar="DIR", help="run folder(s) (DIR or DIR.partial)")
    res.add_argument("--set", dest="overrides", action="append", default=[], metavar="executor.KEY=VALUE",
                     help="train with another executor from here on (only executor.* keys: e.g. executor.name="
                          "sequential when the Ray cluster the run used is gone); the folder records it")
    res.set_defaults(config=None, out=None, variant=[], seed=[], plugins=[], no_train=False)
    _add_execution_args(res)


def _add_execution_args(p) -> None:
    """Where and how the units run: the same for a new run and a resumed one."""
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="units run at once: N > 1 uses N local worker processes (default 1: this process)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local (this machine; see --jobs) or ray (one Ray task per unit; pip install "
                        "'turnout[ray]')")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--retries", type=int, default=2, metavar="K",
                   help="rerun a unit whose worker died up to K times, from its last checkpoint (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...runs.experiment import make_backend, open_experiment, run_opened
    from ...runs.progress import ProgressBar
    from ...runs.sweep import units_in
    from ...sim.composition import expand

    if args.jobs < 1:
        raise ConfigError("--jobs", args.jobs, "must be >= 1")
    if args.retries < 0:
        raise ConfigError("--retries", args.retries, "must be >= 0")
    backend = make_backend(args.backend, args.jobs, args.retries, args.address)
    specs = _run_specs(args, expand)  # validated, outputs checked: nothing is created before this succeeds
    executor = _resume_executor(args) if args.config is None else None
    BOUNDARY.folder = specs[0][2] or specs[0][3]
    backend.warm(sum(units_in(v) for v, *_ in specs if v))  # workers start while the datasets are built
    opened = []
    try:
        for variants, experiment, out, resume in specs:
            opened.append(open_experiment(variants, experiment, out=out, resume=resume, expand=expand,
                                          executor=executor))
    except BaseException:
        backend.close()
        for o in opened:  # nothing has run yet: new folders go, resumed ones are released untouched
            o.folder.discard() if o.created else o.folder.release()
        raise
    quiet = args.quiet or not opened[0].plan.variants[0].config.output.progress
    with stop_on_signals() as stop, ProgressBar(disable=quiet) as bar:
        results = run_opened(opened, backend, bar, stop)
    for folder, summary in results:
        if len(results) > 1:
            print(f"{summary['name']}:")
        for line in outcome_lines(summary):
            print(line)
        if summary.get("system_only"):
            print(f"note: {summary['system_only']}")
        print(f"run folder: {folder}")
    return 0


def _resume_executor(args: argparse.Namespace) -> dict:
    """``turnout resume DIR --set executor.KEY=VALUE``: the executor overrides (nothing else may change)."""
    from ...config.loader import parse_override  # lazy: `turnout --help` and `list` start without the config stack

    overrides = dict(parse_override(o) for o in args.overrides)
    for key in overrides:
        if key != "executor" and not key.startswith("executor."):
            raise ConfigError("--set", key, "a resumed run keeps its stored config; only executor.* may change (how "
                                            "clients are trained, e.g. executor.name=sequential)")
    return overrides


def _run_specs(args: argparse.Namespace, expand) -> list[tuple]:
    """(variants, experiment, out, resume) per experiment of the command line, validated before anything runs."""
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...config.loader import parse_override, read_yaml
    from ...runs.experiment import expand_experiment
    from ...runs.rundir import check_out, default_out_dir

    if args.config is None:  # `turnout resume DIR...`: each folder's stored experiment is the source of truth
        return [(None, None, None, d) for d in args.resume]
    if args.resume is not None and len(args.config) > 1:
        raise ConfigError("--resume", str(args.resume), "resumes one run folder; give one CONFIG (or use "
                                                        "`turnout resume DIR...` for several)")
    overrides = dict(parse_override(o) for o in args.overrides)
    specs, names = [], {}
    for path in args.config:
        raw, with_flags = with_cli_options(read_yaml(bundled.resolve(path)), args, overrides)
        experiment = {"raw": raw, "overrides": dict(with_flags), "only": list(args.variant) or None}
        variants = expand_experiment(experiment, expand)
        if args.seed:
            seeds = variants[0].config.seeds
            bad = [s for s in args.seed if s not in seeds]
            if bad:
                raise ConfigError("--seed", bad[0], f"not one of the experiment's seeds {seeds}")
            experiment["overrides"]["seeds"] = [s for s in seeds if s in args.seed]
            variants = expand_experiment(experiment, expand)
        name = variants[0].config.name
        if args.resume is not None:
            specs.append((variants, experiment, None, args.resume))
            continue
        if args.out is None:
            out = default_out_dir(name)
        elif len(args.config) == 1:
            out = args.out
        else:  # several experiments: one run folder each under --out
            names[name] = names.get(name, 0) + 1
            out = args.out / (name if names[name] == 1 else f"{name}-{names[name]}")
        check_out(out)  # a taken or impossible --out fails before any dataset is built
        specs.append((variants, experiment, out, None))
    return specs


def outcome_lines(summary: dict) -> list[str]:
    """One line per variant: mean ± std over its seeds of the headline numbers (divergence said so)."""
    import numpy as np

    out = []
    for row in summary["variants"]:
        runs = [r for r in summary["runs"] if r["variant"] == row["variant"]]
        n = len(runs)
        acc = np.array([r.get("final_accuracy") for r in runs], dtype=float)  # None (from JSON) → NaN
        acc = acc[~np.isnan(acc)]
        seeds = f"{n} seed{'s' if n != 1 else ''}"
        if any(r.get("system_only") for r in runs):
            text = f"system-only, no training ({seeds})"
        elif len(acc):
            spread = f" ± {acc.std():.4f}" if len(acc) > 1 else ""
            over = f"mean over {seeds}" if len(acc) == n else f"mean over {len(acc)} of {seeds}"
            text = f"final accuracy {acc.mean():.4f}{spread} ({over})"
        else:
            text = "final accuracy —"
        diverged = [r["diverged_at_round"] for r in runs if r.get("diverged_at_round") is not None]
        if diverged:
            text += f"; diverged in {len(diverged)} of {seeds} (at round {', '.join(map(str, diverged))})"
        central = row.get("centralized_accuracy")
        extra = "" if central is None or central != central else f"  centralized {central:.4f}"  # NaN: not computed
        out.append(f"{row['variant']:<24} {text}  bytes down {row['bytes_down']:.3g}  bytes up {row['bytes_up']:.3g}"
                   f"  sim time {row['sim_time_s']:.1f}s{extra}")
    return out
