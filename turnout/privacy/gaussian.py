"""DP-FedAvg's Gaussian mechanism on the clipped sum, with a fixed or an adaptive clip norm.

Fixed clipping (McMahan et al. 2018): reports clipped to C, N(0, (zC)²) added to their sum, divided by K.
Adaptive clipping (Andrew et al. 2021, "Differentially private learning with adaptive clipping"): each
aggregated client also says whether its report was within C (b_i = 1[‖u_i‖ ≤ C]); the server notes
b̄ = (Σ b_i + N(0, σ_b²)) / K and sets C ← C · exp(−η_C (b̄ − γ)), steering C to the γ-quantile of the
norms. The count's own noise is paid for by noising the sum with z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2), so the
pair is one Gaussian mechanism of multiplier z (their Theorem 1) and the accounting is unchanged.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ..config.base import Fraction, StrictModel
from ..core import rng as rngmod
from ..core.capabilities import WorldNeed
from ..core.errors import ConfigError
from ..core.records import Reports
from . import accounting
from .base import PRIVACY, Privacy, PrivacyContext, SelectionFacts
from .clipping import NoisedReports, clip_rows


class AdaptiveClipConfig(StrictModel):
    """Andrew et al. 2021's geometric update of the clip norm towards a target quantile of the norms."""

    target_quantile: Fraction = Field(0.5, description="γ: the share of reports to leave unclipped")
    clip_lr: float = Field(0.2, gt=0.0, le=10.0, description="η_C: the geometric step of the clip norm")
    count_noise: float | None = Field(None, gt=0.0, le=1e6,
                                      description="σ_b: std of the noise on the unclipped count (null: K / 20, the "
                                                  "paper's choice); must exceed z / 2")


class GaussianConfig(StrictModel):
    clip_norm: float = Field(1.0, gt=0.0, le=1e9, description="C: each report's L2 norm is cut to at most C (the "
                                                              "starting value under adaptive clipping)")
    noise_multiplier: float = Field(1.0, ge=0.0, le=1e6,
                                    description="z: the noise on the clipped sum has std z·C (0: clip only, no "
                                                "privacy)")
    adaptive: AdaptiveClipConfig | None = Field(None, description="adapt C to a quantile of the norms (null: fixed)")
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ of the reported ε(δ)")
    accountant: Literal["rdp", "pld"] = Field("rdp", description="dp-accounting's RDP or PLD accountant")
    budget_epsilon: float = Field(8.0, gt=0.0, le=1e6,
                                  description="the ε budget: the summary gives the share of clients above it")


