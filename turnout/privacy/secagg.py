"""Secure aggregation as a cost and failure model on the simulated clock and the byte ledger (no cryptography).

SecAgg (Bonawitz et al. 2017, "Practical secure aggregation for privacy-preserving machine learning") runs
four exchanges per round: AdvertiseKeys and ShareKeys before training (each client's two public keys to
everyone, then a Shamir share of its secrets to every other client), MaskedInputCollection (the masked,
dense update: priced by the round as usual), and Unmasking (each survivor sends, per other client, the share
the server needs: the self-mask seed of a client that submitted, the key of one that dropped). The server
then regenerates, with a PRG of model length, every pairwise mask between a dropped client and a client
that submitted, and every submitted client's self mask. SecAgg+ (Bell et al. 2020, "Secure single-server
aggregation with (poly)logarithmic overhead") shares keys with k = O(log n) neighbours of a random graph
instead of all n − 1 clients, which shrinks the key-share bytes and the unmasking work by n / k.

The round fails — nothing is aggregated, the clients' work is wasted — when fewer than the threshold t of
the launched clients submit a masked input, or fewer than t are still online to unmask; the masked inputs sent
are still charged, and clients still computing finish as they would have (their reports are then dropped).
Modelled here: bytes and seconds of the extra exchanges, PRG expansions, the threshold; not modelled:
consistency checks against a malicious server, field-size overhead of the masked input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, Field

from ..config.base import NoOptions, StrictModel
from ..core.capabilities import Deployable, WorldNeed
from ..core.records import RoundClose
from ..core.registry import Registry
from ..core.state import Stateful

SECURE_AGGREGATION: Registry = Registry("secure_aggregation", "SecAgg / SecAgg+ cost and failure model")


@dataclass(frozen=True)
class SecAggBill:
    """What secure aggregation added to one round: seconds, bytes per launched client, whether it failed."""

    setup_s: float
    unmask_s: float
    up: np.ndarray  # extra bytes each launched client sent (keys, shares)
    down: np.ndarray  # extra bytes each launched client received
    submitted: int  # |U3|: masked inputs the server holds
    survivors: int  # |U4|: clients online to unmask
    dropped: int  # launched clients whose masks must be removed (never submitted)
    threshold: int
    failed: bool

    @property
    def extra_s(self) -> float:
        return self.setup_s + self.unmask_s

    def columns(self) -> dict[str, object]:
        return {"secagg_setup_s": self.setup_s, "secagg_unmask_s": self.unmask_s,
                "secagg_bytes_up": int(self.up.sum()), "secagg_bytes_down": int(self.down.sum()),
                "secagg_dropped": self.dropped, "secagg_survivors": self.survivors,
                "secagg_threshold": self.threshold, "secagg_failed": int(self.failed)}


class SecureAggregation(Stateful, Deployable):
    """No secure aggregation (the ``none`` model): the round is left as the round mode closed it."""

    Config: type[BaseModel] = NoOptions
    #: whether this model changes anything (adds columns and costs)
    active: ClassVar[bool] = False

    def __init__(self, cfg: BaseModel):
        self.cfg = cfg

    def close(self, verdict: RoundClose, duration_s: float, dropped_at_s: np.ndarray, upload_s, download_s,
              dim: int, sent_up: np.ndarray | None = None) -> tuple[RoundClose, SecAggBill | None]:
        """The verdict once secure aggregation has run over it, and what it cost (None: nothing).

        ``duration_s``: the round's length from the cohort's start; ``dropped_at_s``: when each launched client goes
        offline (from the same start); ``upload_s(j, bytes)`` / ``download_s(j, bytes)``: seconds for cohort members
        ``j``; ``sent_up``: each member's masked-input bytes, still charged when the round fails.
        """
        return verdict, None


SECURE_AGGREGATION.register("none")(SecureAggregation)


class SecAggConfig(StrictModel):
    threshold: float = Field(0.5, gt=0.0, le=1.0, description="t as a share of the launched clients: a round fails "
                                                              "when fewer submit, or fewer stay to unmask")
    key_bytes: int = Field(32, ge=1, le=1 << 16, description="one public key (X25519: 32 B); each client has two")
    share_bytes: int = Field(64, ge=1, le=1 << 16, description="one encrypted Shamir share pair sent to a neighbour")
    round_trip_s: float = Field(0.1, ge=0.0, le=3600.0, description="latency of each extra exchange")
    prg_values_per_s: float = Field(2.5e8, gt=0.0, le=1e13, description="server PRG speed in model values per "
                                                                        "second (AES-CTR, ~1 GB/s of float32)")


class SecAggPlusConfig(SecAggConfig):
    neighbours_per_log2: float = Field(3.0, gt=0.0, le=100.0, description="k = ⌈this · log₂ n⌉ neighbours (at most "
                                                                          "n − 1)")


@SECURE_AGGREGATION.register("secagg")
class SecAgg(SecureAggregation):
    """Bonawitz et al. 2017: every client shares keys with every other (n − 1 neighbours)."""

    Config = SecAggConfig
    active = True

    @classmethod
    def needs_simulator(cls, cfg: SecAggConfig) -> WorldNeed:
        return WorldNeed("name", "secagg or secagg_plus", "it is a cost model of the simulated clock, not a "
                         "protocol devices run", "secure_aggregation.name: none")

    def neighbours(self, n: int) -> int:
        """How many clients each client shares keys with."""
        return max(0, n - 1)

    def close(self, verdict: RoundClose, duration_s: float, dropped_at_s: np.ndarray, upload_s, download_s,
              dim: int, sent_up: np.ndarray | None = None) -> tuple[RoundClose, SecAggBill | None]:
        cfg = self.cfg
        n = len(verdict.aggregated)
        if n == 0:
            return verdict, None
        k = self.neighbours(n)
        idx = np.arange(n)
        # AdvertiseKeys (two keys up; the neighbours' keys down) and ShareKeys (k shares up, k shares down)
        setup_up = np.full(n, 2 * cfg.key_bytes + k * cfg.share_bytes, np.int64)
        setup_down = np.full(n, 2 * cfg.key_bytes * k + k * cfg.share_bytes, np.int64)
        setup_s = 2 * cfg.round_trip_s + float(np.max(upload_s(idx, setup_up) + download_s(idx, setup_down)))
        submitted = np.asarray(verdict.aggregated, bool)
        # unmasking starts once the round has closed; who is still online then answers
        survivors = submitted & (np.asarray(dropped_at_s) > duration_s + setup_s + cfg.round_trip_s)
        dropped = int(n - submitted.sum())
        t = max(2, math.ceil(cfg.threshold * n))
        unmask_up = np.where(survivors, k * cfg.share_bytes, 0).astype(np.int64)
        unmask_down = np.where(survivors, 4 * n, 0).astype(np.int64)  # who dropped / who submitted, as ids
        failed = int(submitted.sum()) < t or int(survivors.sum()) < t
        unmask_s = 0.0
        if submitted.any() and not int(submitted.sum()) < t:
            # pairwise masks of each dropped client with its submitted neighbours, and every self mask
            pairs = dropped * int(submitted.sum()) * (k / max(1, n - 1))
            prg = (pairs + int(submitted.sum())) * dim / cfg.prg_values_per_s
            talk = float(np.max(upload_s(idx[survivors], unmask_up[survivors])
                                + download_s(idx[survivors], unmask_down[survivors]), initial=0.0))
            unmask_s = cfg.round_trip_s + talk + (0.0 if failed else prg)
        up = setup_up + unmask_up
        if failed and sent_up is not None:  # the masked inputs were sent; the server could not unmask their sum
            up = up + np.where(submitted, np.asarray(sent_up, np.int64), 0)
        bill = SecAggBill(setup_s=setup_s, unmask_s=unmask_s, up=up, down=setup_down + unmask_down,
                          submitted=int(submitted.sum()), survivors=int(survivors.sum()), dropped=dropped, threshold=t,
                          failed=failed)
        if failed:  # nothing is aggregated; clients still computing finish as they would have (and are dropped)
            verdict = RoundClose(aggregated=np.zeros(n, bool), late=verdict.late, duration_s=verdict.duration_s,
                                 busy_s=verdict.busy_s)
        return verdict, bill


@SECURE_AGGREGATION.register("secagg_plus")
class SecAggPlus(SecAgg):
    """Bell et al. 2020: keys shared over a random graph of k = ⌈c · log₂ n⌉ neighbours."""

    Config = SecAggPlusConfig

    def neighbours(self, n: int) -> int:
        return min(max(0, n - 1), math.ceil(self.cfg.neighbours_per_log2 * math.log2(max(2, n))))
