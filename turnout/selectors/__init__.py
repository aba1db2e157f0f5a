"""Selector seam: the cohort and its aggregation weights, given who is available."""

from . import cyclic, fedgs, md, power_of_choice, sticky, uniform  # noqa: F401  (registers components)
from .base import SELECTORS, Cohort, RoundFeedback, SelectionContext, Selector

__all__ = ["SELECTORS", "Cohort", "RoundFeedback", "SelectionContext", "Selector"]
