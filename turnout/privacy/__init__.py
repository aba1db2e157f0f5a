"""Client-level differential privacy and secure aggregation: two seams that sit around the server rule.

``privacy`` clips each client's report before any compressor and adds Gaussian noise to the clipped sum
before the server step (DP-FedAvg, McMahan et al. 2018; adaptive clipping, Andrew et al. 2021), then
accounts for what the noised sums released (:mod:`.accounting`, Google's ``dp-accounting``).
``secure_aggregation`` prices SecAgg / SecAgg+ on the simulated clock and the byte ledger and fails a
round whose survivors fall below the threshold (no cryptography). docs/privacy.md says how they plug in.
"""

from . import gaussian, none, secagg  # noqa: F401  (registration)
from .base import PRIVACY, Privacy, PrivacyContext
from .secagg import SECURE_AGGREGATION, SecAggBill, SecureAggregation

__all__ = ["PRIVACY", "SECURE_AGGREGATION", "Privacy", "PrivacyContext", "SecAggBill", "SecureAggregation"]
