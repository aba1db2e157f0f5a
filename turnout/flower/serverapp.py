"""A Flower ``ServerApp`` whose main loop is turnout's round loop on the connected nodes.

``main(grid, context)``: lock the output folder, register the nodes (:class:`FlowerLink.register
<turnout.flower.transport.FlowerLink.register>`), run every round (:class:`~turnout.flower.run.FlowerRun`),
write the simulator's tables (:func:`~turnout.flower.tables.write_run`). Everything is checked
before a node is contacted: the configuration (:func:`~turnout.flower.deployable.check_deployable`),
the clock and the output folder.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import torch

from ..config.loader import ResolvedExperiment
from ..core.errors import ConfigError
from ..runs.rundir import SCRATCH, RunFolder, check_out
from ..sim.engine import RunResult
from .clock import CLOCKS, Clock
from .deployable import check_deployable
from .extra import FLOWER_VERSION, require_flower
from .run import FlowerRun, ServerData
from .tables import write_run
from .transport import FlowerLink


def server_app(exp: ResolvedExperiment, seed: int, num_clients: int, task: ServerData, out: str | Path,
               clock: Clock = "measured", registration_timeout_s: float = 120.0, round_timeout_s: float = 600.0,
               ttl_s: float | None = None, poll_s: float = 0.01,
               on_result: Callable[[Path, RunResult], None] | None = None):
    """The ``ServerApp`` running ``exp`` (one variant) on seed ``seed`` with ``num_clients`` registered nodes.

    ``task`` gives the model's input shape and classes and the server's test set (its ``n_train`` is
    filled in from the nodes' registration). The run folder goes to ``out``; ``on_result(folder,
    result)`` is called when it is complete.
    """
    flwr = require_flower()
    from flwr.serverapp import ServerApp

    check_deployable(exp)
    if clock not in CLOCKS:
        raise ConfigError("clock", clock, f"use one of: {', '.join(CLOCKS)}")
    check_out(Path(out))
    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        torch.set_num_threads(exp.config.runtime.torch_threads)
        folder = RunFolder.create(Path(out))
        try:
            link = FlowerLink(grid, dim=0, ttl_s=ttl_s, poll_s=poll_s)
            n_train = link.register(num_clients, registration_timeout_s)
            data = dataclasses.replace(task, n_train=n_train)
            run = FlowerRun(exp, data, seed, link, clock=clock, round_timeout_s=round_timeout_s, poll_s=poll_s,
                            scratch_dir=folder.path / SCRATCH)
            link.dim = run.model.dim
            result = run.run()
        except BaseException:
            folder.discard()
            raise
        deployment = {"flwr": getattr(flwr, "__version__", FLOWER_VERSION), "clock": clock, "nodes": num_clients,
                      "round_timeout_s": round_timeout_s}
        done = write_run(folder, exp, seed, result, run.cohort_log, deployment)
        if on_result is not None:
            on_result(done, result)

    return app


__all__ = ["server_app"]
