"""Selector seam: the cohort and its aggregation weights, given who is available."""

from . import cyclic, fedgs, md, oort, power_of_choice, refl, safa, sticky, uniform  # noqa: F401  (registers components)
from .base import SELECTORS, Cohort, RoundFeedback, SelectionContext, Selector

__all__ = ["SELECTORS", "Cohort", "RoundFeedback", "SelectionContext", "Selector"]
