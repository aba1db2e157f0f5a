"""A handful of the recorded output hashes, re-checked in the default suite (the full list: scripts/golden_hashes.py).

tests/golden/hashes.json holds sha256 of rounds.csv and clients.csv for every experiment file
(shortened to 10 rounds, seed 0), every setting scripts/reproduce.sh runs, and the seam matrix,
recorded before a refactor; a behaviour-preserving change keeps every one of them.
"""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("golden_hashes", ROOT / "scripts" / "golden_hashes.py")
golden = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(golden)
RECORDED = json.loads(golden.GOLDEN.read_text())

HANDFUL = ["exp:quickstart.yaml", "exp:refl/fashion_mnist.yaml[DL-IID]", "exp:fedsum/cases.yaml",
           "exp:adaptive_ou/synthetic.yaml",
           "matrix:round_mode=deadline,selector=oort,compressor=gluefl,algorithm=stale_aware",
           "matrix:round_mode=over_commit,selector=sticky,compressor=gluefl,algorithm=fedyogi",
           "matrix:availability=trace,selector=refl_ips", "matrix:availability=ln,selector=fedgs",
           "matrix:availability=p2_bernoulli,selector=oort"]


@pytest.mark.parametrize("name", HANDFUL)
def test_output_hash_is_unchanged(name, tmp_path):
    assert name in RECORDED, f"{name} is not a recorded case"
    source, overrides = golden.cases()[name]
    assert golden.run_case(source, overrides, tmp_path) == RECORDED[name]
