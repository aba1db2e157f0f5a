"""Results pages record what they were made from, and ``scripts/reproduce.sh --check`` catches a stale one.

The default suite re-runs every page's check slice (seed 0, a few rounds of one setting, every variant) and
compares it with the numbers the page records; ``-m slow`` re-runs whole pages and compares every table.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("pages", ROOT / "scripts" / "pages.py")
pages = importlib.util.module_from_spec(SPEC)
sys.modules["pages"] = pages  # dataclasses look their module up while the class is created
SPEC.loader.exec_module(pages)

TINY = {"name": "tiny_page", "seeds": [0, 1], "rounds": 4,
        "data": {"name": "synthetic", "num_clients": 10}, "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 2, "lr": 0.1},
        "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 2},
        "output": {"plots": False, "progress": False},
        "variants": [{"name": "K4"}, {"name": "K8", "set": {"selector.clients_per_round": 8}}]}


def tiny_page(config: Path) -> "pages.Page":
    return pages.Page("Tiny", (pages.Setting("A", str(config)), pages.Setting("B", str(config), ("train.lr=0.05",))),
                      ("final_accuracy",), pages.Slice("B", 3), curve="accuracy")


def test_a_page_records_commit_hash_and_slice_and_check_catches_changes(tmp_path, monkeypatch):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    page = tiny_page(config)
    monkeypatch.setitem(pages.PAGES, "tiny_page", page)
    out = tmp_path / "tiny_page.md"
    record = pages.make("tiny_page", 1, tmp_path / "runs", out)
    text = out.read_text()
    assert f"config hash `{record['config_hash']}`" in text and "Made from commit" in text
    assert "## Check slice" in text and pages.read_record(out) == json.loads(json.dumps(record))
    assert set(record["slice"]["numbers"]) == {"K4", "K8"} and record["slice"]["rounds"] == 3
    assert pages.check("tiny_page", page, out) == []

    # the code "changes": a recorded number differs
    stale = json.loads(json.dumps(record))
    stale["slice"]["numbers"]["K8"]["final_loss"] *= 1.01
    out.write_text(text.replace(json.dumps(record, indent=1, sort_keys=True),
                                json.dumps(stale, indent=1, sort_keys=True)))
    problems = pages.check("tiny_page", page, out)
    assert len(problems) == 1 and problems[0].startswith("K8: final_loss is")

    # the experiment file changes: the config hash differs (and the slice numbers too)
    out.write_text(text)
    config.write_text(yaml.safe_dump({**TINY, "train": {**TINY["train"], "local_steps": 3}}))
    problems = pages.check("tiny_page", page, out)
    assert "the resolved configs changed since the page was made" in problems[0] and len(problems) > 1

    # a page without a record
    out.write_text("# old page\n")
    assert "has no page record" in pages.check("tiny_page", page, out)[0]


def test_every_setting_of_every_page_validates():
    from turnout.sim.composition import load_experiment

    for name, page in pages.PAGES.items():
        for s in (*page.settings, *(page.tune.settings if page.tune else ())):
            assert load_experiment(ROOT / s.config, list(s.sets)), f"{name}: {s.name}"
        assert page.slice.setting in {s.name for s in page.settings}


def test_every_page_matches_the_code():
    """The CI check: every page's check slice still gives the numbers the page records (seconds per page).

    Pages not regenerated since the experiment files changed have no record; ``--check all`` names them instead
    of failing, and exactly those pages must be listed in ``pages.NOT_REGENERATED`` (a page regenerated, or one
    that lost its record, fails here until the list is updated)."""
    assert set(pages.without_record()) == set(pages.NOT_REGENERATED), (
        f"pages without a record: {sorted(pages.without_record())}; NOT_REGENERATED: {sorted(pages.NOT_REGENERATED)}")
    res = subprocess.run(["bash", "scripts/reproduce.sh", "--check", "all"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in pages.NOT_REGENERATED:
        assert f"{name}: not regenerated since the experiment files changed" in res.stdout, res.stdout
    if pages.NOT_REGENERATED:  # named on its own, a page without a record still fails the check
        res = subprocess.run(["bash", "scripts/reproduce.sh", "--check", pages.NOT_REGENERATED[0]], cwd=ROOT,
                             capture_output=True, text=True)
        assert res.returncode == 1 and "has no page record" in res.stdout, res.stdout + res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", list(pages.PAGES))
def test_whole_page_matches_the_code(name):
    """Re-runs the whole page (up to 30 minutes each on 2 cores) and compares every table with the page's."""
    res = subprocess.run(["bash", "scripts/reproduce.sh", "--check", "--full", name], cwd=ROOT, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-5000:]
