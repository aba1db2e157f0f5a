"""The ``turnout`` command line: ``run`` or ``check`` an experiment, ``list`` the registered components, ``report``.

User mistakes (bad config, missing data, bad arguments) print one line to stderr and exit with
code 2 — never a traceback — and leave no run folder behind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from pathlib import Path

from ..core.errors import ConfigError, ConfigWarning, TurnoutError
from . import bundled, starter  # light: the standard library and core.errors
from .reproduce.command import add_parser as add_reproduce  # light too: the pages' modules load when it runs
from .reproduce.command import run as cmd_reproduce

EXIT_USAGE = 2

_python_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """turnout's own warnings as one line (``turnout: warning: ...``); any other keeps Python's format."""
    if issubclass(category, ConfigWarning):
        print(f"turnout: warning: {message}", file=file or sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


warnings.showwarning = _show_warning


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        self.exit(EXIT_USAGE, f"turnout: error: {message} (see `turnout {' '.join(self.prog.split()[1:])} --help`)\n"
                  if " " in self.prog else f"turnout: error: {message} (see `turnout --help`)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="turnout", description="Federated-learning simulation under realistic client participation.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
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
    _add_plugin_arg(run)
    _add_no_train_arg(run)
    res = sub.add_parser("resume", help="continue interrupted runs from their last checkpoints")
    res.add_argument("resume", type=Path, nargs="+", metavar="DIR", help="run folder(s) (DIR or DIR.partial)")
    res.add_argument("--set", dest="overrides", action="append", default=[], metavar="executor.KEY=VALUE",
                     help="train with another executor from here on (only executor.* keys: e.g. executor.name="
                          "sequential when the Ray cluster the run used is gone); the folder records it")
    res.set_defaults(config=None, out=None, variant=[], seed=[], plugins=[], no_train=False)
    for p_ in (run, res):
        p_.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="units run at once: N > 1 uses N local worker processes (default 1: this process)")
        p_.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local (this machine; see --jobs) or ray (one Ray task per unit; pip install "
                             "'turnout[ray]')")
        p_.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
        p_.add_argument("--retries", type=int, default=2, metavar="K",
                        help="rerun a unit whose worker died up to K times, from its last checkpoint (default 2)")
        p_.add_argument("--quiet", action="store_true", help="no progress bar")
    chk = sub.add_parser("check", help="validate an experiment without running it and print the resolved variants")
    chk.add_argument("config", help="experiment YAML file or bundled experiment name")
    chk.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, as for `turnout run` (repeatable)")
    chk.add_argument("--data", action="store_true",
                     help="also build the datasets and every simulation (slower; catches a model that does not "
                          "fit the data, more clients per round than clients)")
    _add_plugin_arg(chk)
    _add_no_train_arg(chk)
    ls = sub.add_parser("list", help="list every registered component per seam (with a seam: their options)")
    ls.add_argument("seam", nargs="?", default=None,
                    help="show the options of a seam's components, one component's or a block's (e.g. compressor, "
                         "selector.sticky, data.partition.dirichlet, train, eval, loggers), or `experiments`: "
                         "the experiments bundled with turnout")
    _add_plugin_arg(ls)
    rep = sub.add_parser("report", help="a markdown results page (tables + curves) from finished run folders")
    rep.add_argument("folders", nargs="+", type=Path, help="run folders; each becomes a column, named by its folder")
    rep.add_argument("--out", type=Path, required=True, help="markdown file to write (plot goes in OUT_STEM/)")
    rep.add_argument("--metric", dest="metrics", action="append", default=None,
                     help="summary column to tabulate (repeatable; default: best_loss and final_accuracy)")
    rep.add_argument("--title", default="Results", help="page title")
    rep.add_argument("--command", dest="regen_command", default=None,
                     help="the command that regenerates the page (printed on it)")
    rep.add_argument("--elapsed-s", type=float, default=None, help="wall-clock seconds the runs took")
    rep.add_argument("--notes", type=Path, default=None, help="a markdown file inserted above the tables")
    rep.add_argument("--percent-of", default=None, metavar="VARIANT",
                     help="also show byte metrics as a percentage of this variant's (e.g. the full-upload baseline)")
    rep.add_argument("--curve", default="loss", help="rounds.csv column plotted against rounds ('' for none)")
    rep.add_argument("--curve-x", action="append", default=None, metavar="COLUMN",
                     help="x axis of the curve (repeatable, one figure each): round (default) or a rounds.csv column "
                          "such as cum_bytes_down, cum_resource_s, or a sum like cum_bytes_up+cum_bytes_down")
    rep.add_argument("--provenance", action="append", default=None, metavar="KEY=VALUE",
                     help="a fact printed on the page, e.g. commit=abc123 or 'config hash=...' (repeatable)")
    rep.add_argument("--counts", action="append", default=None, metavar="SETTING",
                     help="also draw per-client selection counts for this run folder's name (repeatable)")
    rep.add_argument("--baseline", default=None, metavar="VARIANT",
                     help="variant the paired per-seed differences are taken from (default: the first variant)")
    rep.add_argument("--paired", action="append", default=None, metavar="METRIC",
                     help="summary column to give paired differences for (repeatable; default: final accuracy and "
                          "rounds/time/bytes to target, where tabulated)")
    add_reproduce(sub)
    new = sub.add_parser("new", help="write a starter folder: an experiment file, a plugin module with a "
                                     "selector and an aggregation rule, and a test that runs them")
    new.add_argument("folder", type=Path, help="folder to create (must not exist, or be empty)")
    _add_trace_parser(sub)
    _add_plot_parser(sub)
    return p


def _add_plugin_arg(p) -> None:
    p.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE_OR_FILE",
                   help="import a module or .py file first, so what it registers can be named (repeatable; added "
                        "to the experiment's plugins:)")


def _add_no_train_arg(p) -> None:
    p.add_argument("--no-train", action="store_true",
                   help="system-only what-if: simulate availability, selection, round modes, bytes and time "
                        "without training (sets no_train: true)")


def _with_cli_options(raw: dict, args: argparse.Namespace, overrides: dict) -> tuple[dict, dict]:
    """The experiment with ``--plugin`` files/modules appended to its ``plugins:`` and ``--no-train`` as an
    override (both are then stored with the run, so workers and ``turnout resume`` see them)."""
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..sim import plugins

    if args.plugins:
        given = plugins.anchor(list(args.plugins), Path.cwd())
        plugins.load(given, "--plugin", indexed=False)  # a bad one is named as the flag, before the file's
        listed = raw.get("plugins") or []
        raw = {**raw, "plugins": [*(listed if isinstance(listed, list) else [listed]),
                                  *(p for p in given if p not in listed)]}
    if args.no_train:
        overrides = {**overrides, "no_train": True}
    return raw, overrides


def cmd_report(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..core.metrics import SUMMARY_KEYS
    from .report import write_report

    metrics = args.metrics or ["best_loss", "final_accuracy"]
    for flag, chosen in (("--metric", metrics), ("--paired", args.paired or [])):
        for m in chosen:
            if m not in SUMMARY_KEYS:
                raise ConfigError(flag, m, f"choose from: {', '.join(SUMMARY_KEYS)}")
    notes = None
    if args.notes is not None:
        if not args.notes.is_file():
            raise ConfigError("--notes", str(args.notes), "no such file")
        notes = args.notes.read_text()
    provenance = {}
    for item in args.provenance or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--provenance", item, "expected KEY=VALUE")
        provenance[key] = value
    out = write_report(args.folders, args.out, metrics, args.title, args.regen_command, args.elapsed_s,
                       args.curve or None, notes, args.percent_of, args.counts, args.baseline, args.paired,
                       args.curve_x, provenance)
    print(f"wrote {out}")
    return 0


def _add_trace_parser(sub) -> None:
    trace = sub.add_parser("trace", help="convert or generate client system traces")
    tsub = trace.add_subparsers(dest="trace_command", required=True, parser_class=_Parser)
    imp = tsub.add_parser("import", help="convert a FedScale pickle once into turnout's safe format")
    imp.add_argument("file", type=Path, help="FedScale client_behave_trace or client_device_capacity pickle")
    imp.add_argument("--out", type=Path, required=True,
                     help="output: .npz availability trace (behavior) or .csv device profiles (capacity)")
    imp.add_argument("--kind", choices=("behavior", "capacity"), default="behavior",
                     help="which FedScale file it is (default: behavior)")
    imp.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    gen = tsub.add_parser("generate", help="generate a FedScale-schema synthetic availability trace")
    gen.add_argument("--clients", type=int, required=True, help="number of client traces")
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument("--out", type=Path, required=True, help="output .npz trace")
    gen.add_argument("--days", type=int, default=6, help="trace period in days (default 6, FedScale's)")
    gen.add_argument("--calibration", default=None, metavar="FILE",
                     help="Stunner onlinePercentDist.out to calibrate to (default: built-in summary)")
    gen.add_argument("--force", action="store_true", help="overwrite --out if it exists")


def _add_plot_parser(sub) -> None:
    plot = sub.add_parser("plot", help="draw a picture of part of the simulated world")
    psub = plot.add_subparsers(dest="plot_command", required=True, parser_class=_Parser)
    av = psub.add_parser("availability", help="clients × rounds on/off picture of CONFIG's availability model")
    av.add_argument("config", help="experiment YAML file (its data and availability blocks are used)")
    av.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value (repeatable)")
    av.add_argument("--out", type=Path, required=True, help="PNG file to write")
    av.add_argument("--rounds", type=int, default=100, help="rounds to draw (default 100)")
    av.add_argument("--clients", type=int, default=100, help="clients to draw, the first ones (default 100)")
    av.add_argument("--round-seconds", type=float, default=3600.0,
                    help="simulated seconds between rounds, for time-driven models such as traces (default 3600)")
    av.add_argument("--force", action="store_true", help="overwrite --out if it exists")


def cmd_plot(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..config.limits import MAX_CLIENTS, MAX_ROUNDS, MAX_SECONDS
    from ..recorders.plots import availability_gallery
    from ..runs.experiment import prepare
    from ..sim.composition import load_experiment

    for name, most in (("rounds", MAX_ROUNDS), ("clients", MAX_CLIENTS)):
        if not 1 <= getattr(args, name) <= most:
            raise ConfigError(f"--{name}", getattr(args, name), f"must be between 1 and {most:,}")
    if not 0 < args.round_seconds <= MAX_SECONDS:
        raise ConfigError("--round-seconds", args.round_seconds, f"must be > 0 and <= {MAX_SECONDS:g}")
    if args.out.suffix.lower() != ".png":
        raise ConfigError("--out", str(args.out), "must be a .png file")
    _check_out(args.out, args.force)
    exp = load_experiment(args.config, args.overrides)[0]
    seed = exp.config.seeds[0]
    data = prepare([exp]).dataset_for(exp, seed)
    availability_gallery(exp, data, seed, args.rounds, args.round_seconds, args.clients, args.out)
    print(f"wrote {args.out}")
    return 0


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise ConfigError("--out", str(out), "already exists; choose another path or add --force")
    if out.exists() and out.is_dir():
        raise ConfigError("--out", str(out), "is a directory; give a file path")


def cmd_trace(args: argparse.Namespace) -> int:
    if args.trace_command == "import":
        # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
        from ..traces import fedscale
        from ..traces.format import save_trace

        _check_out(args.out, args.force)
        if args.kind == "behavior":
            report = fedscale.ImportReport()
            trace = fedscale.import_fedscale_behavior(args.file, report)
            save_trace(args.out, trace)
            print(f"wrote {args.out}: {report.summary()}, period {_periods(trace.period_s)}")
        else:
            # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
            from ..devices.fedscale import write_capacity_csv

            table = fedscale.import_fedscale_capacity(args.file)
            write_capacity_csv(args.out, table)
            print(f"wrote {args.out}: {len(table)} device profiles"
                  + (" (with dl_kbps/ul_kbps)" if table.has_links else ""))
        return 0
    from pydantic import ValidationError

    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..config.components import config_error_from_pydantic
    from ..config.limits import MAX_SEED, MAX_TRACES
    from ..traces.format import save_trace
    from ..traces.generate import GeneratorConfig, generate_trace

    if not 1 <= args.clients <= MAX_TRACES:
        raise ConfigError("--clients", args.clients, f"must be between 1 and {MAX_TRACES:,}")
    if not 0 <= args.seed <= MAX_SEED:
        raise ConfigError("--seed", args.seed, f"must be between 0 and {MAX_SEED} (2^32 - 1)")
    try:
        cfg = GeneratorConfig(days=args.days, calibration_path=args.calibration)
    except ValidationError as exc:
        err = config_error_from_pydantic(exc, "")
        flag = {"days": "--days", "calibration_path": "--calibration"}.get(err.key, err.key)
        raise ConfigError(flag, err.value, err.allowed) from None
    _check_out(args.out, args.force)
    trace = generate_trace(args.clients, args.seed, cfg)
    save_trace(args.out, trace)
    print(f"wrote {args.out}: {trace.num_traces} traces, {trace.num_intervals} intervals, "
          f"period {_periods(trace.period_s)}, mean online {trace.online_seconds().mean() / trace.period_s.mean():.1%}")
    return 0


def _periods(period_s) -> str:
    lo, hi = float(period_s.min()), float(period_s.max())
    return f"{lo:g} s" if lo == hi else f"{lo:g}-{hi:g} s"


def _find_listing(what: str) -> tuple[str, str]:
    """``SEAM``, ``SEAM.NAME`` (longest seam first: ``data.partition.dirichlet``) or a block → (key, component)."""
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..sim.catalogue import BLOCKS, listed_registries

    regs = listed_registries()
    if what in regs or what in BLOCKS:
        return what, ""
    for seam in sorted(regs, key=len, reverse=True):
        if what.startswith(seam + "."):
            name = what[len(seam) + 1:]
            regs[seam].get(name, "list SEAM.NAME")  # unknown component: one-line error naming the choices
            return seam, name
    raise ConfigError("list SEAM", what, f"choose one of: {', '.join([*regs, *BLOCKS])} (or SEAM.NAME)")


def cmd_list(seam: str | None = None, plugin_specs: list[str] = ()) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..config.options import option_lines
    from ..core.registry import describe
    from ..sim import plugins
    from ..sim.catalogue import BLOCKS, listed_registries

    plugins.load(plugins.anchor(list(plugin_specs), Path.cwd()), "--plugin", indexed=False)
    key, only = _find_listing(seam) if seam is not None else ("", "")
    regs = {k: r for k, r in listed_registries().items() if seam is None or k == key}
    for name_of_seam, reg in regs.items():
        print(f"{name_of_seam}  ({reg.doc})")
        for name, cls in reg:
            if only and name != only:
                continue
            source = plugins.origin(cls)
            print(f"  {name:<22} {describe(cls)}" + (f"  [plugin {source}]" if source else ""))
            if seam is not None:
                for line in option_lines(cls.Config):
                    print(f"      {line}")
    blocks = {k: m for k, m in BLOCKS.items() if seam is None or k == key}
    if seam is None and blocks:
        print("blocks without components (options at the top of the block, e.g. train: {lr: 0.1})")
    for name, model in blocks.items():
        print(f"  {name:<22} {describe(model)}")
        for line in option_lines(model):
            print(f"      {line}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..config.loader import parse_override, read_yaml
    from ..sim.composition import expand
    from .check import check, summary_lines

    raw, overrides = _with_cli_options(read_yaml(bundled.resolve(args.config)), args,
                                       dict(parse_override(o) for o in args.overrides))
    variants = expand(raw, overrides)
    check(variants, build_data=args.data)
    print("\n".join(summary_lines(args.config, variants, args.data)))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..runs.experiment import make_backend, open_experiment, run_opened
    from ..runs.progress import ProgressBar
    from ..runs.sweep import units_in
    from ..sim.composition import expand

    if args.jobs < 1:
        raise ConfigError("--jobs", args.jobs, "must be >= 1")
    if args.retries < 0:
        raise ConfigError("--retries", args.retries, "must be >= 0")
    backend = make_backend(args.backend, args.jobs, args.retries, args.address)
    specs = _run_specs(args, expand)  # validated, outputs checked: nothing is created before this succeeds
    executor = _resume_executor(args) if args.config is None else None
    _BOUNDARY.folder = specs[0][2] or specs[0][3]
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
    with _stop_on_signals() as stop, ProgressBar(disable=quiet) as bar:
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
    from ..config.loader import parse_override  # lazy: `turnout --help` and `list` start without the config stack

    overrides = dict(parse_override(o) for o in args.overrides)
    for key in overrides:
        if key != "executor" and not key.startswith("executor."):
            raise ConfigError("--set", key, "a resumed run keeps its stored config; only executor.* may change (how "
                                            "clients are trained, e.g. executor.name=sequential)")
    return overrides


def _run_specs(args: argparse.Namespace, expand) -> list[tuple]:
    """(variants, experiment, out, resume) per experiment of the command line, validated before anything runs."""
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..config.loader import parse_override, read_yaml
    from ..runs.experiment import expand_experiment
    from ..runs.rundir import check_out, default_out_dir

    if args.config is None:  # `turnout resume DIR...`: each folder's stored experiment is the source of truth
        return [(None, None, None, d) for d in args.resume]
    if args.resume is not None and len(args.config) > 1:
        raise ConfigError("--resume", str(args.resume), "resumes one run folder; give one CONFIG (or use "
                                                        "`turnout resume DIR...` for several)")
    overrides = dict(parse_override(o) for o in args.overrides)
    specs, names = [], {}
    for path in args.config:
        raw, with_flags = _with_cli_options(read_yaml(bundled.resolve(path)), args, overrides)
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


class _Boundary:
    """Where the run being executed lives, for the traceback log of an unexpected error."""

    folder: Path | None = None


_BOUNDARY = _Boundary()


@contextlib.contextmanager
def _stop_on_signals():
    """SIGINT/SIGTERM: checkpoint after the current round, then exit 130/143; a second signal stops at once."""
    import signal

    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..runs.unit import StopFlag

    stop = StopFlag()

    def handler(signum, frame):
        name = signal.Signals(signum).name
        if stop.requested:
            raise KeyboardInterrupt
        stop.signal = signum
        stop.request(f"interrupted by {name}")
        print(f"turnout: {name}: finishing the current round, then saving a checkpoint "
              "(send it again to stop at once)", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _log_traceback(exc: BaseException) -> Path:
    """Write the full traceback to the run folder's logs/ (or a temp file) and return the path."""
    import tempfile
    import time
    import traceback

    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..runs.rundir import partial_of

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    folder = _BOUNDARY.folder
    candidates = []
    if folder is not None:
        folder = Path(folder)
        candidates = [folder if folder.name.endswith(".partial") else partial_of(folder), folder]
    for base in candidates:
        if base.is_dir():
            path = base / "logs" / f"error-{time.strftime('%Y%m%d-%H%M%S')}.log"
            try:
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
                return path
            except OSError:
                break
    fd, name = tempfile.mkstemp(prefix="turnout-error-", suffix=".log")
    with open(fd, "w") as f:
        f.write(text)
    return Path(name)


