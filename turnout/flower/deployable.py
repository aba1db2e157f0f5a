"""Refuse, before any node is contacted, a configuration that only the simulator can run.

Each component class declares what it would need of the simulated world
(:meth:`~turnout.core.capabilities.Deployable.needs_simulator`), so this module asks the classes of the
configured components and never a component's name. Two more things cannot cross to real
clients: a server-side evaluation of every client's local test data, and a compressor encoding
an upload that the server derives itself (rules whose upload is not a model delta run their
``client_update`` on the server, from the parameters the device reports).
"""

from __future__ import annotations

from ..config.loader import ResolvedExperiment
from ..core.capabilities import UploadKind
from ..core.errors import ConfigError

#: The seams whose components run in a deployment; availability, devices, data and executor are the
#: simulated world, which real nodes replace.
DEPLOYED_SEAMS = ("selector", "algorithm", "compressor", "round_mode", "privacy", "secure_aggregation")


def derives_upload(exp: ResolvedExperiment) -> bool:
    """Whether the server computes the upload from the device's trained parameters (not a model delta)."""
    algo = exp["algorithm"]
    return algo.cls.upload_kind(algo.cfg) != UploadKind.MODEL_DELTA


def check_deployable(exp: ResolvedExperiment, where: str = "") -> None:
    """Raise a one-line :class:`ConfigError` for the first setting real clients cannot serve."""
    for seam in DEPLOYED_SEAMS:
        comp = exp[seam]
        need = comp.cls.needs_simulator(comp.cfg)
        if need is not None:
            raise ConfigError(f"{where}{seam}.{need.key}", need.value,
                              f"{need.why}, which only the simulator has; on real clients use {need.instead}")
    comp = exp["compressor"]
    if derives_upload(exp) and not comp.cls.passes_uploads_through:
        algo = exp["algorithm"]
        raise ConfigError(f"{where}compressor.name", comp.name,
                          f"devices encode uploads, but {algo.name}'s upload "
                          f"({algo.cls.upload_kind(algo.cfg)}) is derived on the server from the trained model; "
                          "use compressor.name: none")
    if exp.config.eval.per_client:
        raise ConfigError(f"{where}eval.per_client", True, "evaluates every client's local test data on the server, "
                                                           "which only the simulator has; set eval.per_client: false")


__all__ = ["DEPLOYED_SEAMS", "check_deployable", "derives_upload"]
