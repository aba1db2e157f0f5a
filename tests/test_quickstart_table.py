"""scripts/quickstart_table.py keeps the README's quickstart table equal to what the quickstart prints."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("quickstart_table", ROOT / "scripts" / "quickstart_table.py")
quickstart_table = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(quickstart_table)


def test_table_is_written_between_the_markers_and_checked(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"variants": [
        {"variant": "K=5", "final_accuracy": 0.87891, "best_accuracy": 0.896, "bytes_down": 3_660_000,
         "sim_time_s": 1475.02, "resource_s": 6373.4},
        {"variant": "K=20", "final_accuracy": 0.8933, "best_accuracy": 0.90544, "bytes_down": 14_640_000,
         "sim_time_s": 1500.3, "resource_s": 25514.0}]}))
    readme = tmp_path / "README.md"
    stale = "| K=5 | 0.8794 | 0.8949 | 3.66 MB | 1,475 s | 6,373 |\n"
    readme.write_text(f"# x\nbefore\n\n{quickstart_table.START}\n{stale}{quickstart_table.END}\n\nafter\n")
    args = ["--run", str(run), "--readme", str(readme)]
    assert quickstart_table.main([*args, "--check"]) == 1
    assert "the quickstart table is stale" in capsys.readouterr().err
    assert quickstart_table.main(args) == 0
    assert readme.read_text() == (
        f"# x\nbefore\n\n{quickstart_table.START}\n{quickstart_table.HEADER}"
        "| K=5 | 0.8789 | 0.8960 | 3.66 MB | 1,475 s | 6,373 |\n"
        "| K=20 | 0.8933 | 0.9054 | 14.64 MB | 1,500 s | 25,514 |\n"
        f"{quickstart_table.END}\n\nafter\n")
    assert quickstart_table.main([*args, "--check"]) == 0


@pytest.mark.slow
def test_readme_quickstart_table_matches_a_fresh_run():
    """Runs the full quickstart (~1.5 min on 2 cores) and compares the README's table with its numbers."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "quickstart_table.py"), "--check"],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
