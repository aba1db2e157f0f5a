"""What the noised sums released, in (ε, δ), computed by Google's ``dp-accounting`` (nothing hand-written).

Three figures, each for the Gaussian mechanism with noise multiplier z on a sum of reports clipped to C
(client-level DP under add-or-remove-one-client adjacency):

* :func:`standard_epsilon` — what Flower, pfl-research, FLSim and FedML report: Poisson sampling of each
  client at the cohort's rate q = K / N in each of T rounds, amplification included;
* :func:`client_epsilons` — each client's ε for the participation that happened: the composition of the
  Gaussian over the n_i rounds that client was aggregated in, with no amplification. It bounds what the noised
  sums release whatever chose the cohort (a choice that reads client data releases more by itself);
* :class:`AmplifiedLedger` — per-client ε with amplification, for selectors that read no client data and
  declare each round's inclusion probabilities: the RDP of a Poisson-subsampled Gaussian at that round's
  probability, summed per client over the rounds it could have been chosen in (RDP composes by addition).

``dp-accounting`` is an optional extra (``pip install 'turnout[privacy]'``); it is imported here only.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

#: the accountants a run may name: RDP (Mironov 2017; what Flower and Opacus use) and PLD (privacy loss
#: distributions, tighter; pfl-research's default)
ACCOUNTANTS = ("rdp", "pld")


def _dp():
    # lazy: dp-accounting is an optional extra, imported only when a run asks for DP
    import dp_accounting
    from absl import logging as absl_logging

    # its RDP series warns for each order it cannot converge on and then leaves out (a looser, still valid ε)
    absl_logging.set_verbosity(absl_logging.ERROR)
    return dp_accounting


def _accountant(method: str):
    dp = _dp()
    if method == "pld":
        return dp.pld.PLDAccountant()
    return dp.rdp.RdpAccountant()


def _epsilon(event, delta: float, method: str) -> float:
    acc = _accountant(method)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def standard_epsilon(q: float, z: float, rounds: int, delta: float, method: str = "rdp") -> float:
    """ε(δ) of ``rounds`` Poisson-sampled Gaussian rounds at rate ``q`` and noise multiplier ``z``."""
    if rounds <= 0 or q <= 0:
        return 0.0
    if z <= 0:
        return math.inf
    dp = _dp()
    event = dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(min(1.0, q), dp.GaussianDpEvent(z)), int(rounds))
    return _epsilon(event, delta, method)


@lru_cache(maxsize=4096)
def _composed_gaussian_epsilon(count: int, z: float, delta: float, method: str) -> float:
    dp = _dp()
    return _epsilon(dp.SelfComposedDpEvent(dp.GaussianDpEvent(z), int(count)), delta, method)


def client_epsilons(times_aggregated: np.ndarray, z: float, delta: float, method: str = "rdp") -> np.ndarray:
    """Each client's ε(δ): the Gaussian (multiplier ``z``) composed over the rounds it was aggregated in, no
    amplification; 0 for a client never aggregated, ∞ without noise."""
    counts = np.asarray(times_aggregated, np.int64)
    out = np.zeros(len(counts))
    for n in np.unique(counts[counts > 0]):
        out[counts == n] = math.inf if z <= 0 else _composed_gaussian_epsilon(int(n), float(z), float(delta), method)
    return out


# ---- amplified per-client accounting (RDP) ---------------------------------------------------------
def _rdp_accountant():
    return _dp().rdp.RdpAccountant()


@lru_cache(maxsize=65536)
def _poisson_gaussian_rdp(p: float, z: float) -> tuple[float, ...]:
    """The RDP curve (over the accountant's default orders) of one Poisson-subsampled Gaussian round."""
    dp = _dp()
    acc = _rdp_accountant()
    acc.compose(dp.PoissonSampledDpEvent(p, dp.GaussianDpEvent(z)))
    return tuple(float(x) for x in acc._rdp)  # the library's curve; RDP composes by addition over rounds


@lru_cache(maxsize=1)
def _orders() -> tuple[float, ...]:
    return tuple(float(x) for x in _rdp_accountant()._orders)


def rdp_orders() -> np.ndarray:
    """The orders the library's RDP accountant evaluates by default."""
    return np.asarray(_orders(), np.float64)


def epsilon_from_rdp(rdp: np.ndarray, delta: float) -> float:
    """ε(δ) of an RDP curve over :func:`rdp_orders`, converted by the library
    (``rdp_privacy_accountant.compute_epsilon``, what ``RdpAccountant.get_epsilon`` calls)."""
    eps, _ = _dp().rdp.rdp_privacy_accountant.compute_epsilon(rdp_orders(), np.asarray(rdp, np.float64), delta)
    return float(eps)


class AmplifiedLedger:
    """Per client, the summed RDP of the rounds it could have been chosen in, at that round's probability.

    Sound only where the choice reads no client data and each round's inclusion probability is declared:
    the selector's randomness then hides whether a client took part (the trust model: the availability trace
    is independent of the data, and only the server — not other clients — learns the cohort).
    """

    def __init__(self, num_clients: int, z: float):
        self.z = float(z)
        self.rdp = np.zeros((num_clients, len(rdp_orders())))

    def record(self, available: np.ndarray, probabilities: np.ndarray) -> None:
        """Add one round: ``probabilities[j]`` is client ``available[j]``'s chance of being in the cohort."""
        probs = np.minimum(1.0, np.asarray(probabilities, np.float64))
        for p in np.unique(probs[probs > 0]):
            self.rdp[np.asarray(available)[probs == p]] += np.asarray(_poisson_gaussian_rdp(float(p), self.z))

    def epsilons(self, delta: float) -> np.ndarray:
        """Each client's amplified ε(δ) (0 for a client that was never available)."""
        out = np.zeros(len(self.rdp))
        for i, row in enumerate(self.rdp):
            if row.any():
                out[i] = epsilon_from_rdp(row, delta)
        return out
