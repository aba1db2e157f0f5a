"""The coordinate ledger's ``record``: the dense-round path against the index path, side by side in one run.

A round that changes (almost) every coordinate — any dense FedAvg round — used to be recorded by
gathering every changed index and re-binning its previous round. ``CoordinateLedger.record`` now counts
the few coordinates that did not change instead, when at least 90 % did. This times both on the same
masks (the index path is the general one, kept for sparse rounds) for a 2.16 M-parameter model
(``cnn_fedavg`` on 3×32×32) and checks they leave the same state.

    python bench/ledger_record.py
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from turnout.world.ledger import CoordinateLedger

DIM = 2_156_490
ROUNDS = 30


def index_path(ledger: CoordinateLedger, round: int, changed: np.ndarray) -> None:
    """The general path of ``record``, as it runs for sparse masks."""
    idx = np.flatnonzero(changed)
    old = ledger.last_changed[idx]
    ledger.hist -= np.bincount(old + 1, minlength=len(ledger.hist))[: len(ledger.hist)]
    ledger.hist[round + 1] += len(idx)
    ledger.last_changed[idx] = round


def main() -> None:
    print(f"machine: {platform.platform()} | {os.cpu_count()} cores | numpy {np.__version__}")
    print(f"{DIM:,} coordinates, {ROUNDS} rounds a mask; mean ms per record")
    rng = np.random.default_rng(0)
    for share in (1.0, 0.97, 0.91, 0.85, 0.6):
        mask = np.ones(DIM, bool) if share == 1.0 else rng.random(DIM) < share
        general, dense = CoordinateLedger(DIM, 1500), CoordinateLedger(DIM, 1500)
        t_general = t_dense = 0.0
        for r in range(ROUNDS):
            m = mask if r % 2 == 0 else np.roll(mask, r)
            t0 = time.perf_counter()
            index_path(general, r, m)
            t_general += time.perf_counter() - t0
            t0 = time.perf_counter()
            dense.record(r, m)
            t_dense += time.perf_counter() - t0
        same = np.array_equal(general.hist, dense.hist) and np.array_equal(general.last_changed, dense.last_changed)
        print(f"changed {share:.2f}: index path {t_general / ROUNDS * 1e3:6.2f} ms, "
              f"record {t_dense / ROUNDS * 1e3:6.2f} ms, ratio {t_dense / t_general:.2f}, same state: {same}")


if __name__ == "__main__":
    main()