#: exit status when the reader of our output went away (128 + SIGPIPE, as a shell reports a command killed by it)
EXIT_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """The command line. Output piped into ``head``, ``less`` or ``grep -m1`` ends quietly when the reader goes
    away: no message, exit 141, whatever the command (argparse's ``--help`` included)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_PIPE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (a test's capture): nothing is flushed to a pipe
        pass


def _main(argv: list[str] | None) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..runs.experiment import RunInterrupted

    args = _parser().parse_args(argv)
    try:
        if args.command == "list" and args.seam == "experiments":
            print("\n".join(bundled.listing_lines()))
            return 0
        if args.command == "list":
            return cmd_list(args.seam, args.plugins)
        if args.command == "new":
            return starter.write_starter(args.folder)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "trace":
            return cmd_trace(args)
        if args.command == "plot":
            return cmd_plot(args)
        if args.command == "check":
            return cmd_check(args)
        if args.command == "reproduce":
            return cmd_reproduce(args)
        return cmd_run(args)
    except RunInterrupted as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 128 + int(exc.stop_signal) if exc.stop_signal is not None else 130  # 130 SIGINT, 143 SIGTERM
    except TurnoutError as exc:
        print(f"turnout: error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # the reader went away: main ends quietly
    except KeyboardInterrupt:
        where = f"; the last checkpoint is in {_BOUNDARY.folder}" if _BOUNDARY.folder else ""
        print(f"turnout: stopped at once{where}", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or an environment failure: one line here, the traceback in a log
        log = _log_traceback(exc)
        print(f"turnout: error: unexpected {type(exc).__name__}: {_one_line(str(exc))} (full traceback: {log})",
              file=sys.stderr)
        return 1


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
