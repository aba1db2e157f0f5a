"""Same numbers on every machine: discrete outcomes independent of the BLAS kernel, pinned versions, one-line refusals.

A machine of this project's kind may run numpy's OpenBLAS with another kernel (``OPENBLAS_CORETYPE``) or
another CPU's vector width; both change the order of float additions. These tests hold the parts that decide
something (a cohort, an availability draw, a label) to results that do not depend on that order, and check the
environment pins and the refusals that keep a fresh machine on the recorded environment.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import yaml

from turnout.app.cli import main
from turnout.core import numerics
from turnout.core.environment import NUMERIC_PACKAGES, float_fingerprint

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("golden_hashes_portability", ROOT / "scripts" / "golden_hashes.py")
golden = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(golden)


# ---- pins -----------------------------------------------------------------------------------------------------
def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", line.strip())
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def _name(requirement: str) -> str:
    return re.match(r"^[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")


def test_every_core_dependency_and_every_number_changing_package_is_pinned():
    pins = _pins()
    core = [_name(r) for r in metadata.requires("turnout") or [] if "extra ==" not in r]
    assert "numpy" in core and "torch" in core
    unpinned = [d for d in [*core, *NUMERIC_PACKAGES, "threadpoolctl"] if d not in pins]
    assert not unpinned, f"pin these in constraints.txt: {unpinned}"


def test_the_installed_numeric_core_is_the_pinned_one():
    pins = _pins()
    for dist in NUMERIC_PACKAGES:
        installed = metadata.version(dist).split("+")[0]  # torch's local tag: 2.13.0+cpu
        assert installed == pins[dist], f"{dist} {installed} is installed, constraints.txt pins {pins[dist]}"


# ---- products that decide something -------------------------------------------------------------------------
def _features(seed: int = 0, n: int = 30, dim: int = 37) -> np.ndarray:
    rng = np.random.default_rng(seed)
    f = rng.normal(size=(n, dim)) * rng.lognormal(0, 2, size=(n, 1))
    f[3] = 0.0  # a client without features
    return f


def test_cosine_similarity_is_the_exact_integer_gram_whatever_the_summation_order():
    f = _features()
    got = numerics.cosine_similarity(f)
    norms = np.sqrt((f * f).sum(axis=1))
    unit = np.divide(f, norms[:, None], out=np.zeros_like(f), where=norms[:, None] > 0)
    q = [[int(x) for x in row] for row in np.rint(unit * 2.0 ** numerics.UNIT_BITS)]
    scale = 2 ** (2 * numerics.UNIT_BITS)
    for i in range(len(q)):
        for j in range(len(q)):
            exact = sum(a * b for a, b in zip(q[i], q[j]))  # Python integers: no rounding anywhere
            assert got[i, j] == min(1.0, max(-1.0, exact / scale)), (i, j)
    perm = np.random.default_rng(1).permutation(f.shape[1])
    assert np.array_equal(numerics.cosine_similarity(f[:, perm]), got)  # another summation order, same bits
    assert np.array_equal(numerics.cosine_similarity(f[::-1])[::-1, ::-1], got)


def test_ordered_matmul_sums_in_index_order_and_labels_follow_it():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(50, 23)), rng.normal(size=(23, 7))
    got = numerics.ordered_matmul(a, b)
    for i in (0, 17, 49):
        for j in range(7):
            acc = 0.0
            for k in range(23):
                acc = acc + a[i, k] * b[k, j]
            assert got[i, j] == acc
    assert np.allclose(got, a @ b, rtol=1e-12)
    assert np.array_equal(numerics.ordered_matmul(a, b[:, 0]), got[:, 0])
    with pytest.raises(ValueError, match="do not multiply"):
        numerics.ordered_matmul(a, b.T)


def _run(raw: dict, tmp: Path) -> dict[str, str]:
    return golden.run_case_tables(raw, [], tmp)


FEDGS = dict(golden.MATRIX_BASE, availability={"name": "ln", "beta": 0.5})


@pytest.mark.parametrize("graph", ["oracle", "update_cosine"])
def test_fedgs_cohorts_do_not_depend_on_the_order_features_are_summed_in(graph, tmp_path, monkeypatch):
    raw = dict(FEDGS, selector={"name": "fedgs", "clients_per_round": golden.K, "graph": graph})
    reference = _run(raw, tmp_path / "reference")
    exact = numerics.cosine_similarity
    perm = np.random.default_rng(3).permutation

    def permuted(features):  # the same features, their coordinates added up in another order
        f = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
        return exact(f[:, perm(f.shape[1])])

    monkeypatch.setattr(numerics, "cosine_similarity", permuted)
    assert _run(raw, tmp_path / "permuted") == reference


def test_oort_cohorts_do_not_depend_on_the_last_bit_of_a_client_loss(tmp_path, monkeypatch):
    """A client's mean loss is a float reduction; another kernel's order moves it by an ulp. The cohorts stay."""
    from turnout.selectors.oort import OortSelector

    raw = dict(golden.MATRIX_BASE, rounds=10, selector={"name": "oort", "clients_per_round": golden.K},
               round_mode={"name": "over_commit", "oc": 1.5})
    reference = _run(raw, tmp_path / "reference")
    observe = OortSelector.observe
    rng = np.random.default_rng(4)

    def nudged(self, feedback):
        loss = np.asarray(feedback.train_loss, dtype=np.float64)
        away = np.where(rng.random(len(loss)) < 0.5, -np.inf, np.inf)
        return observe(self, dataclasses.replace(feedback, train_loss=np.nextafter(loss, away)))

    monkeypatch.setattr(OortSelector, "observe", nudged)
    assert _run(raw, tmp_path / "nudged") == reference


def test_label_mix_availability_is_summed_in_a_fixed_order():
    from turnout.availability.fedsum import label_mix_probabilities

    hist = np.random.default_rng(5).integers(0, 50, size=(40, 10)).astype(np.float64)
    p = label_mix_probabilities(hist, seed=0)
    u_first = label_mix_probabilities(np.eye(10), seed=0)  # one class each: p_i is u_i itself
    mix = numerics.ordered_matmul(hist, u_first) / hist.sum(axis=1)
    assert np.array_equal(p, np.clip(mix, 0.0, 1.0))


# ---- YAML types an experiment cannot hold -------------------------------------------------------------------
@pytest.mark.parametrize("line, needle", [
    ("seeds: !!set {1, 2}", "seeds is a set (!!set)"),
    ("seeds: !!omap [a: 1]", "seeds is an ordered mapping (!!omap)"),
    ("seeds: !!pairs [a: 1, b: 2]", "seeds is a list of pairs (!!pairs)"),
    ("name: !!binary 'AAAA'", "name is binary data (!!binary)"),
    ("name: !!timestamp 2021-01-01", "name is a timestamp (!!timestamp)"),
    ("variants: [{name: a, set: {seeds: !!set {1}}}]", "variants[0].set.seeds is a set"),
    ("base: &b [1, 2]\nseeds: {<<: *b}", "expected a mapping for merging"),
])
def test_yaml_types_beyond_json_are_one_line_exit_2_and_no_traceback(line, needle, tmp_path, capsys, monkeypatch):
    import turnout.app.process as process

    monkeypatch.setattr(process, "_log_traceback", lambda exc: pytest.fail(f"a traceback was logged: {exc!r}"))
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"rounds: 2\n{line}\n")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("turnout: error: ") and needle in err, err
    assert not out.exists() and not out.with_name("run.partial").exists()


def test_a_date_without_a_tag_is_text(tmp_path):
    from turnout.config import safe_yaml

    assert safe_yaml.load("name: 2021-01-01\nwhen: 2021-01-01 10:00:00\n") == {"name": "2021-01-01",
                                                                             "when": "2021-01-01 10:00:00"}
    with pytest.raises(safe_yaml.BadYaml, match=r"seeds is a set \(!!set\).*\(line 1, column 8\)"):
        safe_yaml.load("seeds: !!set {1, 2}")


# ---- worker processes and memory ----------------------------------------------------------------------------
def test_too_many_workers_is_one_line_naming_workers_before_any_worker_starts(tmp_path, capsys, monkeypatch):
    from turnout.executors import parallel

    def no_pool(self, n):
        raise AssertionError("a worker pool was started")

    monkeypatch.setattr(parallel.WorkerPool, "__init__", no_pool)
    out = tmp_path / "run"
    rc = main(["run", str(ROOT / "experiments" / "refl" / "rules.yaml"), "--out", str(out), "--quiet",
               "--set", "executor.name=parallel", "--set", "executor.workers=256"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert re.search(r"^turnout: error: .*executor\.workers = 256: the run needs about .*the executor's 256 worker "
                     r"processes .*lower executor\.workers \(each worker process holds about", err), err
    assert not out.exists() and not out.with_name("run.partial").exists()


def _variants(workers: int, executor: str = "parallel"):
    from turnout.sim.composition import expand

    return expand(dict(golden.MATRIX_BASE, executor={"name": executor, "workers": workers}))


def test_each_worker_process_is_counted_and_more_than_the_cores_warns(monkeypatch):
    from turnout.core.errors import ConfigError, ConfigWarning
    from turnout.runs import preflight

    monkeypatch.setattr(preflight, "worker_process_bytes", lambda: 300 << 20)
    monkeypatch.setattr(preflight, "available_cores", lambda: 2)

    def workers_term(n, executor="parallel"):
        return next(t for t in preflight.estimate(_variants(n, executor)) if t.key == "executor.workers")

    two, eight = workers_term(2), workers_term(8)
    assert eight.bytes - two.bytes == 6 * ((300 << 20) + 4 * 4 * 610)  # per worker: interpreter + model copies
    assert workers_term(8, "auto").bytes == eight.bytes  # auto may pick parallel on any CPU round
    with pytest.warns(ConfigWarning, match=r"executor.workers = 3 starts more worker processes than the 2 cores"):
        preflight.check_resources(_variants(3), available=1 << 40)
    with pytest.raises(ConfigError, match=r"executor\.workers.*lower executor\.workers"):
        preflight.check_resources(_variants(64), available=8 << 30)


def test_the_worker_size_is_measured_from_a_fresh_interpreter():
    from turnout.executors import parallel

    size = parallel.worker_process_bytes()
    assert 50 << 20 < size < 4 << 30  # torch alone maps well over 50 MB; nothing near 4 GB
    assert size != parallel.FALLBACK_WORKER_BYTES


# ---- resume in another environment --------------------------------------------------------------------------
def test_resume_says_in_one_line_when_package_versions_differ(tmp_path):
    raw = dict(golden.MATRIX_BASE, rounds=4, runtime={"checkpoint_every_rounds": 1})
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    env = {**__import__("os").environ, "TURNOUT_CRASH_AT": "round@2"}
    r = subprocess.run([sys.executable, "-m", "turnout", "run", str(cfg), "--out", str(out), "--quiet"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode < 0, r.stderr
    partial = out.with_name("run.partial")
    config = yaml.safe_load((partial / "config.yaml").read_text())
    assert config["turnout"]["numpy"] == np.__version__ and "scipy" in config["turnout"]
    floats = config["turnout"]["floats"]
    assert floats == float_fingerprint()
    config["turnout"]["numpy"] = "1.26.0"
    config["turnout"]["floats"] = "0123456789abcdef"  # started on a CPU whose kernels add in another order
    (partial / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "turnout", "resume", str(out), "--quiet"], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("turnout: warning:")]
    assert len(warnings) == 1 and f"numpy 1.26.0 → {np.__version__}" in warnings[0], r.stderr
    assert f"floats 0123456789abcdef → {floats}" in warnings[0]
    assert "last digits" in warnings[0]


# ---- the measured float fingerprint ----------------------------------------------------------------------
def _fingerprint_under(**env):
    code = ("import json; from turnout.core.environment import fingerprint; print(json.dumps(fingerprint()))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**__import__("os").environ, **env})
    assert r.returncode == 0, r.stderr
    return __import__("json").loads(r.stdout)


def test_the_float_fingerprint_sees_the_kernels_that_their_names_miss():
    """MKL and oneDNN pick their code path by CPU vendor and model (an Intel and an AMD machine with the same kernel
    names add in different orders). A knob that moves those paths without renaming a kernel must move ``floats``
    wherever it has an effect: ``MKL_ENABLE_INSTRUCTIONS`` does on Intel and is ignored by MKL on other vendors,
    ``ONEDNN_MAX_CPU_ISA`` does on every vendor. So: every knob leaves the names alone; at least one of them moves
    the bits here; and a knob that moves nothing here is named (a warning), not asserted about."""
    from turnout.core import emulation

    native = _fingerprint_under()
    assert native["floats"] == _fingerprint_under()["floats"]  # a measurement that repeats
    unnamed = {"MKL_ENABLE_INSTRUCTIONS": emulation.other_mkl(),
               "ONEDNN_MAX_CPU_ISA": emulation.other_onednn(native["torch_cpu"])}
    moved = {}
    for knob, value in unnamed.items():
        got = _fingerprint_under(**{knob: value})
        assert {k: got[k] for k in got if k != "floats"} == {k: native[k] for k in native if k != "floats"}, knob
        moved[knob] = got["floats"] != native["floats"]
        if not moved[knob]:
            import warnings

            warnings.warn(f"{knob}={value} has no effect on this CPU's kernels (floats {native['floats']} both "
                          "times); the fingerprint test relies on the other unnamed knob here", stacklevel=1)
    assert any(moved.values()), f"no vendor-path knob moves the float fingerprint here: {moved}"
    aten = _fingerprint_under(ATEN_CPU_CAPABILITY="default")
    assert aten["floats"] != native["floats"] and aten["torch_cpu"] == "DEFAULT"
    blas = _fingerprint_under(OPENBLAS_CORETYPE=emulation.other_blas(native["numpy_blas"]))
    assert blas["floats"] != native["floats"] and blas["torch_cpu"] == native["torch_cpu"]
