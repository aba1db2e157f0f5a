"""FedGS (Wang et al., AAAI 2023): graph-based sampling under arbitrary client availability.

Each round FedGS picks ``M = min(N_a, K)`` of the ``N_a`` available clients to (a) keep the
per-client sampling counts balanced (low variance of the counts ``v``) and (b) keep the cohort
spread out on the 3DG, a graph whose shortest-path distances say how different two clients'
data are (FedGS Eqs. (10)–(17); ``WwZzz/FedGS`` ``algorithm/*_fedgs.py``; ``docs/algorithms/fedgs.md``):

    maximise  Σ_i d_i s_i + α·2/(M(M−1)) Σ_{i<j} H_ij s_i s_j   s.t.  Σ s = M,  s ∈ {0,1}^{N_a}

(:mod:`.fedgs_solver` defines ``d``). The 3DG (:mod:`.fedgs_graph`) comes from

* ``oracle`` — label proportions (``world.label_hist``), or each client's true local model for
  the synthetic task (``world.extras["optimal"]``), built when the selector is;
* ``update_cosine`` — cosine similarity of the clients' uploads (``RoundFeedback.updates``),
  learned online;
* ``functional`` — cosine similarity of each local model's mean logits on a Gaussian-noise batch,
  through the read-only model view the world context carries (``world.model``: forward pass,
  server inputs, current global parameters).

Design decisions where paper and code leave room are written next to the code they concern and
summarised in :class:`FedGS`.
"""

from __future__ import annotations

import time
from typing import Literal, Optional

import numpy as np
import torch
from pydantic import Field

from ..config.base import Seconds, StrictModel
from ..config.limits import MAX_CLIENTS, MAX_COUNT, MAX_FEATURES, MAX_ROUNDS, MAX_SCALE
from ..core import rng as rngmod
from ..core.capabilities import WorldNeed
from ..core.errors import ConfigError
from ..world.context import WorldContext
from . import fedgs_graph as graphmod
from . import fedgs_solver as solvermod
from .base import SELECTORS, Cohort, RoundFeedback, SelectionContext, Selector

#: Stream purposes (all FedGS randomness is keyed by the run seed).
SKETCH_PURPOSE = "fedgs/sketch"
NOISE_PURPOSE = "fedgs/noise"


