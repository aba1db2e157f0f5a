"""Progress bar for long runs: variant, seed, round, last accuracy, ETA (tqdm)."""

from __future__ import annotations

import math
import sys

from tqdm import tqdm


class ProgressBar:
    """A tqdm bar over all rounds of all runs; a no-op when disabled."""

    def __init__(self, total: int, disable: bool = False):
        self.bar = tqdm(total=total, disable=disable, unit="round", dynamic_ncols=True,
                        mininterval=0.5 if sys.stderr.isatty() else 10.0, file=sys.stderr)
        self.acc: dict[tuple[str, int], float] = {}

    def update(self, variant: str, seed: int, round: int, row: dict) -> None:
        acc = row.get("accuracy", math.nan)
        if acc == acc:
            self.acc[(variant, seed)] = acc
        last = self.acc.get((variant, seed), math.nan)
        self.bar.set_postfix_str(f"{variant} seed={seed} round={round + 1} acc={last:.3f}", refresh=False)
        self.bar.update(1)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
