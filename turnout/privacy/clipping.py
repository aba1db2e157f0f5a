"""Clipping each client's report to an L2 norm, and the noised estimate of the clipped reports' mean.

DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language models"): each report
u_i is scaled to norm at most C, the server adds N(0, (zC)²) to each coordinate of their sum and divides by
a fixed denominator — the reports a round expects (K), not the number that arrived — so that one client's
presence changes the released sum by at most C whatever else happened in the round.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.records import Reports


def clip_rows(updates: torch.Tensor, clip_norm: float) -> tuple[torch.Tensor, np.ndarray]:
    """Each row scaled to L2 norm at most ``clip_norm``, and the rows' norms before clipping."""
    norms = torch.linalg.vector_norm(updates.double(), dim=1)
    scale = torch.clamp(clip_norm / torch.clamp(norms, min=1e-300), max=1.0)
    return updates * scale.to(updates.dtype)[:, None], norms.cpu().numpy()


class NoisedReports(Reports):
    """Reports whose weighted mean is DP-FedAvg's fixed-denominator estimate (Σ clipped u_i + noise) / K.

    Every report counts once (unit weights: one client moves the sum by at most C, whatever the selector
    weighted it by); ``noise`` is the Gaussian vector of the round, ``denominator`` the expected report count.
    """

    def __init__(self, reports: Reports, noise: torch.Tensor, denominator: float):
        super().__init__(**{f: getattr(reports, f) for f in reports.__dataclass_fields__})
        object.__setattr__(self, "noise", noise)
        object.__setattr__(self, "denominator", float(denominator))

    def clipped_sum(self) -> torch.Tensor:
        """Σ u_i over the reports (already clipped), on the CPU."""
        if len(self) == 0:
            return torch.zeros(self.updates.shape[1], dtype=self.updates.dtype)
        return self.updates.sum(dim=0).cpu()

    def weighted_mean(self) -> torch.Tensor:
        total = self.clipped_sum()
        return (total + self.noise.to(total.dtype)) / self.denominator
