"""APF as coded in the GlueFL repository: freeze coordinates whose effective perturbation is small."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_ROUNDS, MAX_SCALE
from ..core.capabilities import UploadKind
from ..core.finite import finite_rows
from ..core.records import SentStep
from .base import COMPRESSORS, VALUE_BYTES, Compressor, sparse_bytes
from .sparse import ACCOUNTING_HELP, code_download_bytes, index_bytes


@COMPRESSORS.register("apf")
class APF(Compressor):
    """APF: every F_c rounds freeze stable coordinates (effective perturbation < θ) for an additively growing period.

    Notes: ``docs/algorithms/baselines.md#apf`` (``TCtower/GlueFL``, ``fl_method: APF``; Chen et al. 2021). All
    coordinates start active. Clients zero their frozen coordinates (the mask of the previous
    round), so uploads carry only active values at positions the server already knows, and the
    server leaves frozen coordinates unchanged (it also zeroes them in the model change, so an
    algorithm with server momentum cannot move them). Every ``check_every`` rounds (the code's
    rounds 5, 10, …, i.e. ``(round + 1) % F_c == 0``), with this round's change G:

        E ← α·E + (1−α)·G ;  A ← α·A + (1−α)·|G| ;  P = |E|/A   (0/0 counts as not stable)
        active & P < θ: L ← L + F_c      active & P ≥ θ: L ← L/2      active: U ← r + L
        active ← U < r + F_c             (frozen coordinates keep their L and U)

    No top-k, no error compensation. ``threshold`` θ defaults to the code's 0.3 (the paper says 0.1).
    """

    needs_training = "freezes the coordinates whose updates have stabilised"

    class Config(StrictModel):
        check_every: int = Field(5, ge=1, le=MAX_ROUNDS, description="F_c: rounds between freezing decisions")
        threshold: float = Field(0.3, gt=0.0, le=MAX_SCALE,
                                 description="θ: a coordinate is stable when |E|/A < θ (code 0.3; "
                                             "APF paper 0.1)")
        ema: float = Field(0.99, ge=0.0, lt=1.0, description="α of the moving averages E and A")
        accounting: Literal["exact", "gluefl_code"] = Field("exact", description=ACCOUNTING_HELP)

    accepts = frozenset({UploadKind.MODEL_DELTA})
    state_attrs = ("active", "ema_g", "ema_abs", "freeze_len", "unfreeze_at")

    def __init__(self, cfg: Config, dim: int, seed: int, store=None, layout=None):
        super().__init__(cfg, dim, seed, store)
        self.active = torch.ones(dim, dtype=torch.bool)
        self.ema_g = torch.zeros(dim, dtype=torch.float64)
        self.ema_abs = torch.zeros(dim, dtype=torch.float64)
        self.freeze_len = torch.zeros(dim, dtype=torch.float64)  # L
        self.unfreeze_at = torch.zeros(dim, dtype=torch.float64)  # U

    @property
    def active_fraction(self) -> float:
        return float(self.active.sum()) / max(self.dim, 1)

    def device_state(self, round: int) -> dict[str, torch.Tensor]:
        """The active set: clients zero the frozen coordinates (the frozen mask is priced in the download)."""
        return {"active": self.active.clone()}

    def encode_uploads(self, round: int, clients: np.ndarray, updates: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        k = len(clients)
        n_active = int(self.active.sum())
        if self.cfg.accounting == "gluefl_code":
            size = math.ceil(self.active_fraction * self.dim * VALUE_BYTES)
        else:
            size = n_active * VALUE_BYTES  # the positions are the broadcast mask's
        decoded = torch.where(self.active.unsqueeze(0), updates, torch.zeros_like(updates)) if k else updates
        # a non-finite report is passed through so that the engine rejects it
        if k:
            bad = ~finite_rows(updates)
            decoded[bad] = updates[bad]
        return decoded, np.full(k, size, dtype=np.int64)

    def server_update(self, round: int, update: torch.Tensor) -> SentStep:
        sent = torch.where(self.active, update, torch.zeros_like(update))
        support = self.active  # frozen coordinates are not sent, whatever the step held there
        cfg = self.cfg
        if (round + 1) % cfg.check_every == 0 and bool(torch.isfinite(sent).all()):
            r, f, a = float(round + 1), float(cfg.check_every), cfg.ema
            g = sent.to(torch.float64)
            self.ema_g = a * self.ema_g + (1 - a) * g
            self.ema_abs = a * self.ema_abs + (1 - a) * g.abs()
            p = self.ema_g.abs() / self.ema_abs  # torch: 0/0 is NaN, no warning
            stable = p < cfg.threshold  # NaN (0/0) is not stable
            act = self.active
            self.freeze_len[act & stable] += f
            self.freeze_len[act & ~stable] /= 2.0
            self.unfreeze_at[act] = r + self.freeze_len[act]
            self.active = self.unfreeze_at < r + f
        return SentStep(sent, support)

    def download_bytes(self, lacking: np.ndarray) -> np.ndarray:
        if self.cfg.accounting == "gluefl_code":
            return code_download_bytes(lacking, self.dim)
        n_frozen = self.dim - int(self.active.sum())
        return sparse_bytes(lacking, self.dim) + int(index_bytes(n_frozen, self.dim))  # + the frozen mask
