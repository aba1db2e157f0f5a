"""Conformance tests: turnout's components against recorded outputs of the seed papers' own code.

The records (``records/*.json``) hold fixed inputs and what the authors' code returned on them;
``scripts/conformance/`` holds the recorders that produced them from a checkout of each repository.
The tests need neither the checkout nor the authors' dependencies: they run offline, in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RECORDS = Path(__file__).parent / "records"


def read_record(mechanism: str) -> dict:
    """The record of ``mechanism`` (its cases, and the repository commit they came from)."""
    rec = json.loads((RECORDS / f"{mechanism}.json").read_text())
    assert rec["cases"], f"{mechanism}: the record has no cases"
    return rec


@pytest.fixture
def load_record():
    """``load_record("gluefl")``: the record of a mechanism (a fixture, so test files need no import)."""
    return read_record
