"""Whether a server rule takes late reports, and how stale: an option of the rule's config, not a class flag.

A report that reaches the server after its round closed (a deadline's straggler, an over-committed client, every
report of an asynchronous round) is aggregated when it arrives only by a rule whose config is a
:class:`LateReportsOption`, and only while it is at most :meth:`LateReportsOption.staleness_bound` rounds old; other
reports are dropped on arrival and their work counts as wasted. The bound is a run's setting (FedBuff's, FedAsync's,
SAFA's and the stale-aware rules' ``max_staleness``), so :attr:`Algorithm.max_staleness
<turnout.algorithms.base.Algorithm.max_staleness>` reads it from the config the rule was built with.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Optional

from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_ROUNDS

#: the bound of a rule without one (the timing compares ``round − origin ≤ bound``)
UNBOUNDED = 2**62


class LateReportsOption(StrictModel):
    """The config of a rule that aggregates late reports when they arrive."""

    @abstractmethod
    def staleness_bound(self) -> int | None:
        """How many rounds old a late report may be to be aggregated (:data:`UNBOUNDED`: any); ``None``: none is."""


class MaxStaleness(LateReportsOption):
    """An optional staleness bound (FedBuff, FedAsync, the stale-aware rules; REFL: none); older reports are dropped
    on arrival, their work wasted."""

    max_staleness: Optional[int] = Field(None, ge=0, le=MAX_ROUNDS,
                                         description="drop reports more than this many server updates (rounds) old "
                                                     "(their work counts as wasted); unset: keep every report")

    def staleness_bound(self) -> int:
        return UNBOUNDED if self.max_staleness is None else int(self.max_staleness)


__all__ = ["LateReportsOption", "MaxStaleness", "UNBOUNDED"]