@PRIVACY.register("gaussian")
class GaussianDP(Privacy):
    """Clip each report to C before any compressor, add N(0, (z_Δ C)²) to the clipped sum, divide by K."""

    Config = GaussianConfig
    clips = True
    state_attrs = ("clip_norm", "unclipped", "amplified_rdp")
    scratch_attrs = ("last", "facts", "ledger_ok", "why_not_amplified")

    @classmethod
    def needs_simulator(cls, cfg: GaussianConfig) -> WorldNeed:
        return WorldNeed("name", "gaussian", "it clips and noises inside the simulated round loop (a deployment's "
                         "devices and server step do not call it yet)", "privacy.name: none")

    def __init__(self, cfg: GaussianConfig, ctx: PrivacyContext):
        super().__init__(cfg, ctx)
        self.clip_norm = float(cfg.clip_norm)
        self.unclipped = np.zeros(ctx.num_clients, bool)  # b_i of each client's latest report (adaptive clipping)
        self.last: dict[str, float] = {}
        self.facts: SelectionFacts | None = None
        self.amplified_rdp: np.ndarray | None = None
        self.ledger_ok = True
        self.why_not_amplified = ""

    @property
    def active(self) -> bool:
        return True

    # ---- set-up ------------------------------------------------------------------------------
    def attach(self, facts: SelectionFacts) -> None:
        self.facts = facts
        z = self.cfg.noise_multiplier
        if self.cfg.adaptive is not None and z > 0 and self.count_noise() <= z / 2:
            raise ConfigError("privacy.adaptive.count_noise", self.count_noise(),
                              f"must exceed noise_multiplier / 2 = {z / 2:g} (Andrew et al.'s z_Δ is real only "
                              "then); raise it or lower noise_multiplier")
        if facts.reads_client_data:
            self.why_not_amplified = f"selector {facts.selector} {facts.reads_client_data}"

    def count_noise(self) -> float:
        """σ_b of adaptive clipping's noised count."""
        given = self.cfg.adaptive.count_noise if self.cfg.adaptive is not None else None
        return float(given) if given is not None else max(1, self.facts.target if self.facts else 1) / 20.0

    def sum_noise_multiplier(self) -> float:
        """z_Δ: the multiplier of the noise on the sum (z itself under fixed clipping)."""
        z = self.cfg.noise_multiplier
        if self.cfg.adaptive is None or z <= 0:
            return z
        return (z ** -2 - (2 * self.count_noise()) ** -2) ** -0.5

    def denominator(self) -> float:
        """The fixed denominator of DP-FedAvg's estimate: the reports a round wants (K)."""
        return float(max(1, self.facts.target if self.facts is not None else 1))

    # ---- the two seams -------------------------------------------------------------------------
    def clip(self, round: int, clients: np.ndarray, updates: torch.Tensor) -> torch.Tensor:
        clipped, norms = clip_rows(updates, self.clip_norm)
        finite = np.isfinite(norms)
        self.unclipped[np.asarray(clients)[finite]] = norms[finite] <= self.clip_norm
        self.last = {"dp_clip_norm": self.clip_norm,
                     "dp_clipped_frac": float(np.mean(norms[finite] > self.clip_norm)) if finite.any() else math.nan,
                     "dp_norm_median": float(np.median(norms[finite])) if finite.any() else math.nan}
        return clipped

    def privatize(self, round: int, reports: Reports) -> Reports:
        if reports.held is not None:
            raise RuntimeError("privacy clips each report: reports cannot be held as partial sums")
        std = self.sum_noise_multiplier() * self.clip_norm
        gen = rngmod.torch_generator(self.ctx.seed, "privacy/noise", round)
        noise = torch.randn(reports.updates.shape[1], generator=gen, dtype=torch.float64) * std
        out = NoisedReports(reports, noise, self.denominator())
        self.last = {**self.last, "dp_clip_norm": self.clip_norm, "dp_noise_std": std / self.denominator()}
        if self.cfg.adaptive is not None:
            self._adapt(round, reports.clients)
        return out

    def _adapt(self, round: int, clients: np.ndarray) -> None:
        """C ← C · exp(−η_C (b̄ − γ)) with b̄ the noised share of aggregated reports that were within C."""
        ad = self.cfg.adaptive
        gen = rngmod.stream(self.ctx.seed, "privacy/count-noise", round)
        noise = gen.normal(0.0, self.count_noise()) if self.cfg.noise_multiplier > 0 else 0.0
        share = (float(self.unclipped[np.asarray(clients)].sum()) + noise) / self.denominator()
        self.clip_norm = float(self.clip_norm * math.exp(-ad.clip_lr * (share - ad.target_quantile)))

    # ---- accounting ----------------------------------------------------------------------------
    def record_selection(self, round: int, available: np.ndarray, probabilities: np.ndarray | None) -> None:
        if self.why_not_amplified or not self.ledger_ok or self.cfg.noise_multiplier <= 0:
            return
        if probabilities is None:
            self.ledger_ok = False
            self.why_not_amplified = f"selector {self.facts.selector if self.facts else '?'} declares no per-round " \
                                     "inclusion probabilities"
            self.amplified_rdp = None
            return
        ledger = accounting.AmplifiedLedger(self.ctx.num_clients, self.cfg.noise_multiplier)
        if self.amplified_rdp is not None:
            ledger.rdp = self.amplified_rdp
        ledger.record(available, probabilities)
        self.amplified_rdp = ledger.rdp

    def round_metrics(self) -> dict[str, object]:
        return {"dp_clip_norm": math.nan, "dp_clipped_frac": math.nan, "dp_noise_std": 0.0, "dp_norm_median": math.nan,
                **self.last}

    def summary(self, times_aggregated: np.ndarray, rounds_run: int) -> tuple[dict, dict[str, np.ndarray]]:
        cfg, n = self.cfg, self.ctx.num_clients
        z, delta, method = cfg.noise_multiplier, cfg.delta, cfg.accountant
        k = self.facts.target if self.facts is not None else 1
        out: dict = {"dp_mechanism": "gaussian", "dp_noise_multiplier": z, "dp_delta": delta, "dp_accountant": method,
                     "dp_clip_norm_final": self.clip_norm, "dp_budget_epsilon": cfg.budget_epsilon}
        if z <= 0:
            out["dp_note"] = "noise_multiplier 0: clipping only, no privacy guarantee (every ε is infinite)"
            return out, {}
        eps = accounting.client_epsilons(times_aggregated, z, delta, method)
        out.update({"dp_epsilon": accounting.standard_epsilon(k / n, z, rounds_run, delta, method),
                    "dp_epsilon_client_max": float(eps.max(initial=0.0)),
                    "dp_epsilon_client_median": float(np.median(eps)) if len(eps) else 0.0,
                    "dp_epsilon_over_budget": float(np.mean(eps > cfg.budget_epsilon)) if len(eps) else 0.0})
        cols = {"epsilon": eps}
        if self.facts is not None and self.facts.reads_client_data:
            out["dp_selection_note"] = (f"selector {self.facts.selector} {self.facts.reads_client_data}: what its "
                                        "choice releases by itself is not covered by these ε")
        if self.amplified_rdp is not None and not self.why_not_amplified:
            amp = np.array([accounting.epsilon_from_rdp(row, delta) if row.any() else 0.0
                            for row in self.amplified_rdp])
            out.update({"dp_epsilon_amplified_max": float(amp.max(initial=0.0)),
                        "dp_epsilon_amplified_median": float(np.median(amp))})
            cols["epsilon_amplified"] = amp
        else:
            out["dp_amplified_off_because"] = self.why_not_amplified or "no round was recorded"
        return out, cols
