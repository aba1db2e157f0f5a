"""Base class for every config block: strict, typed, immutable.

Unknown keys are rejected (``extra="forbid"``) so a typo never silently falls back to a
default; values are validated by type and range before any work starts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config block: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class NoOptions(StrictModel):
    """Config of a component that takes no options (only ``name``)."""