@SELECTORS.register("fedgs")
class FedGS(Selector):
    """FedGS: balance per-client sampling counts while keeping the cohort far apart on a data-similarity graph (3DG).

    Decisions (``docs/algorithms/fedgs.md#selection-problem``; the code's choices followed unless noted):

    * Edge rule ``exp(−V²/σ)`` for ``V > ε`` with the code's ``ε = 0.01``, ``σ = 0.1`` (the paper
      writes ``exp(−V/σ²)``, ``ε = 0.1``, ``σ² = 0.01``); similarity normalised as the code does (zero
      diagonal inside the min/max).
    * Balancing term with the code's ``M/N_a`` (the paper's is ``M/N``; it never changes the choice).
    * ``α`` defaults to 1.0 (the paper's Fig. 4 value, in its grid {0, 0.5, 1, 2, 5}); the code's
      unused ``algo_para`` default is 0.1.
    * ``M = min(N_a, launch)``: under over-commitment FedGS picks all ``launch`` clients with one
      solve; the round's target stays ``min(K, M)``.
    * Candidates are shuffled with the round's selection stream before solving, so ties (e.g.
      equal counts at α = 0) are broken at random, not by client id.
    * Warm-up round (FedGS: round 0 trains every client from ``x^0`` to build the graph and does
      not update the model): ``warmup: auto`` does this for the learned graphs and skips it for
      ``oracle`` (deviation: the oracle graph needs no training, so we do not spend a round;
      ``warmup: all`` reproduces FedGS's extra round). ``all`` launches every client, ignoring
      availability ("all clients are available at the start"); ``available`` launches the
      available ones only. The warm-up cohort has absolute weight 0, so the model does not move,
      and it does not count towards the balancing counts ``v`` (FedGS neither).
    * Learned graphs keep each client's latest report; clients without one are isolated nodes
      (distance 1, the maximum). The graph is rebuilt when a client reports for the first time
      and, with ``rebuild_every = k > 0``, every k rounds when anything changed. Only reports the
      server received on time (``aggregated``) are used. Uploads longer than ``sketch_dim`` are
      count-sketched (inner products preserved in expectation) to bound memory.
    * Nobody available → empty cohort; one available → that client (FedGS's ``N_a == 1`` rule).
    * Aggregation weights ``n_k``, normalised over the reports received (FedGS Eq. 18).

    Per-round solver statistics (solver, objective, hit_limit, solve time) are in :meth:`stats`.

    ``graph: functional`` needs ``world.model`` (``forward(flat_params, x)``, ``server_inputs`` and
    ``global_params()``, the model the cohort being selected will start from); a world built
    without a model (an availability plot, a hand-made test world) refuses it at build time.
    """

    needs_training = "compares clients through their labels, model outputs or updates"
    reads_client_data = "compares clients through their labels, model outputs or updates (its graph)"

    class Config(StrictModel):
        clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS,
                                       description="K: reports wanted per round (FedGS's M = min(N_a, K))")
        alpha: float = Field(1.0, ge=0.0, le=MAX_SCALE,
                             description="α: weight of the 3DG-distance term "
                                         "(paper grid 0, 0.5, 1, 2, 5; 0 = pure balancing)")
        graph: Literal["oracle", "functional", "update_cosine"] = Field(
            "oracle", description="3DG features: oracle (label proportions / synthetic local optima), "
                                  "functional (mean logits on noise; needs engine hooks), update_cosine (uploads)")
        epsilon: float = Field(graphmod.DEFAULT_EPSILON, ge=0.0, le=MAX_SCALE,
                               description="ε: no edge when the normalised similarity is ≤ ε "
                                           "(code 0.01; paper 0.1)")
        sigma: float = Field(graphmod.DEFAULT_SIGMA, gt=0.0, le=MAX_SCALE,
                             description="σ in the edge length exp(−V²/σ) (code 0.1; paper σ² = 0.01)")
        clamp_negative: bool = Field(False, description="similarity max(cos, 0) as in the paper's Eqs. 11–12 "
                                                        "(the FedGS code does not clamp)")
        solver: Literal["heuristic", "exact", "auto"] = Field(
            "heuristic", description="heuristic: greedy + swap local search; exact: HiGHS MILP (scipy) on a "
                                     "linearisation; auto: exact when N_a ≤ exact_max_available")
        exact_max_available: int = Field(20, ge=2, le=1000, description="largest N_a that solver: auto solves exactly")
        max_swaps: int = Field(solvermod.MAX_SWAPS, ge=1, le=MAX_COUNT,
                               description="heuristic: most 1-swap improvements per local search (a work limit, so "
                                           "the same seed gives the same cohorts on any machine)")
        node_limit: int = Field(solvermod.NODE_LIMIT, ge=1, le=MAX_COUNT,
                                description="exact: most HiGHS branch-and-bound nodes per solve (a work limit)")
        time_limit_s: Optional[Seconds] = Field(
            None,
            description="optional wall-clock limit per solve on top of the work limits (FedGS gave Gurobi 5 s); "
                        "NOT reproducible: a solve it cuts depends on the machine's speed and load at that moment")
        heuristic_starts: int = Field(8, ge=1, le=1000, description="greedy starting points of the heuristic")
        warmup: Literal["auto", "all", "available", "none"] = Field(
            "auto", description="round-0 graph-building round: auto = all for learned graphs, none for oracle")
        rebuild_every: int = Field(0, ge=0, le=MAX_ROUNDS,
                                   description="learned graphs: also rebuild every k rounds (0: only when "
                                               "a client reports for the first time)")
        sketch_dim: int = Field(4096, ge=1, le=MAX_FEATURES,
                                description="update_cosine: count-sketch uploads longer than this")
        max_clients: int = Field(5000, ge=1, le=MAX_CLIENTS,
                                 description="refuse larger populations: the 3DG is a dense N×N matrix "
                                             "and Floyd–Warshall is O(N³) (~2.5 s at 1,000 clients, "
                                             "~20 s at 2,000, minutes at 5,000)")

    state_attrs = ("counts", "warmed", "features", "known", "distances", "_new_known", "_changed", "_built_round",
                   "_stats")
    #: derived from the seed (sketch, noise batch) or set at selection and read in the same round
    scratch_attrs = ("_sketch", "_noise", "_start_params")

    fills_free_slots = True

    @classmethod
    def cannot_fill_slots(cls, cfg: Config) -> str:
        warmup = cfg.warmup if cfg.warmup != "auto" else ("none" if cfg.graph == "oracle" else "all")
        return "" if warmup == "none" else (f"its warm-up round (warmup: {warmup}) launches every "
                                            f"{'client' if warmup == 'all' else 'available client'} at once; "
                                            "set selector.warmup: none")

    @classmethod
    def memory_bytes(cls, cfg: Config, sizes) -> int:
        """For the memory pre-flight: the dense N×N distances with Floyd–Warshall's and the similarity's
        temporaries (about four such matrices), and a warm-up round that trains every client at once."""
        n = sizes.num_clients
        if n > cfg.max_clients:  # refused with its own message when the selector is built
            return 0
        warmup = cfg.warmup if cfg.warmup != "auto" else ("none" if cfg.graph == "oracle" else "all")
        return 4 * 8 * n * n + (2 * 4 * sizes.dim * n if warmup == "all" else 0)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.reads_uploads = cfg.graph == "update_cosine"
        n = self.num_clients
        if n > cfg.max_clients:
            raise ConfigError("selector.max_clients", cfg.max_clients,
                              f"FedGS's 3DG is a dense N×N matrix; this population has {n} clients "
                              "(raise max_clients if you have the memory and time)")
        self.counts = np.zeros(n, dtype=np.int64)  # v: times selected (warm-up excluded)
        self.warmed = np.zeros(1, dtype=bool)
        self._warmup = cfg.warmup if cfg.warmup != "auto" else ("none" if cfg.graph == "oracle" else "all")
        if self._warmup == "none":
            self.warmed[0] = True
        self.features: np.ndarray | None = None  # learned graphs: (N, d) latest feature per client
        self.known = np.zeros(n, dtype=bool)
        self._sketch: graphmod.CountSketch | None = None
        self._noise: torch.Tensor | None = None
        self._start_params: torch.Tensor | None = None
        self._new_known = False
        self._changed = False
        self._built_round = -1
        self.distances = np.ones((n, n)) - np.eye(n)  # H: no information yet → every pair at 1
        self._stats: dict[str, list] = {k: [] for k in (
            "round", "solver", "objective", "hit_limit", "optimal", "solve_ms", "n_available", "m", "bound")}
        if cfg.graph == "functional" and world.model is None:
            raise ConfigError("selector.graph", "functional", "needs the global model, which this world has none of; "
                                                              "use graph: oracle or update_cosine")
        if cfg.graph == "oracle":
            self.distances = graphmod.distances_from_features(
                self.oracle_features(world), epsilon=cfg.epsilon, sigma=cfg.sigma, clamp_negative=cfg.clamp_negative)
            self.known[:] = True
            self._built_round = 0

    @staticmethod
    def oracle_features(world: WorldContext) -> np.ndarray:
        """The synthetic task's local optima ``(W_k, b_k)`` when present, else the label proportions."""
        opt = world.extras.get("optimal") if world.extras else None
        if opt is not None:
            opt = np.asarray(opt, dtype=np.float64).reshape(world.num_clients, -1)
            return opt
        return graphmod.label_features(world.label_hist)

    @classmethod
    def needs_simulator(cls, cfg: Config) -> WorldNeed | None:
        if cfg.graph == "oracle":
            return WorldNeed("graph", "oracle",
                             "builds the 3DG from every client's true label mix or local optimum",
                             "selector.graph: update_cosine (learned from the clients' uploads)")
        return None

    # ------------------------------------------------------------------------------------------
    def select(self, ctx: SelectionContext) -> Cohort:
        available = np.asarray(ctx.available, dtype=np.int64)
        if self.cfg.graph == "functional":
            # the model this round's cohort trains from, for the functional features in observe()
            self._start_params = torch.as_tensor(self.world.model.global_params()).detach().clone()
        if not self.warmed[0]:
            return self._warmup_cohort(ctx, available)
        self._maybe_rebuild(ctx.round)
        n_a = len(available)
        m = min(n_a, int(ctx.launch))
        t0 = time.perf_counter()
        if m <= 0:
            chosen = np.zeros(0, dtype=np.int64)
            self._record(ctx.round, "empty", 0.0, False, True, time.perf_counter() - t0, n_a, 0, np.nan)
        elif n_a == 1:
            chosen = available  # FedGS: if len(active_clients) == 1 return active_clients
            self._record(ctx.round, "single", 0.0, False, True, time.perf_counter() - t0, n_a, 1, np.nan)
        else:
            cand = available[ctx.rng.permutation(n_a)]  # random tie-breaking (see the class docstring)
            prob = solvermod.build_problem(self.distances[np.ix_(cand, cand)], self.counts[cand],
                                           float(self.counts.mean()), m, self.num_clients, self.cfg.alpha)
            sol = solvermod.solve(prob, self.cfg.solver, self.cfg.time_limit_s, self.cfg.exact_max_available,
                                  self.cfg.heuristic_starts, self.cfg.max_swaps, self.cfg.node_limit)
            chosen = np.sort(cand[sol.chosen])
            self._record(ctx.round, sol.solver, sol.objective, sol.hit_limit, sol.optimal, sol.solve_s, n_a, m,
                         sol.bound)
        self.counts[chosen] += 1
        return Cohort(chosen, self.n_train[chosen].astype(np.float64), normalize=True,
                      target=min(self.target(), len(chosen)))

    def _warmup_cohort(self, ctx: SelectionContext, available: np.ndarray) -> Cohort:
        clients = np.arange(self.num_clients, dtype=np.int64) if self._warmup == "all" else available
        if len(clients):
            self.warmed[0] = True
        self._record(ctx.round, "warmup", np.nan, False, True, 0.0, len(available), len(clients), np.nan)
        # absolute weight 0: every client trains, the global model does not move (FedGS round 0)
        return Cohort(clients, np.zeros(len(clients)), normalize=False, target=len(clients))

    def observe(self, feedback: RoundFeedback) -> None:
        if self.cfg.graph == "oracle":
            return
        ok = np.array(feedback.aggregated, dtype=bool)  # a writable copy: torch reads it as a mask
        if not ok.any():
            return
        clients = np.asarray(feedback.clients, dtype=np.int64)[ok]
        updates = feedback.updates[torch.from_numpy(ok)]
        feats = self._update_features(updates) if self.cfg.graph == "update_cosine" else \
            self._functional_features(updates)
        if self.features is None:
            self.features = np.zeros((self.num_clients, feats.shape[1]), dtype=np.float32)
        self.features[clients] = feats
        self._new_known |= bool((~self.known[clients]).any())
        self.known[clients] = True
        self._changed = True

    # ------------------------------------------------------------------------------------------
    def _update_features(self, updates: torch.Tensor) -> np.ndarray:
        u = updates.detach().to(torch.float32).reshape(len(updates), -1)
        if u.shape[1] > self.cfg.sketch_dim:
            if self._sketch is None:
                self._sketch = graphmod.CountSketch(u.shape[1], self.cfg.sketch_dim,
                                                    rngmod.stream(self.seed, SKETCH_PURPOSE))
            u = self._sketch(u)
        return u.numpy()

    def _functional_features(self, updates: torch.Tensor) -> np.ndarray:
        if self._start_params is None:
            raise RuntimeError("FedGS functional graph: observe() before select()")
        if self._noise is None:
            self._noise = graphmod.noise_inputs(torch.as_tensor(self.world.model.server_inputs),
                                                rngmod.torch_generator(self.seed, NOISE_PURPOSE))
        local = self._start_params[None, :] + updates.detach().to(self._start_params.dtype)
        return graphmod.functional_features(self.world.model.forward, local, self._noise)

    def _maybe_rebuild(self, round: int) -> None:
        if self.cfg.graph == "oracle" or self.features is None:
            return
        due = self.cfg.rebuild_every > 0 and self._changed and round - self._built_round >= self.cfg.rebuild_every
        if self._new_known or due:
            self.distances = graphmod.distances_from_features(
                self.features, self.known, epsilon=self.cfg.epsilon, sigma=self.cfg.sigma,
                clamp_negative=self.cfg.clamp_negative)
            self._built_round = round
            self._new_known = self._changed = False

    def _record(self, round: int, solver: str, objective: float, hit: bool, optimal: bool, solve_s: float,
                n_a: int, m: int, bound: float) -> None:
        s = self._stats
        s["round"].append(round)
        s["solver"].append(solver)
        s["objective"].append(objective)
        s["hit_limit"].append(hit)
        s["optimal"].append(optimal)
        s["solve_ms"].append(solve_s * 1e3)
        s["n_available"].append(n_a)
        s["m"].append(m)
        s["bound"].append(bound)

    def stats(self) -> dict[str, np.ndarray]:
        """Per-round solver statistics, one entry per ``select`` call.

        ``solver``: ``heuristic``, ``exact``, ``closed_form`` (no pair term or everyone chosen),
        ``single`` (one available), ``empty`` (nobody), ``warmup``; ``objective`` (FedGS's
        objective of the chosen set), ``hit_limit`` (the wall-clock limit stopped the solver),
        ``optimal`` (proven), ``solve_ms``, ``n_available``, ``m`` (clients picked), ``bound``
        (HiGHS's upper bound on the optimum, exact solves only).
        """
        s = self._stats
        return {
            "round": np.asarray(s["round"], dtype=np.int64), "solver": np.asarray(s["solver"], dtype=object),
            "objective": np.asarray(s["objective"], dtype=np.float64),
            "hit_limit": np.asarray(s["hit_limit"], dtype=bool), "optimal": np.asarray(s["optimal"], dtype=bool),
            "solve_ms": np.asarray(s["solve_ms"], dtype=np.float64),
            "n_available": np.asarray(s["n_available"], dtype=np.int64), "m": np.asarray(s["m"], dtype=np.int64),
            "bound": np.asarray(s["bound"], dtype=np.float64),
        }

    def round_metrics(self) -> dict[str, object]:
        """The last solve's solver, objective and limit flag for ``rounds.csv`` (wall-clock solve
        times stay out of the table, which must be identical across runs; see :meth:`stats`)."""
        s = self._stats
        if not s["round"]:
            return {}
        return {"fedgs_solver": s["solver"][-1], "fedgs_objective": float(s["objective"][-1]),
                "fedgs_hit_limit": bool(s["hit_limit"][-1])}
