"""``turnout reproduce``: pages record what they were made from, slices are cut at measured horizons, and
``--check`` catches a stale page, names one that cannot run, and holds on every page of the project.

The default suite re-runs every page's check slice (seed 0, a few rounds of one setting, every variant) and
compares it with the page's record; ``-m slow`` re-runs whole pages and compares every table.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest
import yaml

from turnout.app.cli import main
from turnout.app.reproduce import check as checks
from turnout.app.reproduce import horizon, make, record, run, spec
from turnout.core.errors import ConfigError, DataError, TurnoutError

ROOT = Path(__file__).resolve().parents[1]

TINY = {"name": "tiny_page", "seeds": [0, 1], "rounds": 4,
        "data": {"name": "synthetic", "num_clients": 10}, "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 2, "lr": 0.1},
        "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 2},
        "output": {"plots": False, "progress": False},
        "variants": [{"name": "K4"}, {"name": "K8", "set": {"selector.clients_per_round": 8}}]}


@pytest.fixture
def pages_dir(tmp_path, monkeypatch):
    """A pages folder of the test's own, in place of the bundled one."""
    folder = tmp_path / "pages"
    (folder / "records").mkdir(parents=True)
    monkeypatch.setattr(spec, "pages_root", lambda: folder)
    return folder


def _tiny_page(pages_dir: Path, config: Path, slice_rounds: int = 3, name: str = "tiny_page") -> None:
    (pages_dir / f"{name}.yaml").write_text(yaml.safe_dump({
        "title": "Tiny", "metrics": ["final_accuracy"], "curve": "accuracy",
        "settings": [{"name": "A", "config": str(config)}, {"name": "B", "config": str(config),
                                                             "sets": ["train.lr=0.05"]}],
        "slice": {"setting": "B", "rounds": slice_rounds}}))


# ---- horizons, from tables written by hand ---------------------------------------------------------------------
HEAD = "variant,seed,round,n_selected,bytes_up,loss\n"


def _table(*rows: str) -> str:
    return HEAD + "".join(r + "\n" for r in rows)


NATIVE = _table("A,0,0,4,9760,2.0", "A,0,1,4,9760,1.5", "A,0,2,4,9760,1.25", "A,0,3,4,9760,1.125")


def test_a_horizon_is_the_first_round_a_float_leaves_a_tenth_of_the_tolerance():
    within = NATIVE.replace("1.5", "1.500005")  # 3.3e-6 relative: within 1e-5
    assert horizon.first_drift(NATIVE, within).round is None
    past = NATIVE.replace("1.25", "1.25002")  # 1.6e-5 relative at round 2: past a tenth of 1e-4
    d = horizon.first_drift(NATIVE, past)
    assert (d.round, d.column, d.reference, d.other, d.integers_hold) == (2, "loss", "1.25", "1.25002", True)
    ints = NATIVE.replace("A,0,1,4,9760", "A,0,1,3,9760")  # a cohort of 3, not 4, in round 1
    d = horizon.first_drift(NATIVE, ints)
    assert (d.round, d.column, d.integers_hold) == (1, "n_selected", False)
    assert horizon.integer_horizon(NATIVE, past) is None and horizon.integer_horizon(NATIVE, ints) == 1
    assert horizon.first_drift(NATIVE, NATIVE.rsplit("\n", 2)[0] + "\n").round == 3  # round 3 missing


def test_the_cut_keeps_the_shortest_horizon_and_falls_back_to_integers_below_two_rounds():
    past2 = NATIVE.replace("1.25", "1.3")
    c = horizon.cut(4, {"native": NATIVE, "torch-avx2": NATIVE, "torch-default": past2})
    assert (c.rounds, c.integers_only, c.horizons) == (2, False, {"torch-avx2": None, "torch-default": 2})
    assert c.as_record()["horizon"] == 2 and c.as_record()["integer_horizon"] == 4
    past1 = NATIVE.replace("1.5", "1.6")  # floats hold one round only: integers are checked, over all 4
    c = horizon.cut(4, {"native": NATIVE, "openblas": past1})
    assert (c.rounds, c.integers_only, c.horizon, c.integer_horizon) == (4, True, 1, 4)
    assert "round 1, loss: native 1.5, openblas 1.6" == c.first["openblas"]


