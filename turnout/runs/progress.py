"""Progress of a sweep: rounds done over all units, units finished, the running units' rounds (tqdm)."""

from __future__ import annotations

import math
import sys

from tqdm import tqdm


class ProgressBar:
    """A tqdm bar over every round of every unit of a sweep; a no-op when disabled.

    The sweep calls :meth:`start` with every unit (a label and its number of rounds) and which are
    already finished (a resumed run starts part-way), then :meth:`begin` when a unit (re)starts from
    its checkpoint and :meth:`round` after each of its rounds — from this process or from workers.
    """

    def __init__(self, disable: bool = False):
        self.disable = disable
        self.bar: tqdm | None = None
        self.units: dict = {}
        self.done: set = set()
        self.running: dict = {}
        self.acc: dict = {}

    def start(self, units: dict, finished: set) -> None:
        """``units``: key → (label, rounds); ``finished``: keys already done."""
        self.units, self.done = dict(units), set(finished)
        self.bar = tqdm(total=sum(r for _, r in self.units.values()), initial=self._n(), disable=self.disable,
                        unit="round", dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10.0,
                        file=sys.stderr)

    def _n(self) -> int:
        return sum(self.units[k][1] for k in self.done) + sum(self.running.values())

    def begin(self, key, rounds_done: int) -> None:
        self.running[key] = rounds_done
        self._refresh()

    def round(self, key, row: dict) -> None:
        acc = row.get("accuracy", math.nan)
        if acc == acc:
            self.acc[key] = acc
        self.running[key] = int(row["round"]) + 1
        if self.running[key] >= self.units.get(key, ("", math.inf))[1]:
            del self.running[key]
            self.done.add(key)
        self._refresh()

    def _refresh(self) -> None:
        if self.bar is None:
            return
        self.bar.n = self._n()
        shown = ", ".join(f"{self.units[k][0]} r{r} acc={self.acc.get(k, math.nan):.3f}"
                          for k, r in list(self.running.items())[:3])
        more = f" +{len(self.running) - 3}" if len(self.running) > 3 else ""
        self.bar.set_postfix_str(f"units {len(self.done)}/{len(self.units)} done; {shown}{more}", refresh=False)
        self.bar.update(0)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
