"""Base class for every config block: strict, typed, immutable.

Unknown keys are rejected (``extra="forbid"``) so a typo never silently falls back to a
default; values are validated by type and range before any work starts. Two guards hold for
every block, whatever its fields:

* numbers are finite: ``inf`` / ``nan`` (``.inf`` in YAML, ``inf`` on the command line) would
  turn simulated seconds or sizes into ``inf`` in ``rounds.csv``;
* ``true`` / ``false`` are not numbers (pydantic would read ``rounds: true`` as 1; YAML also reads
  ``yes``/``no``/``on``/``off`` as booleans). Integer options otherwise accept integral numbers
  written as floats (``1e6``, ``20.0``) and refuse fractional ones; float options accept integers.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .limits import MAX_PATH, MAX_SCALE, MAX_SECONDS

#: Option types that recur with one meaning and one bound (the bound is then written once):
#: a share, a probability, a mixing weight in [0, 1]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
#: a duration in seconds (a deadline, a window, a solver's time limit): positive, at most MAX_SECONDS
Seconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS)]
#: an over-commitment factor: launch ceil(oc·K) clients for K wanted reports (over_commit, deadline rounds)
OverCommitment = Annotated[float, Field(ge=1.0, le=MAX_SCALE)]
#: a path or URI option (a folder, a file, a tracking server): not empty, no longer than a path may be
PathText = Annotated[str, Field(min_length=1, max_length=MAX_PATH)]


def _numeric_without_bool(annotation: Any) -> bool:
    """Whether a field of this type holds numbers (int/float, possibly in lists) but never a bool."""
    leaves: list = []
    todo = [annotation]
    while todo:
        t = todo.pop()
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Literal:
            leaves.extend(type(a) for a in args)
        elif origin is typing.Annotated:
            todo.append(args[0])
        elif args:
            todo.extend(args)
        else:
            leaves.append(t)
    if bool in leaves or Any in leaves or object in leaves:
        return False
    return int in leaves or float in leaves


def _holds_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_bool(v) for v in value)


class StrictModel(BaseModel):
    """A config block: unknown keys are errors, numbers are finite and never booleans."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        if field is not None and _holds_bool(value) and _numeric_without_bool(field.annotation):
            raise ValueError("must be a number, not true/false (YAML also reads yes/no/on/off as booleans)")
        return value


class NoOptions(StrictModel):
    """Config of a component that takes no options (only ``name``)."""