def test_a_slice_forced_past_its_horizon_is_refused_at_recording(pages_dir, tmp_path, monkeypatch):
    """The planted change: a slice lengthened to 3 rounds where a family's floats move in round 2."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    _tiny_page(pages_dir, config, slice_rounds=2)

    def fake_slice(page, tuned, rounds, out, env=None):
        out.mkdir(parents=True)
        text = NATIVE if not env or "ATEN_CPU_CAPABILITY" not in env else NATIVE.replace("1.25", "1.3")
        (out / "rounds.csv").write_text(text)
        (out / "summary.json").write_text(json.dumps({"runs": [{"variant": "A", "final_loss": 1.0}]}))
        return out

    monkeypatch.setattr(record, "run_slice", fake_slice)
    monkeypatch.setattr(record, "native_kernels", lambda: ("AVX512", "openblas/SkylakeX"))
    page = spec.load("tiny_page")
    sl = record.measure_slice(page, {}, rounds=None, jobs=1)  # asked 2: holds under every family
    assert (sl["rounds"], sl["asked_rounds"], sl["horizon"]) == (2, 2, 2)
    with pytest.raises(ConfigError, match=r"slice\.rounds = 3: past its horizon of 2 rounds measured under "
                                          r"torch-avx2, torch-default, openblas, vendor"):
        record.measure_slice(page, {}, rounds=3, jobs=1)
    planted = {"page": "tiny_page", "slice": {**sl, "rounds": 3}}  # or a record edited by hand
    with pytest.raises(ConfigError, match="past its horizon"):
        record.validate(planted)


def test_a_page_may_count_to_the_target_every_variant_reaches(pages_dir, tmp_path, monkeypatch):
    """``target: reached_by_all`` (GlueFL's Table 2 target) is passed to the report; anything else is refused in one
    line naming the page's field."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    _tiny_page(pages_dir, config)
    assert spec.load("tiny_page").target == "config"
    raw = yaml.safe_load((pages_dir / "tiny_page.yaml").read_text())
    (pages_dir / "tiny_page.yaml").write_text(yaml.safe_dump({**raw, "target": "reached_by_all"}))
    page = spec.load("tiny_page")
    assert page.target == "reached_by_all"
    seen = {}
    import turnout.app.report as report_pkg
    monkeypatch.setattr(report_pkg, "write_report", lambda *a, **k: seen.update(args=a, kwargs=k) or a[1])
    monkeypatch.setattr(make, "replace_slice_section", lambda text, name, rec: text)
    out = tmp_path / "page.md"
    out.write_text("")
    make.render(page, tmp_path, {"commit": "c", "config_hash": "h", "elapsed_s": 1.0}, out)
    assert seen["args"][-1] == "reached_by_all"
    (pages_dir / "tiny_page.yaml").write_text(yaml.safe_dump({**raw, "target": "highest"}))
    with pytest.raises(ConfigError, match=r"tiny_page\.target = 'highest': choose one of: config, reached_by_all"):
        spec.load("tiny_page")


def test_a_page_chooses_the_metrics_it_pairs_among_those_it_tabulates(pages_dir, tmp_path, monkeypatch):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    _tiny_page(pages_dir, config)
    raw = yaml.safe_load((pages_dir / "tiny_page.yaml").read_text())
    assert spec.load("tiny_page").paired is None  # the report's default
    (pages_dir / "tiny_page.yaml").write_text(yaml.safe_dump({**raw, "metrics": ["best_loss", "final_accuracy"],
                                                              "paired": ["best_loss"]}))
    page = spec.load("tiny_page")
    seen = {}
    import turnout.app.report as report_pkg
    monkeypatch.setattr(report_pkg, "write_report", lambda *a, **k: seen.update(args=a) or a[1])
    monkeypatch.setattr(make, "replace_slice_section", lambda text, name, rec: text)
    out = tmp_path / "page.md"
    out.write_text("")
    make.render(page, tmp_path, {"commit": "c", "config_hash": "h", "elapsed_s": 1.0}, out)
    assert seen["args"][11] == ["best_loss"]
    (pages_dir / "tiny_page.yaml").write_text(yaml.safe_dump({**raw, "paired": ["best_loss"]}))
    with pytest.raises(ConfigError, match=r"tiny_page\.paired = 'best_loss': pair only metrics the page tabulates: "
                                          r"final_accuracy"):
        spec.load("tiny_page")


# ---- a whole (tiny) page ---------------------------------------------------------------------------------------
def test_a_page_records_commit_hash_and_measured_slice_and_check_catches_changes(pages_dir, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "seeds": [0]}))
    _tiny_page(pages_dir, config)
    out = tmp_path / "docs" / "tiny_page.md"
    rec = make.make("tiny_page", 1, tmp_path / "runs", out)
    text = out.read_text()
    record_file = out.with_name("tiny_page.record.json")
    assert f"config hash `{rec['config_hash']}`" in text and "Made from commit" in text and "## Check slice" in text
    assert record.read("tiny_page", record_file) == json.loads(json.dumps(rec))
    sl = rec["slice"]
    assert set(sl["numbers"]) == {"K4", "K8"} and sl["asked_rounds"] == 3 and sl["rounds"] <= 3
    assert set(sl["horizons"]) == {"torch-avx2", "torch-default", "openblas", "vendor"}
    assert "torch-avx2: " in text and f"{sl['rounds']} rounds" in text
    ok = checks.check("tiny_page", record_file)
    assert ok.status == "ok" and ok.compared == 2 * 6, ok.line()

    stale = json.loads(json.dumps(rec))  # the code "changes": a recorded number differs
    stale["slice"]["numbers"]["K8"]["final_loss"] *= 1.01
    record_file.write_text(json.dumps(stale))
    v = checks.check("tiny_page", record_file)
    assert v.status == "STALE" and len(v.problems) == 1 and v.problems[0].startswith("K8: final_loss is")

    record_file.write_text(json.dumps(rec))  # the experiment file changes: the config hash differs
    config.write_text(yaml.safe_dump({**TINY, "seeds": [0], "train": {**TINY["train"], "local_steps": 3}}))
    v = checks.check("tiny_page", record_file)
    assert v.status == "STALE" and "the resolved configs changed since the page was made" in v.problems[0]

    record_file.unlink()  # a page without a record
    assert "no record" in checks.check("tiny_page", record_file).problems[0]


