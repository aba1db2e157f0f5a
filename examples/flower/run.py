"""Run the variants of an experiment file as Flower apps on Flower's simulation engine, offline.

    python examples/flower/run.py                        # FedAvg, GlueFL, REFL of experiment.yaml
    python examples/flower/run.py --variants REFL --clock measured --set round_mode.deadline_s=1 --delay 3=2
    python examples/flower/run.py --compare              # also `turnout run` the same file and compare

Each variant is one ``flwr.simulation.run_simulation`` call: a ``ServerApp`` whose main loop is
turnout's round loop (turnout.flower.server_app) and one ``ClientApp`` node per client of the
experiment's dataset (turnout.flower.client_app), node ``partition-id`` holding that client's
training data. Each variant writes a run folder (rounds.csv, clients.csv, cohorts.csv,
summary.json) under ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # offline: Flower must not try to report usage
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # CPU only: keep Ray's GPU notice quiet

HERE = Path(__file__).resolve().parent


def run_variant(raw: dict, overrides: dict, exp, seed: int, out: Path, clock: str, cpus: int,
                delay_s: dict[int, float] | None = None, verbose: bool = False) -> Path:
    """One variant on Flower's simulation engine; returns its run folder."""
    from flwr.simulation import run_simulation

    from turnout.flower import client_app, server_app
    from turnout.flower.clientapp import SimulatedPartition
    from turnout.flower.run import ServerData

    data = exp["data"].cls.build(exp["data"].cfg, seed)
    task = ServerData(tuple(data.input_shape), int(data.num_classes), data.x_server_test, data.y_server_test)
    done: list[Path] = []
    server = server_app(exp, seed, data.num_clients, task, out, clock=clock,
                        on_result=lambda folder, result: done.append(folder))
    client = client_app(SimulatedPartition(raw, exp.variant, seed, overrides, delay_s))
    run_simulation(server, client, num_supernodes=data.num_clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": cpus, "include_dashboard": False,
                                                 "log_to_driver": verbose}})
    if not done:
        raise RuntimeError(f"the ServerApp of {exp.variant} finished without writing {out}")
    return done[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(HERE / "experiment.yaml"))
    p.add_argument("--variants", nargs="*", help="variant names (default: all)")
    p.add_argument("--seed", type=int, help="default: the file's first seed")
    p.add_argument("--clock", default="modelled", choices=["modelled", "measured"],
                   help="modelled: the round mode judges the devices block's seconds (compare with the simulation); "
                        "measured: wall-clock seconds")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, as in turnout run")
    p.add_argument("--out", default="runs/flower-example")
    p.add_argument("--cpus", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                   help="ClientApp worker processes of the simulation engine")
    p.add_argument("--delay", action="append", default=[], metavar="CLIENT=SECONDS",
                   help="make that client's node answer SECONDS late (try the measured clock's deadline)")
    p.add_argument("--compare", action="store_true", help="also run the file with `turnout run` and compare")
    p.add_argument("--verbose", action="store_true", help="show Flower's own log (its notices included)")
    args = p.parse_args(argv)

    from turnout.config.loader import parse_override, read_yaml
    from turnout.core.errors import ConfigError, TurnoutError
    from turnout.flower import check_deployable, require_flower
    from turnout.runs.experiment import check_buildable, prepare
    from turnout.sim.composition import expand

    try:
        raw = read_yaml(args.config)
        overrides = dict(parse_override(o) for o in args.set)
        variants = [v for v in expand(raw, overrides) if not args.variants or v.variant in args.variants]
        if not variants:
            raise TurnoutError(f"no variant named {args.variants} in {args.config}")
        for v in variants:
            check_deployable(v, f"variants[{v.variant}].")
        check_buildable(prepare(variants))  # data, model and cohort size, before any node starts
        require_flower()
        if not args.verbose:
            logging.getLogger("flwr").setLevel(logging.ERROR)
        seed = args.seed if args.seed is not None else variants[0].config.seeds[0]
        delay = {}
        for item in args.delay:
            client, sep, seconds = item.partition("=")
            try:
                delay[int(client)] = float(seconds)
            except ValueError:
                raise ConfigError("--delay", item, "expected CLIENT=SECONDS, e.g. --delay 3=2.5") from None
        out = Path(args.out)
        folders = {v.variant: run_variant(raw, overrides, v, seed, out / v.variant, args.clock, args.cpus, delay,
                                          args.verbose)
                   for v in variants}
        for name, folder in folders.items():
            print(f"{name}: {folder}")
        if args.compare:
            from compare import compare_with_simulation

            print(compare_with_simulation(raw, overrides, variants, seed, folders, out / "simulated"))
    except TurnoutError as exc:
        print(f"turnout: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
