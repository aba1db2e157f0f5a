"""Property-based fuzzing of the input boundary: experiment files, ``--set``, trace ``.npz``, FedScale pickles,
local Hugging Face datasets (parquet, Arrow, ``save_to_disk``) with their data blocks, Flower partitioners' options.

For every generated input the CLI must either refuse it — exit 2, exactly one stderr line
``turnout: error: ...``, nothing written — or accept it — exit 0 with a complete run folder or output
file; never a traceback or an internal-error line, within bounded memory and time (see
``fuzz_harness``). Inputs wrong by construction (unknown keys, sizes beyond their bounds, nesting
beyond 32 levels) must be refused. The strategies (``fuzz_cases``) mutate small valid inputs and
keep accepted runs tiny, so a case costs milliseconds.

The default suite runs 224 cases in all; ``-m slow`` runs the long profile (2,700 cases) and prints
its counts (also written as JSON to ``$TURNOUT_FUZZ_REPORT`` when set). ``$TURNOUT_FUZZ_DATA_CASES`` sets how
many cases each of the two data kinds runs in the default suite (a campaign without the slow profile).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import fuzz_cases as fc
import fuzz_data as fd
import fuzz_harness as fh
import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings

from turnout.devices.fedscale import read_capacity_csv
from turnout.traces import load_trace

#: Cases per kind: the default suite, and the long profile (``-m slow``).
DEFAULT = {"experiment": 80, "override": 50, "trace": 40, "pickle": 30, "hf_data": 12, "flower": 12}
LONG = {"experiment": 800, "override": 500, "trace": 400, "pickle": 400, "hf_data": 300, "flower": 300}
for _kind in ("hf_data", "flower"):
    DEFAULT[_kind] = int(os.environ.get("TURNOUT_FUZZ_DATA_CASES", DEFAULT[_kind]))
#: Every n-th case of a kind also runs in a subprocess capped at 3 GiB of address space.
SUBPROCESS_EVERY = {"default": 45, "long": 25}


def fuzz_settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.large_base_example])


@pytest.fixture(scope="module", autouse=True)
def report(request):
    """After the module: the counts of every kind, on the terminal and in ``$TURNOUT_FUZZ_REPORT``."""
    fh.STATS.clear()
    fh.SLOWEST.clear()
    t0 = time.perf_counter()
    yield
    kinds = sorted({k for k, _ in fh.STATS})
    if not kinds:
        return
    rows = {k: {what: fh.STATS[k, what] for what in ("cases", "refused", "completed", "subprocess", "tracebacks",
                                                    "memory_kills")} | {"slowest_s": round(fh.SLOWEST.get(k, 0), 2)}
            for k in kinds}
    total = {what: sum(r[what] for r in rows.values()) for what in next(iter(rows.values())) if what != "slowest_s"}
    out = {"kinds": rows, "total": total, "seconds": round(time.perf_counter() - t0, 1)}
    path = os.environ.get("TURNOUT_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps(out, indent=2) + "\n")
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if terminal is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            terminal.write_line("")
            terminal.write_line(f"fuzz counts ({out['seconds']} s): {json.dumps(total)}")
            for k, r in rows.items():
                terminal.write_line(f"  {k}: {json.dumps(r)}")


# --- building a case from a generated input ---------------------------------------------------------------------

def experiment_case(spec: dict, folder: Path) -> fh.Case:
    path = folder / "exp.yaml"
    path.write_bytes(spec["data"])
    out = folder / "run"
    return fh.Case("experiment", ["run", str(path), "--out", str(out), "--quiet"], folder, {"exp.yaml"}, [out],
                   spec["must_refuse"], spec["needles"], spec["describe"])


def override_case(spec: dict, folder: Path) -> fh.Case:
    path = folder / "exp.yaml"
    path.write_text(fc.dump(fc.BASE))
    out = folder / "run"
    argv = ["run", str(path), "--out", str(out), "--quiet"]
    for arg in spec["args"]:
        argv += ["--set", arg]
    return fh.Case("override", argv, folder, {"exp.yaml"}, [out], spec["must_refuse"], spec["needles"],
                   spec["describe"])


def trace_case(spec: dict, folder: Path) -> fh.Case:
    trace = folder / "trace.npz"
    trace.write_bytes(spec["data"])
    cfg = {**fc.BASE, **spec["extra"], "availability": {"name": "trace", "path": str(trace), **spec["options"]}}
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = folder / "run"
    return fh.Case("trace", ["run", str(path), "--out", str(out), "--quiet"], folder, {"exp.yaml", "trace.npz"},
                   [out], needles=("availability.path",), describe=spec["describe"])


def _imported_file_reads_back(case: fh.Case) -> None:
    """What ``trace import`` writes, turnout reads: the trace with ``load_trace``, the CSV with the devices' reader."""
    out = case.outputs[0]
    if out.suffix == ".npz":
        assert load_trace(out).num_traces >= 1, case.describe
    else:
        assert len(read_capacity_csv(out)) >= 1, case.describe


