"""GlueFL's upload encoding: three of its steps as they were (torch) against the forms it uses now, side by side.

A GlueFL round on the 159,010-parameter MLP (39 launched clients) spent about 40 % of its CPU in the clients'
upload encoding. Three of its steps have a faster exact equivalent: choosing each row's top k of the largest
tensor (``torch.topk`` + scatter, now :func:`turnout.compressors.sparse.largest_k`), counting each row's sent
positions (``mask.sum(dim=1)`` over a bool tensor, now ``np.count_nonzero``) and testing each row for NaN / inf
(``isfinite(x).all(dim=1)``, now :func:`turnout.core.finite.finite_rows`, which looks at the rows' sums first).
This times both forms on the same cohort, alternating, checks they give the same answer, and times the whole
``encode_uploads`` (on a round that uses the shared mask) to show the share they took.

    python bench/upload_encoding.py                    # GlueFL's page cohort: 39 × 159,010, q = 0.2, q_shr = 0.16
    python bench/upload_encoding.py --clients 100 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from executors import machine  # bench/executors.py: the machine line every bench prints

from turnout.compressors.gluefl import GlueFLMaskShifting
from turnout.compressors.sparse import Layout, largest_k
from turnout.core.finite import finite_rows
from turnout.core.records import Cohort

LAYOUT = [784 * 200, 200, 200 * 10, 10]  # the MLP(200) on 28 × 28 inputs, 10 classes: 159,010 parameters


def best_ms(fn, repeats: int) -> float:
    """The median of ``repeats`` process-CPU timings, in ms (CPU time: the machine may be shared)."""
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=39)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dim, k = sum(LAYOUT), args.clients
    gen = torch.Generator().manual_seed(0)
    comp = GlueFLMaskShifting(GlueFLMaskShifting.Config(ratio=0.2, shared_ratio=0.16), dim, 0, None, layout=LAYOUT)
    comp.server_update(0, torch.randn(dim, generator=gen))  # round 0 regenerates: the shared mask for round 1
    clients = np.arange(k)
    comp.begin_round(1, Cohort(clients, np.full(k, 1.0 / k), True, tags={}))
    updates = torch.randn(k, dim, generator=gen)
    updates[3, 17] = float("nan")
    _, _ = comp.encode_uploads(1, clients, updates)  # warm: residuals allocated
    mask = comp.last_upload_support

    def encode():
        comp.begin_round(1, Cohort(clients, np.full(k, 1.0 / k), True, tags={}))
        comp.encode_uploads(1, clients, updates)

    mag = updates.abs()[:, :LAYOUT[0]].nan_to_num(nan=0.0)  # the largest tensor, as a regeneration round sees it
    kk = Layout(LAYOUT, dim).k_for(0.2)[0]

    def topk_scatter():
        out = torch.zeros(mag.shape, dtype=torch.bool)
        return out.scatter_(1, torch.topk(mag, kk, dim=1, sorted=False).indices, True)

    assert torch.equal(topk_scatter(), largest_k(mag, kk))
    assert np.array_equal(mask.sum(dim=1).numpy(), np.count_nonzero(mask.numpy(), axis=1))
    assert torch.equal(torch.isfinite(updates).all(dim=1), finite_rows(updates))
    rows = []
    for name, old, new in [
        ("top k, largest tensor", topk_scatter, lambda: largest_k(mag, kk)),
        ("count sent positions", lambda: mask.sum(dim=1), lambda: np.count_nonzero(mask.numpy(), axis=1)),
        ("rows finite", lambda: torch.isfinite(updates).all(dim=1), lambda: finite_rows(updates)),
    ]:
        t_old, t_new = [], []
        for _ in range(3):  # alternate, so that drift on a shared machine hits both
            t_old.append(best_ms(old, args.repeats))
            t_new.append(best_ms(new, args.repeats))
        rows.append((name, min(t_old), min(t_new)))
    whole = min(best_ms(encode, max(1, args.repeats // 2)) for _ in range(3))
    print(machine())
    print(f"GlueFL encode_uploads, {k} × {dim:,} floats, round with the shared mask: {whole:.1f} ms CPU (now)")
    print(f"{'step':<22} {'before ms':>10} {'now ms':>8} {'before/now':>11} {'saved / encode':>15}")
    for name, a, b in rows:
        # counting runs twice per round (all sent positions, then those in the shared mask)
        calls = 2 if name.startswith("count") else 1
        print(f"{name:<22} {a:>10.2f} {b:>8.2f} {a / b:>10.1f}x {calls * (a - b) / whole:>14.0%}")


if __name__ == "__main__":
    main()
