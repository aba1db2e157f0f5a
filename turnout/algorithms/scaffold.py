"""SCAFFOLD (Karimireddy et al., ICML 2020), option II, in its original two-uplink form or the single-uplink form.

State: the server control variate ``c`` and one control variate ``c_i`` per client, kept in the
client-state store (slot ``scaffold/c_i``; never-seen clients read as 0), so N = 10⁶ clients cost
nothing until they participate and a RAM budget spills the rest to disk.

Client ``i`` (K local steps at lr η, both known to the server from ``begin_round``):

    y ← y − η (g_i(y) − c_i + c)            K steps from y = x^t      (the local objective adds c − c_i)
    c_i⁺ = c_i − c + (x^t − y_K)/(K η)      option II
    Δy = y_K − x^t,   Δc = c_i⁺ − c_i = −c − Δy/(K η)

Server: ``x ← x + η_g · Σ_i w_i Δy_i`` with the selector's weights (uniform ``1/|S|`` under the
``equal`` weighting, the paper's form), ``c ← c + (1/N) Σ_i Δc_i``, ``c_i ← c_i⁺`` for every
aggregated client.

Forms (``docs/algorithms/baselines.md#scaffold``; FedSUM's communication count does not say which
one it used, [AMBIG]):

* ``original`` (default): the client sends Δy **and** Δc, 2 model-sized
  vectors up (``Traffic.up = 2``). On the wire only Δy is carried through the engine; the
  server rebuilds Δc = −c − Δy/(Kη) exactly, which is what the client would have sent.
* ``single_uplink`` (Huang et al. 2023, SCALLION's form): the client sends one vector
  ``δ_i = ḡ_i − c_i`` (= Δc under option II, with ḡ_i the mean corrected-path gradient); the server
  rebuilds ``Δy = −Kη (δ_i + c)`` and ``Δc = δ_i``. Same model, half the upload bytes.

Both forms send x and c down (``Traffic.down = 2``).

Choices: a round with η = 0 (a schedule's end point) leaves every c_i as it is; ``c_i`` changes only
when the client's report is aggregated (a dropped or rejected report leaves both c_i and c
untouched, so c = mean_i c_i always holds); with a lossy compressor the server's rebuilt Δc follows
the decoded upload. An empty round leaves x, c and every c_i as they are.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ..core.capabilities import UploadKind
from ..training.local_sgd import LocalObjective
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports, Traffic
from .server_step import ServerLRConfig

SLOT = "scaffold/c_i"


class ScaffoldConfig(ServerLRConfig):
    form: Literal["original", "single_uplink"] = Field(
        "original", description="original: send Δy and Δc (2 vectors up); single_uplink: send δ_i = ḡ_i − c_i "
                                "(1 vector up; Huang et al. 2023)")


@ALGORITHMS.register("scaffold")
class Scaffold(Algorithm):
    """SCAFFOLD (option II): control variates correct client drift; original 2-vector or single-vector uplink."""

    Config = ScaffoldConfig
    reads_each_report = "keeps per-client control variates built from raw updates, and uploads them un-noised"
    requires_plain_sgd = True  # option II inverts x_K = x_0 − η Σ (g + c − c_i)
    cohort_bound = "inverts each report with the lr and local steps of the round's own cohort (option II)"

    @classmethod
    def traffic_for(cls, cfg: ScaffoldConfig) -> Traffic:  # x and c down; Δy and Δc, or δ_i, up
        if cfg.form == "original":
            return Traffic(down=2, up=2)
        return Traffic(down=2, upload=UploadKind.CONTROL_VARIATE)

    state_attrs = ("c",)
    scratch_attrs = ("_steps", "_lr")  # this round's K_i and η, set by begin_round

    def __init__(self, cfg: ScaffoldConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.store = ctx.state_store()
        self.num_clients = int(ctx.num_clients)
        self.c = torch.zeros(int(ctx.dim), dtype=torch.float64)  # server control variate (accumulated in f64)
        self._steps: dict[int, int] = {}
        self._lr = 0.0

    # ---- client rule ----------------------------------------------------------------------------
    def begin_round(self, round: int, clients: np.ndarray, steps: np.ndarray, lr: float) -> None:
        self._steps = dict(zip(np.asarray(clients).tolist(), np.asarray(steps).tolist()))
        self._lr = float(lr)

    def _k_eta(self, clients: np.ndarray) -> torch.Tensor:
        """K_i·η per client (K_i ≥ 1: a client always runs at least one step)."""
        k = np.array([max(1, int(self._steps.get(int(c), 1))) for c in clients], dtype=np.float64)
        return torch.from_numpy(k * self._lr)

    def local_objective(self, client: int, start: torch.Tensor) -> LocalObjective:
        """The drift correction ``g + c − c_i``."""
        return LocalObjective(offset=(self.c - self.store.get(SLOT, np.array([client]))[0].double()).to(start.dtype))

    def client_update(self, client: int, start: torch.Tensor, end: torch.Tensor,
                      grad_sum: torch.Tensor | None = None) -> torch.Tensor:
        dy = end - start
        if self.cfg.form == "original":
            return dy
        k_eta = float(self._k_eta(np.array([client]))[0])
        if k_eta == 0.0:  # η = 0 (e.g. the last round of a cosine schedule): nothing learnt, c_i kept
            return torch.zeros_like(dy)
        return (-self.c - dy.double() / k_eta).to(dy.dtype)  # δ_i = Δc_i = ḡ_i − c_i

    # ---- server rule -----------------------------------------------------------------------------
    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor | None:
        if len(reports) == 0:
            return None
        u = reports.updates
        c = self.c.to(u.dtype)[None, :]
        k_eta = self._k_eta(reports.clients).to(u.dtype)[:, None]
        if self.cfg.form == "original":
            live = k_eta > 0  # η = 0 leaves c_i as it is
            dy, dc = u, torch.where(live, -c - u / torch.where(live, k_eta, 1.0), 0.0)
        else:
            dy, dc = -k_eta * (u + c), u
        step = Reports(reports.clients, dy, reports.weights, reports.normalize, reports.n_samples, reports.losses,
                       reports.staleness).weighted_mean()
        self.store.put(SLOT, reports.clients, self.store.get(SLOT, reports.clients) + dc)
        self.c = self.c + dc.sum(0).double() / self.num_clients
        return step

