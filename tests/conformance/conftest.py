"""Conformance tests: turnout's components against recorded outputs of the seed papers' own code.

The records (``records/*.json``) hold fixed inputs and what the authors' code returned on them;
``scripts/conformance/`` holds the recorders that produced them from a checkout of each repository.
The tests need neither the checkout nor the authors' dependencies: they run offline, in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path


RECORDS = Path(__file__).parent / "records"


def load_record(mechanism: str) -> dict:
    """The record of ``mechanism`` (its cases, and the repository commit they came from)."""
    rec = json.loads((RECORDS / f"{mechanism}.json").read_text())
    assert rec["cases"], f"{mechanism}: the record has no cases"
    return rec