#: a measured slice as a record holds it, for the tests whose business is not the slice (it is the others')
UNMEASURED_SLICE = {"setting": "B", "variants": [], "asked_rounds": 2, "rounds": 2, "integers_only": False,
                    "horizons": {f: None for f in ("torch-avx2", "torch-default", "openblas", "vendor")},
                    "horizon": 2, "integer_horizon": 2, "numbers": {},
                    "measured_on": {"cpu": "test", "torch_cpu": "test", "numpy_blas": "test"}}


def test_a_stopped_page_resumes_where_it_stopped_and_gives_the_uninterrupted_tables(pages_dir, tmp_path,
                                                                                     monkeypatch, capsys):
    """SIGTERM while setting B runs (A finished): B's run checkpoints and the page stops, saying how to continue;
    ``--resume`` keeps A, continues B from its checkpoint, and the tables are those of a page never stopped."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "seeds": [0], "rounds": 120}))  # B's units outlast the signal
    _tiny_page(pages_dir, config)
    monkeypatch.setattr(record, "measure_slice", lambda page, tuned, jobs: UNMEASURED_SLICE)
    monkeypatch.setattr(run, "TICK_S", 0.05)
    runs, out = tmp_path / "runs", tmp_path / "docs" / "tiny_page.md"
    ran: list[str] = []
    real = make.run_setting

    def stop_during_b(setting, folder, *args, tick=None, **kw):
        ran.append(setting.name)
        rows = Path(f"{folder}.partial") / "units"

        def signal_when_b_has_a_row():
            tick()
            if setting.name == "B" and any(f.stat().st_size for f in rows.glob("v00-*/seed-0/rounds.jsonl")):
                os.kill(os.getpid(), signal.SIGTERM)

        return real(setting, folder, *args, tick=signal_when_b_has_a_row, **kw)

    monkeypatch.setattr(make, "run_setting", stop_during_b)
    cpu_before = run.children_cpu_s()
    with pytest.raises(SystemExit, match=r"setting B stopped by SIGTERM \(its run checkpointed, see .*B\.log\): "
                                         r"continue with `turnout reproduce tiny_page --resume`"):
        make.make("tiny_page", 1, runs, out)
    assert ran == ["A", "B"] and (runs / "A" / "summary.json").is_file() and (runs / "B.partial").is_dir()
    assert not (runs / "page.json").exists() and not out.exists()
    stopped = json.loads((runs / make.Progress.FILE).read_text())
    assert stopped["configs"] == run.config_hash(spec.load("tiny_page"), {}) and stopped["elapsed_s"] > 0
    # the stopped run's CPU counts (seconds: it imports torch); only git's few milliseconds are left out
    assert stopped["cpu_s"] == pytest.approx(run.children_cpu_s() - cpu_before, abs=0.5)

    config.write_text(yaml.safe_dump({**TINY, "seeds": [0], "rounds": 121}))  # the page's configs change meanwhile
    with pytest.raises(SystemExit, match="the resolved configs changed since the page was started"):
        make.make("tiny_page", 1, runs, out, resume=True)
    config.write_text(yaml.safe_dump({**TINY, "seeds": [0], "rounds": 120}))
    assert json.loads((runs / make.Progress.FILE).read_text()) == stopped  # the refusal changed nothing

    ran.clear()
    monkeypatch.setattr(make, "run_setting", lambda s, *a, **k: ran.append(s.name) or real(s, *a, **k))
    rec = make.make("tiny_page", 1, runs, out, resume=True)
    printed = capsys.readouterr().out
    assert ran == ["B"] and "kept: A (finished before)" in printed and "done: B (resumed)" in printed
    assert rec["elapsed_s"] > stopped["elapsed_s"] and len(rec["resumed"]) == 1
    assert "(resumed at `" in out.read_text() and not (runs / make.Progress.FILE).exists()
    with pytest.raises(SystemExit, match=r"tiny_page: nothing to resume in .* \(it has finished\): run "
                                         r"`turnout reproduce tiny_page`"):
        make.make("tiny_page", 1, runs, out, resume=True)

    again = tmp_path / "again"  # the same page, never stopped
    make.make("tiny_page", 1, again, tmp_path / "again.md")
    for setting in ("A", "B"):
        for table in ("rounds.csv", "clients.csv"):
            assert (runs / setting / table).read_bytes() == (again / setting / table).read_bytes(), (setting, table)


def test_a_page_that_cannot_run_is_not_checked_in_one_line_and_the_check_goes_on(pages_dir, tmp_path, capsys):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(TINY))
    bad.write_text(yaml.safe_dump({**TINY, "data": {"name": "fashion_mnist", "path": str(tmp_path / "nowhere")}}))
    _tiny_page(pages_dir, good, slice_rounds=2, name="good")
    _tiny_page(pages_dir, bad, slice_rounds=2, name="bad")
    out = tmp_path / "docs"
    # the good page's record, its slice run once natively (the horizons are the other tests' business: here every
    # family is taken to hold, which keeps this test to one run besides the check itself)
    page = spec.load("good")
    sl = {"setting": "B", "variants": [], "asked_rounds": 2, "rounds": 2, "integers_only": False,
          "horizons": {f: None for f in ("torch-avx2", "torch-default", "openblas", "vendor")}, "horizon": 2,
          "integer_horizon": 2, "numbers": run.slice_numbers(run.run_slice(page, {}, 2, tmp_path / "slice"))}
    rec = {"page": "good", "config_hash": run.config_hash(page, {}), "tuned": {}, "slice": sl}
    record.write(rec, out / "good.record.json")
    record.write({**rec, "page": "bad"}, out / "bad.record.json")
    assert main(["reproduce", "--check", "all", "--out", str(out), "--jobs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    bad_line = next(ln for ln in lines if " bad" in ln)
    assert bad_line.startswith("SKIP  bad: ") and "data.path = " in bad_line and "nowhere" in bad_line
    assert "Traceback" not in "\n".join(lines)
    assert any(ln.startswith("ok    good") for ln in lines)
    assert lines[-1].startswith("1 of 2 pages match the code, 0 stale, 1 not checked; 12 numbers compared")


# ---- errors cross process boundaries ----------------------------------------------------------------------------
def _raise(kind: str):
    from turnout.runs.sweep import BackendLost, UnitsFailed
    from turnout.traces.format import TraceFileError

    raise {"config": ConfigError("selector.clients_per_round", 0, "give at least 1"),
           "trace": TraceFileError("/tmp/t.npz", "is not a trace"),
           "units": UnitsFailed({"a/0": "boom"}, [Path("/tmp/run")]),
           "backend": BackendLost("the Ray head went away")}[kind]


@pytest.mark.parametrize("kind", ["config", "trace", "units", "backend"])
def test_turnout_errors_survive_a_process_boundary(kind):
    try:
        _raise(kind)
    except TurnoutError as e:
        here = e
    again = pickle.loads(pickle.dumps(here))
    assert type(again) is type(here) and str(again) == str(here) and again.__dict__ == here.__dict__
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        with pytest.raises(type(here)) as got:
            pool.submit(_raise, kind).result()
    assert str(got.value) == str(here)
    if kind == "config":
        assert (got.value.key, got.value.value) == ("selector.clients_per_round", 0)
    if kind == "trace":
        assert isinstance(got.value, DataError) and got.value.path == "/tmp/t.npz"


# ---- the project's own pages ------------------------------------------------------------------------------------
def test_every_page_loads_and_every_setting_validates():
    from turnout.sim.composition import load_experiment

    assert len(spec.names()) == 23
    for name in spec.names():
        page = spec.load(name)
        for s in (*page.settings, *(page.tune.settings if page.tune else ())):
            assert load_experiment(s.path, list(s.sets)), f"{name}: {s.name}"


def test_every_page_has_a_record_cut_at_its_own_measured_horizon():
    for name in spec.names():
        rec = record.read(name)
        assert rec is not None, f"{name} has no record: turnout reproduce {name}"
        record.validate(rec)  # measured, and no longer than its horizon
        assert rec["slice"]["asked_rounds"] == spec.load(name).slice.rounds, name


def test_every_page_matches_the_code():
    """The CI check: every page's check slice still gives the numbers its record holds, and every page was
    compared (a page that could not run fails here, though ``--check all`` goes on past it)."""
    res = subprocess.run([sys.executable, "-m", "turnout", "reproduce", "--check", "all"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "JOBS": "2"})
    assert res.returncode == 0, res.stdout + res.stderr
    n = len(spec.names())
    assert f"{n} of {n} pages match the code, 0 stale, 0 not checked" in res.stdout, res.stdout


def test_reproduce_refuses_bad_arguments_in_one_line(capsys):
    assert main(["reproduce", "--check", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("turnout: error: PAGE = 'nope': no such results page; the pages are: ") and "\n" not in err
    assert main(["reproduce", "--full", "gluefl"]) == 2
    assert "--full = True: goes with --check" in capsys.readouterr().err


def test_report_without_runs_says_what_to_run_in_one_line(tmp_path, monkeypatch):
    """Re-writing a page needs its run folders; without them the command says which run makes them."""
    monkeypatch.chdir(tmp_path)
    res = subprocess.run([sys.executable, "-m", "turnout", "reproduce", "--report", "gluefl"], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode != 0
    err = res.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "runs/reproduce/gluefl/page.json does not exist" in err and "run `turnout reproduce gluefl` first" in err


def test_list_names_every_page_with_its_slice(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in spec.names():
        assert f"\n{name}: " in f"\n{out}"
    assert "check slice: synthetic, 2 of 3 rounds" in out  # adaptive_ou_8bit, cut at its measured horizon


@pytest.mark.slow
@pytest.mark.parametrize("name", spec.names())
def test_whole_page_matches_the_code(name):
    """Re-runs the whole page (up to 30 minutes each on 2 cores) and compares every table with the page's."""
    res = subprocess.run([sys.executable, "-m", "turnout", "reproduce", "--check", "--full", name], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-5000:]


