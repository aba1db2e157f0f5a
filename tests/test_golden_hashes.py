"""A handful of the recorded output hashes, re-checked in the default suite (the full list: scripts/golden_hashes.py).

tests/golden/hashes.json holds sha256 of rounds.csv and clients.csv for every experiment file
(shortened to 10 rounds, seed 0, or fewer where its measured horizon is shorter: tests/golden/horizons.json), every
setting `turnout reproduce` runs, and the seam matrix,
recorded before a refactor; a behaviour-preserving change keeps every one of them. In the environment they were
recorded in (tests/golden/environment.json) the tables must be byte-identical; on another BLAS kernel or CPU
they must match the recorded tables (tests/golden/tables.json.gz) with every integer, string and boolean exact
and floats within the stated relative tolerance (docs/determinism.md).
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("golden_hashes", ROOT / "scripts" / "golden_hashes.py")
golden = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(golden)
RECORDED = json.loads(golden.GOLDEN.read_text())
TABLES = golden.recorded_tables()
SAME_ENVIRONMENT = golden.environment() == golden.recorded_environment()

HANDFUL = golden.HANDFUL


@pytest.mark.parametrize("name", HANDFUL)
def test_output_hash_is_unchanged(name, tmp_path):
    assert name in RECORDED, f"{name} is not a recorded case"
    source, overrides = golden.cases()[name]
    tables = golden.run_case_tables(source, overrides, tmp_path)
    verdict, problems = golden.compare(name, tables, RECORDED, TABLES, SAME_ENVIRONMENT)
    assert verdict != "DIFF", f"{name}: {problems}"


def test_every_recorded_case_has_its_table_and_the_tables_are_the_hashed_ones():
    assert set(TABLES) == set(RECORDED)
    # a new experiment file or page setting is a new case: record it (golden_hashes.py --write --names ...)
    missing = sorted(set(golden.cases()) - set(RECORDED))
    assert not missing, f"cases without a record: {missing}"
    assert not set(RECORDED) - set(golden.cases()), "records of cases that no longer exist"
    for name, files in TABLES.items():
        assert {f: golden._sha_text(t) for f, t in files.items()} == RECORDED[name], name


ROUNDS = "round,n_selected,bytes_up,fedgs_solver,fedgs_objective,accuracy\n0,4,9760,heuristic,0.5542135914790631,\n"


@pytest.mark.parametrize("got, verdict", [
    (ROUNDS, []),  # the same text
    (ROUNDS.replace("0.5542135914790631", "0.5542135914790629"), []),  # another BLAS kernel's last digits
    (ROUNDS.replace("0.5542135914790631", "0.5542185"), []),  # 8.9e-6 relative: another CPU's drift
    (ROUNDS.replace("0.5542135914790631", "0.5543245"), ["fedgs_objective"]),  # 2e-4 relative: too far
    (ROUNDS.replace("9760", "9761"), ["bytes_up"]),  # integers are exact
    (ROUNDS.replace("heuristic", "exact"), ["fedgs_solver"]),  # strings are exact
    (ROUNDS.replace("0.5542135914790631,", "0.5542135914790631,0.5"), ["accuracy"]),  # empty vs a number
    (ROUNDS.replace(",4,", ",4.0,"), ["n_selected"]),  # an integer written as a float is a change
])
def test_tolerant_comparison_is_exact_on_discrete_cells_and_relative_on_floats(got, verdict):
    found = golden.table_differences(ROUNDS, got)
    assert [next(c for c in verdict if c in p) for p in found] == verdict, found


def test_tolerant_comparison_refuses_other_columns_or_rows():
    assert golden.table_differences(ROUNDS, ROUNDS.replace("accuracy", "loss")) == ["the columns differ"]
    assert golden.table_differences(ROUNDS, ROUNDS + "1,4,9760,heuristic,0.5,\n") == ["2 rows, 1 recorded"]


def test_byte_identity_is_demanded_in_the_recording_environment():
    name = HANDFUL[0]
    tables = TABLES[name]
    nudged = {f: t.replace("0.", "0.0000000", 1) if f == "rounds.csv" else t for f, t in tables.items()}
    assert golden.compare(name, tables, RECORDED, TABLES, same_environment=True) == ("identical", [])
    verdict, _ = golden.compare(name, nudged, RECORDED, TABLES, same_environment=True)
    assert verdict == "DIFF"


# ---- horizons: each case cut where another CPU's floats would leave the tolerance -----------------------------------
def test_every_case_has_a_measured_horizon_and_runs_no_longer():
    cuts = golden.horizons()
    assert set(cuts) == set(golden.cases()), "measure new cases: golden_hashes.py --measure-horizons --names FILE"
    for name, cut in cuts.items():
        assert set(cut["horizons"]) == set(golden.FAMILY_NAMES), name
        assert cut["rounds"] <= (cut["integer_horizon"] if cut["integers_only"] else cut["horizon"]), name


def test_a_case_lengthened_past_its_horizon_is_refused(tmp_path, monkeypatch):
    cuts = golden.horizons()
    name, cut = next((n, c) for n, c in cuts.items() if c["horizon"] < c["asked"])  # a case that was cut
    planted = {**cuts, name: {**cut, "rounds": cut["horizon"] + 1}}
    path = tmp_path / "horizons.json"
    path.write_text(json.dumps(planted))
    monkeypatch.setattr(golden, "HORIZONS", path)
    with pytest.raises(SystemExit, match=f"{re.escape(name)} runs {cut['horizon'] + 1} rounds, past its measured "
                                         f"horizon of {cut['horizon']}"):
        golden.cases()
