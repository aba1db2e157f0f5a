"""Progress of a run: rounds done over all units, which unit is running, its last accuracy (tqdm)."""

from __future__ import annotations

import math
import sys

from tqdm import tqdm


class ProgressBar:
    """A tqdm bar over every round of every unit; a no-op when disabled.

    The run layer calls :meth:`start` with the units' sizes and which are already finished (a
    resumed run starts part-way), then the bar is called after every round
    (``bar(variant, seed, round, row)``).
    """

    def __init__(self, disable: bool = False):
        self.disable = disable
        self.bar: tqdm | None = None
        self.sizes: dict[tuple[str, int], int] = {}
        self.done: set[tuple[str, int]] = set()
        self.acc: dict[tuple[str, int], float] = {}

    def start(self, units: list[tuple[str, int, int]], finished: set[tuple[str, int]]) -> None:
        """``units``: (variant, seed, rounds) in run order; ``finished``: (variant, seed) already done."""
        self.sizes = {(v, s): r for v, s, r in units}
        self.done = set(finished)
        self.bar = tqdm(total=sum(self.sizes.values()), initial=self._base(), disable=self.disable, unit="round",
                        dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10.0, file=sys.stderr)

    def _base(self) -> int:
        return sum(self.sizes[k] for k in self.done)

    def __call__(self, variant: str, seed: int, round: int, row: dict) -> None:
        if self.bar is None:
            return
        key = (variant, seed)
        acc = row.get("accuracy", math.nan)
        if acc == acc:
            self.acc[key] = acc
        self.bar.n = self._base() + round + 1
        units = f"unit {len(self.done) + 1}/{len(self.sizes)}"
        self.bar.set_postfix_str(f"{units} {variant} seed={seed} round={round + 1} "
                                 f"acc={self.acc.get(key, math.nan):.3f}", refresh=False)
        self.bar.update(0)
        if round + 1 >= self.sizes.get(key, math.inf):
            self.done.add(key)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