def test_run_uses_this_checkout():
    assert run.package_parent() == Path(__import__("turnout").__file__).resolve().parents[1]


def test_the_docs_computed_tables_are_the_records():
    """docs/determinism.md's horizon tables and docs/results/README.md's claim counts are computed from the records
    and pages (``turnout reproduce --docs``); a record re-measured without them fails here."""
    from turnout.app.reproduce import docs

    assert docs.problems(ROOT) == []
    text = (ROOT / "docs" / "determinism.md").read_text()
    assert "| adaptive_ou_8bit | 3 | 2 | 2 | 2 |" in text  # the slice of the AMD EPYC failure, cut at its horizon


def test_the_cost_table_is_each_pages_record(monkeypatch):
    """docs/results/README.md's cost table is each page's recorded wall-clock, CPU time and load: a page made
    again with other times leaves the table stale until ``turnout reproduce --docs`` rewrites it."""
    from turnout.app.reproduce import docs

    rec = record.read("refl_forecast")
    table = docs.times_table()
    assert (f"| [refl_forecast](refl_forecast.md) | {spec.load('refl_forecast').title} | "
            f"{rec['elapsed_s'] / 60:.1f} min | {rec['cpu_s'] / 60:.1f} | {rec['load'][0]:.1f} → {rec['load'][1]:.1f} |"
            in table.splitlines())
    real = record.read
    monkeypatch.setattr(record, "read", lambda name, *a: {**real(name, *a), "cpu_s": 3600.0}
                        if name == "refl_forecast" else real(name, *a))
    assert docs.problems(ROOT) == ["docs/results/README.md's cost table differs from the pages' records"]
