"""FedGS's per-round selection problem (FedGS Eqs. (14)–(17), in its code's form) and two Gurobi-free solvers.

Over the ``n = N_a`` available clients, with ``s ∈ {0,1}^n`` and ``Σ s = M``, FedGS maximises

    f(s) = Σ_i d_i s_i + Σ_{i<j} W_ij s_i s_j

with ``W = α · 2/(M(M−1)) · H[A,A]`` (shortest-path distances on the 3DG: keep the cohort spread
out) and ``d_i = −(2(v_i − v̄ − M/N_a) + 1)/(N − 1)`` (prefer rarely-sampled clients). This is the
FedGS code's ``Σ_{i≤j} H̃_ij s_i s_j`` with ``H̃``'s diagonal written as ``d`` (``s_i² = s_i``).

* :func:`solve_heuristic` — greedy construction + best-improvement 1-swap local search, from a
  few starting points, at most ``max_swaps`` swaps per search. ``O(M·n)`` per greedy pass and
  ``O(M·(n−M))`` per swap step, all numpy.
* :func:`solve_exact` — HiGHS (``scipy.optimize.milp``) on a linearisation: one continuous
  ``y_ij ∈ [0,1]`` per pair with ``y_ij ≤ s_i``, ``y_ij ≤ s_j`` and the cardinality cuts
  ``Σ_j y_ij = (M − 1) s_i``. Those cuts make ``y_ij = s_i s_j`` exact at every integer ``s``
  (a chosen client has exactly ``M − 1`` chosen partners, each ``y ≤ 1``), so ``y_ij ≥ s_i+s_j−1``
  is implied, and they give a far tighter LP bound than the textbook McCormick form. Because
  ``W ≥ 0`` and we maximise, no lower bound on ``y`` is needed either. HiGHS explores at most
  ``node_limit`` branch-and-bound nodes; the heuristic's answer is kept when it stops there
  with nothing better.

Both limits count work, not seconds, so a seed gives the same cohorts on any machine under any
load. A wall-clock ``time_limit_s`` (FedGS gave Gurobi 5 s) can be added on top; a solve cut by
it depends on the machine's speed at that moment, so runs using it are not reproducible.

Closed forms (both solvers, reported as optimal): ``M ≥ n`` (take all), ``M ≤ 1`` or ``α = 0``
(no pair term: take the ``M`` largest ``d``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

#: Relative tolerance below which a swap is not an improvement (guards against cycling on ties).
_TOL = 1e-12
#: Default work limits: 1-swap improvements per local search, HiGHS branch-and-bound nodes per solve.
MAX_SWAPS = 1_000
NODE_LIMIT = 10_000


@dataclass
class Problem:
    """One round's instance: pair weights ``w`` (symmetric, zero diagonal), linear term ``d``, size ``m``."""

    w: np.ndarray
    d: np.ndarray
    m: int

    @property
    def n(self) -> int:
        return len(self.d)

    def objective(self, chosen: np.ndarray) -> float:
        """``f(s)`` for the chosen indices (pairs counted once)."""
        c = np.asarray(chosen, dtype=np.int64)
        return float(self.d[c].sum() + 0.5 * self.w[np.ix_(c, c)].sum())

    def pair_free(self) -> bool:
        return self.m <= 1 or not np.any(self.w)


@dataclass
class Solution:
    """What a solver returned, for the selector's per-round statistics."""

    chosen: np.ndarray  # indices into the problem, sorted
    objective: float
    solver: str  # "heuristic", "exact" or "closed_form"
    hit_limit: bool  # stopped by a work (or wall-clock) limit before finishing
    optimal: bool  # proven optimal (closed form or HiGHS within its gap)
    solve_s: float
    bound: float = float("nan")  # HiGHS dual bound on the optimum (exact only)


def build_problem(dist: np.ndarray, counts: np.ndarray, mean_count: float, m: int, num_clients: int,
                  alpha: float) -> Problem:
    """The FedGS code's instance for the available clients (``dist = H[A,A]``, ``counts = v[A]``).

    ``2/(M(M−1))`` is the code's scale of the distance term (the paper's ``1/(N(N−1))`` differs
    only by a constant factor). When ``M = 1`` there are no pairs and the code's ``2/(M(M−1))``
    would divide by zero; the pair term is simply dropped. [QUIRK, kept] the balancing term uses
    ``M/N_a`` where the paper writes ``M/N``; with ``Σ s = M`` fixed it shifts the objective by a
    constant and never changes the argmax. ``1/(N − 1)`` uses the whole population's ``N``
    (taken as 1 when ``N = 1``).
    """
    n_a = len(counts)
    scale = alpha * 2.0 / (m * (m - 1)) if m > 1 else 0.0
    w = np.asarray(dist, dtype=np.float64) * scale
    w = 0.5 * (w + w.T)
    np.fill_diagonal(w, 0.0)
    z = 2.0 * (np.asarray(counts, dtype=np.float64) - mean_count - m / max(n_a, 1)) + 1.0
    d = -z / max(num_clients - 1, 1)
    return Problem(w, d, int(m))


