"""Asynchronous rounds (FedAsync, FedBuff): C clients always in flight, a server update every K arrivals.

Asynchronous FL needs no second engine (notes: ``docs/algorithms/asynchronous.md``). Seen from the one
round loop, a round is one server update:

1. **launch** — the selector fills the free slots: ``C − in flight`` clients (``C`` is the selector's
   ``clients_per_round``, the concurrency), chosen from the clients available at the round's start, the
   moment the previous update was made. Each starts from the current model (version ``r``) and its
   report is put in flight at ``start + download + compute + upload`` seconds;
2. **close** — at the ``K``-th arrival among every usable report in flight (``buffer: K``), old and new;
   ties in arrival time go to the report launched first (then the lower cohort index), so a round takes
   exactly ``K`` reports whenever ``K`` are in flight. A report the server rule will drop (older than
   ``max_staleness``) does not count (FedScale's rule): the engine hands only the usable ones as
   ``in_flight_s`` and the others, with the tasks that end in a loss, as ``lost_s``;
3. the ``K`` reports are aggregated with staleness ``τ = r − origin`` (server versions between a
   client's download and its upload; 0 when it arrives in the round it started in); the rest stay in
   flight, and their devices stay busy (never launched twice at once).

A client that goes offline before it delivers is lost at that moment: until then its device is busy and
holds its slot (``turnout/world/lost.py``); its seconds are wasted and its slot is refilled at the first
update after it went offline. When fewer than ``K`` reports can still arrive (nobody was
available to fill the slots), the round closes when the last of them arrives or is lost, with what it
has. When nothing is in flight and nobody can be launched, the server waits ``empty_round_s`` and tries
again, as in the synchronous modes.

Refilling (``refill``): ``update`` (the default) refills a slot freed by an arrival when the buffer is
flushed (at every arrival for ``K = 1``, FedAsync), so between two updates of FedBuff the concurrency dips
from ``C`` towards ``C − K + 1``. ``arrival`` is FedBuff's Algorithm 1 (Nguyen et al., 2022): each of the
first ``K − 1`` arrivals of a round also refills the slots free at that instant (:meth:`refills`; the
timing launches them, :meth:`turnout.sim.timing.AsynchronousTiming.refill`). The model does not change
between updates, so every client launched in round ``r`` starts from version ``r`` and its report's
staleness is counted as any other launched in round ``r``. With ``K = 1`` the two are the same run.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS
from ..core.capabilities import WorldNeed
from .base import ROUND_MODES, RoundClose, RoundMode


class AsynchronousConfig(StrictModel):
    buffer: int = Field(1, ge=1, le=MAX_CLIENTS,
                        description="K: reports per server update (1: FedAsync, every arrival updates the model; "
                                    "FedBuff: 10). The concurrency C is selector.clients_per_round")
    refill: Literal["update", "arrival"] = Field(
        "update", description="when slots freed by arrivals are refilled: update (at the next server update) or "
                              "arrival (at each arrival, FedBuff's Algorithm 1: C clients always in flight)")


@ROUND_MODES.register("async")
class Asynchronous(RoundMode):
    """Keep C clients in flight; close a round (one server update) at the K-th arrival on the simulated clock."""

    Config = AsynchronousConfig
    timing: ClassVar[str] = "asynchronous"

    @classmethod
    def needs_simulator(cls, cfg: AsynchronousConfig) -> WorldNeed | None:
        return WorldNeed("name", "async", "keeps clients training across server updates on the simulated clock",
                         "round_mode.name: wait_all, over_commit or deadline")

    @classmethod
    def memory_bytes(cls, cfg: AsynchronousConfig, sizes) -> int:
        """For the memory pre-flight: the C reports in flight and, for a rule that mixes models (FedAsync), at most
        one model version per report in flight (float32, model-sized)."""
        return 2 * 4 * sizes.dim * sizes.cohort

    def launch(self, target: int, in_flight: int) -> int:
        return max(0, int(target) - int(in_flight))

    def refills(self) -> int:
        """``refill: arrival``: the first ``K − 1`` arrivals of a round refill the free slots (the K-th makes the
        update, and the next round's open refills); ``update``: none."""
        return int(self.cfg.buffer) - 1 if self.cfg.refill == "arrival" else 0

    def arrivals_taken(self) -> int | None:
        return int(self.cfg.buffer)

    def close(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int) -> RoundClose:
        return self.close_in_flight(finish_s, dropped_at_s, target, np.zeros(0))

    def close_in_flight(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int,
                        in_flight_s: np.ndarray, lost_s: np.ndarray | None = None) -> RoundClose:
        finish_s = np.asarray(finish_s, dtype=np.float64)
        dropped_at_s = np.asarray(dropped_at_s, dtype=np.float64)
        in_flight_s = np.asarray(in_flight_s, dtype=np.float64)
        lost_s = np.zeros(0) if lost_s is None else np.asarray(lost_s, dtype=np.float64)
        survives = finish_s <= dropped_at_s
        until_gone = np.minimum(finish_s, dropped_at_s)  # when the server hears the report or loses the client
        arrivals = np.sort(np.concatenate([in_flight_s, finish_s[survives]]), kind="stable")
        k = int(self.cfg.buffer)
        if len(arrivals) >= k:
            duration = float(arrivals[k - 1])
        elif len(arrivals) or len(finish_s) or len(lost_s):  # too few can arrive: the last arrival or loss
            duration = float(max(arrivals.max(initial=0.0), until_gone.max(initial=0.0), lost_s.max(initial=0.0)))
        else:
            duration = 0.0
        # Every survivor goes in flight (the engine takes the first K arrivals, this round's included);
        # a client that drops out worked until it went offline, for nothing.
        return RoundClose(aggregated=np.zeros(len(finish_s), dtype=bool), late=survives,
                          duration_s=max(duration, 0.0), busy_s=until_gone)
