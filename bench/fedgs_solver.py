"""FedGS selection solvers: heuristic (greedy + swap local search) vs exact (HiGHS MILP via scipy).

Builds random FedGS instances — a 3DG from client features of three kinds (Dirichlet label mixes
like CIFAR-10, two labels per client like FashionMNIST, synthetic local optima), random
sampling counts, α from the paper's grid — and solves each with both solvers. Prints, per
instance, the heuristic/exact objective ratio, the milliseconds per solve and whether HiGHS proved
optimality or hit a limit (the default work limits — HiGHS nodes, heuristic swaps — or an optional
wall-clock --time-limit), then a summary. Also times the heuristic alone on larger available sets,
where the exact solver is not meant to run.

    python bench/fedgs_solver.py                       # 30 available clients, M ∈ {6, 10}, 24 instances
    python bench/fedgs_solver.py --n 20 --instances 50 --time-limit 10   # FedGS/Gurobi's wall-clock style
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from turnout.selectors import fedgs_graph as fg
from turnout.selectors import fedgs_solver as fs

ALPHAS = (0.5, 1.0, 2.0, 5.0)


def instance(rng: np.random.Generator, n: int, m: int, alpha: float, kind: int) -> fs.Problem:
    if kind == 0:
        feats = rng.dirichlet(np.full(10, 0.3), size=n)
    elif kind == 1:
        feats = np.zeros((n, 10))
        for i in range(n):
            feats[i, rng.choice(10, 2, replace=False)] = rng.random(2)
    else:
        feats = rng.normal(rng.normal(0, 0.5, n)[:, None], 1, (n, 610))
    h = fg.distances_from_features(feats)
    counts = rng.integers(0, 5, n)
    return fs.build_problem(h, counts, counts.mean(), m, n, alpha)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="available clients per instance")
    ap.add_argument("--m", type=int, nargs="+", default=[6, 10], help="cohort sizes M")
    ap.add_argument("--instances", type=int, default=24)
    ap.add_argument("--time-limit", type=float, default=None,
                    help="optional wall-clock seconds per solve (FedGS/Gurobi: 5); default: work limits only")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    kinds = ("dirichlet", "two-label", "synthetic")
    print(f"{'#':>3} {'features':>10} {'M':>3} {'α':>4} {'heur/exact':>11} {'heur ms':>8} {'exact ms':>9}"
          "  exact status")
    ratios, th, te, proved, limited = [], [], [], 0, 0
    for i in range(args.instances):
        kind, m, alpha = i % 3, args.m[(i // 3) % len(args.m)], ALPHAS[(i // 6) % len(ALPHAS)]
        p = instance(rng, args.n, m, alpha, kind)
        h = fs.solve_heuristic(p, args.time_limit)
        e = fs.solve_exact(p, args.time_limit)
        r = h.objective / e.objective
        ratios.append(r)
        th.append(h.solve_s * 1e3)
        te.append(e.solve_s * 1e3)
        proved += e.optimal
        limited += e.hit_limit
        status = "optimal" if e.optimal else ("hit limit" if e.hit_limit else "not proved")
        print(f"{i:3d} {kinds[kind]:>10} {m:3d} {alpha:4.1f} {r:11.5f} {h.solve_s * 1e3:8.2f} "
              f"{e.solve_s * 1e3:9.1f}  {status}")
    ratios = np.array(ratios)
    print(f"\nheuristic/exact objective: min {ratios.min():.5f}, mean {ratios.mean():.5f}; "
          f"equal on {(ratios > 1 - 1e-9).sum()}/{len(ratios)}")
    print(f"ms per solve: heuristic mean {np.mean(th):.2f} (max {np.max(th):.2f}), "
          f"exact mean {np.mean(te):.1f} (max {np.max(te):.1f}); exact proved optimal {proved}, hit limit {limited}")
    print("\nheuristic alone on larger available sets (M = N_a / 10):")
    for n in (100, 300, 1000):
        p = instance(rng, n, max(2, n // 10), 1.0, 0)
        t = time.perf_counter()
        h = fs.solve_heuristic(p, args.time_limit)
        print(f"  N_a = {n:5d}, M = {p.m:4d}: {(time.perf_counter() - t) * 1e3:8.1f} ms (hit limit: {h.hit_limit})")


if __name__ == "__main__":
    main()
