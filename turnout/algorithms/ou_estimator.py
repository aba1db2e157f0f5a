"""Per-coordinate Ornstein–Uhlenbeck (AR(1)) estimate of the next model step, from rolling sums.

Adaptive-OU §3.6, Eqs. (7)–(10), as in ``estimation_utils.py`` of ``mriberodiaz/selection_ou_weights``
(notes: ``docs/algorithms/adaptive_ou.md#ou-estimator``). Each coordinate of the global model is modelled as
``x_{t+1} = a·x_t + b + ε``. Five running sums over the observed pairs ``(x_t, x_{t+1})`` give the
least-squares fit in O(dim) memory and time per round:

    a = (n S_xy − S_x S_y) / (n S_xx − S_x²)      b = (S_y − a S_x) / n

and the predicted step ``Δ̂ = (a ⊙ x + b) − x``. Non-finite ``a`` / ``b`` / ``Δ̂`` entries are zeroed
element-wise (the code zeroes NaN/Inf entries of ``a`` and then any tensor still non-finite; on one flat
vector element-wise is the same rule at a finer grain). With fewer than two pairs the estimate is 0.

The sums are kept in float64: ``n S_xx − S_x²`` cancels catastrophically in float32 once the model
has settled (40 bytes per coordinate; a float32 option halves that at a precision cost).
"""

from __future__ import annotations

import torch

from ..core.state import Stateful


class OUEstimator(Stateful):
    """Rolling-sum least-squares fit of ``x_{t+1} = a x_t + b`` per coordinate."""

    state_attrs = ("n", "s_x", "s_xx", "s_y", "s_yy", "s_xy")

    def __init__(self, dim: int, dtype: torch.dtype = torch.float64):
        self.dim, self.dtype = int(dim), dtype
        self.n = 0
        self.s_x = torch.zeros(self.dim, dtype=dtype)
        self.s_xx = torch.zeros(self.dim, dtype=dtype)
        self.s_y = torch.zeros(self.dim, dtype=dtype)
        self.s_yy = torch.zeros(self.dim, dtype=dtype)  # kept for parity with the code (residual variance)
        self.s_xy = torch.zeros(self.dim, dtype=dtype)

    def update(self, x_prev: torch.Tensor, x_next: torch.Tensor) -> None:
        """Add the pair ``(x_t, x_{t+1})``."""
        x = x_prev.detach().reshape(-1).to(self.dtype)
        y = x_next.detach().reshape(-1).to(self.dtype)
        self.s_x += x
        self.s_xx += x * x
        self.s_y += y
        self.s_yy += y * y
        self.s_xy += x * y
        self.n += 1

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, b)`` per coordinate; zeros before two pairs, non-finite entries zeroed."""
        if self.n < 2:
            return torch.zeros(self.dim, dtype=self.dtype), torch.zeros(self.dim, dtype=self.dtype)
        n = float(self.n)
        a = (n * self.s_xy - self.s_x * self.s_y) / (n * self.s_xx - self.s_x * self.s_x)
        a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
        b = (self.s_y - a * self.s_x) / n
        b = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
        return a, b

    def predict_delta(self, x: torch.Tensor) -> torch.Tensor:
        """``Δ̂ = (a ⊙ x + b) − x`` in ``x``'s dtype (zero before two pairs and where non-finite)."""
        if self.n < 2:
            return torch.zeros_like(x)
        a, b = self.coefficients()
        xd = x.detach().reshape(-1).to(self.dtype)
        d = a * xd + b - xd
        d = torch.where(torch.isfinite(d), d, torch.zeros_like(d))
        return d.to(x.dtype).reshape(x.shape)

