"""What a component needs that only the simulated world has, declared on the component class.

The simulator holds the ground truth — every client's data and labels, the availability model's
future, all clients' state in one process — and a few components read it: REFL's oracle predictor,
FedGS's oracle graph, loss probes evaluated on the clients' data by the server. A deployment on
real clients (:mod:`turnout.flower`) has none of it, so each component class says, for its
options, what it would need and which setting does without. The deployment asks the classes of a
configuration and refuses it with one line; it never asks for a component by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable


@dataclass(frozen=True)
class WorldNeed:
    """One option value that only the simulator can serve, and the setting to use on real clients."""

    key: str  # the option, relative to the component's block ("predictor")
    value: Any  # its value in this configuration ("oracle")
    why: str  # what that value reads that only the simulator has
    instead: str  # the setting that works without it ("selector.predictor: history")


class UploadKind(str, Enum):
    """What a client's upload is: an algorithm declares it, a compressor lists the kinds it can encode.

    A string enum, so a plugin may still write the plain names (``accepts = frozenset({"model_delta"})``).
    """

    MODEL_DELTA = "model_delta"  # new − old model
    GRADIENT_DIFFERENCE = "gradient_difference"  # FedSUM's Δy_i
    CONTROL_VARIATE = "control_variate"  # SCAFFOLD's single-uplink δ_i
    NACK_OR_DELTA = "nack_or_delta"  # Adaptive-OU: a NACK (norm, 0, …, 0) or a model delta

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def upload_kinds(kinds: Iterable[str | UploadKind] | None) -> frozenset[UploadKind] | None:
    """A compressor's ``accepts`` as upload kinds (``None``: any kind); an unknown name is an error here."""
    return None if kinds is None else frozenset(UploadKind(k) for k in kinds)


class Deployable:
    """Mixin of every seam's base class: by default a component runs on real clients as it does simulated."""

    @classmethod
    def needs_simulator(cls, cfg: Any) -> WorldNeed | None:
        """What this component, under options ``cfg``, needs that only the simulated world has (None: nothing)."""
        return None


__all__ = ["Deployable", "UploadKind", "WorldNeed", "upload_kinds"]