def pickle_case(spec: dict, folder: Path) -> fh.Case:
    pkl = folder / "trace.pkl"
    pkl.write_bytes(spec["data"])
    out = folder / ("out.npz" if spec["kind"] == "behavior" else "out.csv")
    return fh.Case("pickle", ["trace", "import", str(pkl), "--kind", spec["kind"], "--out", str(out)], folder,
                   {"trace.pkl"}, [out], needles=(str(pkl),), describe=spec["describe"],
                   extra_checks=[_imported_file_reads_back])


def _with_path(tree, path: str):
    """The experiment with the dataset's folder where the strategy wrote ``PATH``."""
    if isinstance(tree, dict):
        return {k: _with_path(v, path) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_with_path(v, path) for v in tree]
    return path if tree == "PATH" else tree


def hf_case(spec: dict, folder: Path) -> fh.Case:
    root = folder / "ds"
    notes, must_refuse = fd.write_dataset(spec["plan"], root)
    path = folder / "exp.yaml"
    path.write_text(fc.dump(_with_path(spec["experiment"], str(root))))
    out = folder / "run"
    return fh.Case("hf_data", ["run", str(path), "--out", str(out), "--quiet"], folder, fh._listing(folder), [out],
                   must_refuse, describe="; ".join(x for x in (spec["describe"], notes) if x))


def flower_case(spec: dict, folder: Path) -> fh.Case:
    if spec["on_hf"]:
        fd.write_dataset(fd.FLOWER_DATA, folder / "ds")
    path = folder / "exp.yaml"
    path.write_text(fc.dump(_with_path(spec["experiment"], str(folder / "ds"))))
    out = folder / "run"
    return fh.Case("flower", ["run", str(path), "--out", str(out), "--quiet"], folder, fh._listing(folder), [out],
                   spec["must_refuse"], describe=spec["describe"])


def _run(build, spec: dict, profile: str) -> str:
    with tempfile.TemporaryDirectory(prefix="turnout-fuzz-") as d:
        return fh.run_case(build(spec, Path(d)), SUBPROCESS_EVERY[profile])


# --- the default suite: 224 cases ----------------------------------------------------------------------------------

@seed(1)
@fuzz_settings(DEFAULT["experiment"])
@given(fc.experiment_files())
def test_experiment_files(spec):
    _run(experiment_case, spec, "default")


@seed(2)
@fuzz_settings(DEFAULT["override"])
@given(fc.override_args())
def test_set_values(spec):
    _run(override_case, spec, "default")


@seed(3)
@fuzz_settings(DEFAULT["trace"])
@given(fc.trace_files())
def test_trace_files(spec):
    _run(trace_case, spec, "default")


@seed(4)
@fuzz_settings(DEFAULT["pickle"])
@given(fc.fedscale_pickles())
def test_fedscale_pickles(spec):
    _run(pickle_case, spec, "default")


@seed(5)
@fuzz_settings(DEFAULT["hf_data"])
@given(fd.hf_experiments())
def test_hf_datasets(spec):
    _run(hf_case, spec, "default")


@seed(6)
@fuzz_settings(DEFAULT["flower"])
@given(fd.flower_experiments())
def test_flower_partitioners(spec):
    _run(flower_case, spec, "default")


# --- the long profile: 2,700 cases ---------------------------------------------------------------------------------

@pytest.mark.slow
@seed(11)
@fuzz_settings(LONG["experiment"])
@given(fc.experiment_files())
def test_experiment_files_long(spec):
    _run(experiment_case, spec, "long")


@pytest.mark.slow
@seed(12)
@fuzz_settings(LONG["override"])
@given(fc.override_args())
def test_set_values_long(spec):
    _run(override_case, spec, "long")


@pytest.mark.slow
@seed(13)
@fuzz_settings(LONG["trace"])
@given(fc.trace_files())
def test_trace_files_long(spec):
    _run(trace_case, spec, "long")


@pytest.mark.slow
@seed(14)
@fuzz_settings(LONG["pickle"])
@given(fc.fedscale_pickles())
def test_fedscale_pickles_long(spec):
    _run(pickle_case, spec, "long")


@pytest.mark.slow
@seed(15)
@fuzz_settings(LONG["hf_data"])
@given(fd.hf_experiments())
def test_hf_datasets_long(spec):
    _run(hf_case, spec, "long")


@pytest.mark.slow
@seed(16)
@fuzz_settings(LONG["flower"])
@given(fd.flower_experiments())
def test_flower_partitioners_long(spec):
    _run(flower_case, spec, "long")