def _closed_form(p: Problem, t0: float) -> Solution | None:
    if p.m >= p.n:
        chosen = np.arange(p.n)
    elif p.m <= 0:
        chosen = np.zeros(0, np.int64)
    elif p.pair_free():
        # stable sort: ties keep the problem's order (the selector shuffles candidates per round)
        chosen = np.sort(np.argsort(-p.d, kind="stable")[:p.m])
    else:
        return None
    return Solution(chosen, p.objective(chosen), "closed_form", False, True, time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------------
def _greedy(p: Problem, first: int) -> np.ndarray:
    """Add the client with the best marginal gain ``d_j + Σ_{i∈S} w_ij`` until ``M`` are chosen."""
    inside = np.zeros(p.n, dtype=bool)
    inside[first] = True
    gain = p.d + p.w[first]
    for _ in range(p.m - 1):
        j = int(np.argmax(np.where(inside, -np.inf, gain)))
        inside[j] = True
        gain += p.w[j]
    return inside


def _local_search(p: Problem, inside: np.ndarray, max_swaps: int, deadline: float) -> tuple[np.ndarray, bool]:
    """Best-improvement 1-swap until no swap improves ``f`` (or ``max_swaps`` swaps, or the deadline)."""
    g = p.w[:, inside].sum(axis=1)  # g_x = Σ_{k∈S} w_xk
    scale = max(1.0, float(np.abs(p.d).max(initial=0.0)), float(p.w.max(initial=0.0)))
    swaps = 0
    while True:
        if time.perf_counter() > deadline:
            return inside, True
        ins, outs = np.flatnonzero(inside), np.flatnonzero(~inside)
        a = p.d + g
        # swap out i, in j: Δ = (d_j + g_j − w_ij) − (d_i + g_i)
        delta = a[outs][None, :] - p.w[np.ix_(ins, outs)] - a[ins][:, None]
        k = int(np.argmax(delta))
        bi, bj = divmod(k, len(outs))
        if delta[bi, bj] <= _TOL * scale:
            return inside, False
        if swaps == max_swaps:
            return inside, True
        swaps += 1
        i, j = ins[bi], outs[bj]
        inside[i], inside[j] = False, True
        g += p.w[:, j] - p.w[:, i]


def _deadline(t0: float, time_limit_s: float | None) -> float:
    return np.inf if time_limit_s is None else t0 + time_limit_s


def solve_heuristic(p: Problem, time_limit_s: float | None = None, starts: int = 8,
                    max_swaps: int = MAX_SWAPS) -> Solution:
    """Greedy + 1-swap local search from up to ``starts`` starting clients; the best result wins.

    Start 1 is the plain greedy (its first pick is the largest ``d``). Further starts force the
    first pick to the clients with the largest ``d_i + mean_j w_ij`` not yet tried, which puts
    far-out clients first. A local search that reaches ``max_swaps`` swaps stops there and sets
    ``hit_limit``, and so does the wall-clock ``time_limit_s`` when given (not reproducible: at
    least one start always completes its greedy pass, the rest is cut at the deadline).
    """
    t0 = time.perf_counter()
    closed = _closed_form(p, t0)
    if closed is not None:
        return closed
    deadline = _deadline(t0, time_limit_s)
    score = p.d + p.w.sum(axis=1) / max(p.n - 1, 1) * (p.m - 1)
    order = [int(np.argmax(p.d))] + [int(i) for i in np.argsort(-score, kind="stable")]
    firsts = list(dict.fromkeys(order))[:max(1, starts)]
    best, best_f, hit = None, -np.inf, False
    for s, first in enumerate(firsts):
        if s and time.perf_counter() > deadline:
            hit = True
            break
        inside, limited = _local_search(p, _greedy(p, first), max_swaps, deadline)
        hit |= limited
        chosen = np.flatnonzero(inside)
        f = p.objective(chosen)
        if f > best_f:
            best, best_f = chosen, f
        if limited and time.perf_counter() > deadline:
            break
    return Solution(best, best_f, "heuristic", hit, False, time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------------
def _linearised(p: Problem):
    """``min −f`` over ``x = [s (n binary), y (n(n−1)/2 continuous)]`` with the cuts described above."""
    n, m = p.n, p.m
    iu, ju = np.triu_indices(n, 1)
    npair = len(iu)
    c = -np.concatenate([p.d, p.w[iu, ju]])
    pair_cols = n + np.arange(npair)
    # Σ s = M
    card = sparse.csr_matrix((np.ones(n), (np.zeros(n, np.int64), np.arange(n))), shape=(1, n + npair))
    # Σ_{j≠i} y_ij − (M−1) s_i = 0, one row per client
    rows = np.concatenate([iu, ju, np.arange(n)])
    cols = np.concatenate([pair_cols, pair_cols, np.arange(n)])
    vals = np.concatenate([np.ones(2 * npair), np.full(n, -(m - 1.0))])
    degree = sparse.csr_matrix((vals, (rows, cols)), shape=(n, n + npair))
    # y_ij − s_i ≤ 0 and y_ij − s_j ≤ 0
    r2 = np.arange(2 * npair)
    link = sparse.csr_matrix(
        (np.concatenate([np.ones(2 * npair), -np.ones(2 * npair)]),
         (np.concatenate([r2, r2]), np.concatenate([pair_cols, pair_cols, iu, ju]))),
        shape=(2 * npair, n + npair))
    constraints = [LinearConstraint(card, m, m), LinearConstraint(degree, 0.0, 0.0),
                   LinearConstraint(link, -np.inf, 0.0)]
    integrality = np.concatenate([np.ones(n), np.zeros(npair)])
    return c, constraints, integrality, Bounds(0.0, 1.0)


def solve_exact(p: Problem, time_limit_s: float | None = None, mip_rel_gap: float = 1e-6,
                node_limit: int = NODE_LIMIT, max_swaps: int = MAX_SWAPS) -> Solution:
    """HiGHS branch-and-bound on the linearised problem, warm-started in effect by the heuristic.

    Returns the HiGHS optimum when it proves one (within ``mip_rel_gap``); at ``node_limit``
    nodes (or the optional wall-clock ``time_limit_s``), the better of HiGHS's incumbent and the
    heuristic's answer, with ``hit_limit`` set.
    """
    t0 = time.perf_counter()
    closed = _closed_form(p, t0)
    if closed is not None:
        return closed
    heur = solve_heuristic(p, None if time_limit_s is None else max(0.0, time_limit_s) * 0.1, max_swaps=max_swaps)
    options = {"disp": False, "mip_rel_gap": mip_rel_gap, "node_limit": int(node_limit)}
    if time_limit_s is not None:
        options["time_limit"] = max(1e-3, time_limit_s - (time.perf_counter() - t0))
    c, constraints, integrality, bounds = _linearised(p)
    res = milp(c, constraints=constraints, integrality=integrality, bounds=bounds, options=options)
    hit = res.status != 0  # stopped early: time limit (1) or node limit (HiGHS's "solution limit", 4)
    bound = -float(res.mip_dual_bound) if getattr(res, "mip_dual_bound", None) is not None else float("nan")
    best, best_f, optimal = heur.chosen, heur.objective, False
    if res.x is not None:
        chosen = np.flatnonzero(res.x[:p.n] > 0.5)
        if len(chosen) == p.m:
            f = p.objective(chosen)
            if f >= best_f - 1e-12 * max(1.0, abs(best_f)):
                best, best_f = chosen, f
            optimal = res.status == 0
    return Solution(best, best_f, "exact", bool(hit), optimal, time.perf_counter() - t0, bound)


def solve(p: Problem, method: str = "heuristic", time_limit_s: float | None = None, exact_max_available: int = 30,
          starts: int = 8, max_swaps: int = MAX_SWAPS, node_limit: int = NODE_LIMIT) -> Solution:
    """Dispatch: ``heuristic``, ``exact``, or ``auto`` (exact when ``n ≤ exact_max_available``)."""
    if method == "auto":
        method = "exact" if p.n <= exact_max_available else "heuristic"
    if method == "exact":
        return solve_exact(p, time_limit_s, node_limit=node_limit, max_swaps=max_swaps)
    if method == "heuristic":
        return solve_heuristic(p, time_limit_s, starts, max_swaps)
    raise ValueError(f"unknown FedGS solver {method!r}")
