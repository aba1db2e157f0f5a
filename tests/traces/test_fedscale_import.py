"""Converting FedScale pickles once, safely, and using the result through configs."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml

from turnout.app.cli import main
from turnout.core.errors import DataError
from turnout.devices.fedscale import read_capacity_csv
from turnout.traces import load_trace
from turnout.traces.fedscale import (
    behavior_from_dict,
    export_fedscale_behavior,
    import_fedscale_behavior,
    safe_unpickle,
)

#: REFL's comment on FedScale's client_behave_trace, key 3834.
CLIENT_3834 = {
    "duration": 211625,
    "inactive": [65881, 133574, 208292, 276575, 295006, 356236, 400906, 475099],
    "finish_time": 518400,
    "active": [12788, 100044, 188992, 271372, 276663, 352625, 356267, 441193],
    "model": "CPH1801",
}
BEHAVIOR = {
    3834: CLIENT_3834,
    17: {"duration": 100, "inactive": [150, 400], "finish_time": 1000, "active": [100, 350], "model": "SM-G960F"},
    99: {"duration": 1000, "inactive": [1000], "finish_time": 1000, "active": [0], "model": "Pixel 4"},
    5: {"duration": 0, "inactive": [], "finish_time": 518400, "active": [], "model": "unknown"},
}
CAPACITY = {
    432802: {"computation": 162.0, "communication": 5648.109619499134},
    1: {"computation": 30.5, "communication": 12000.0},
    2: {"computation": np.float64(80.0), "communication": np.float64(800.25)},  # numpy scalars are allowed
}


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {Evil.marker}",))


def cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_line_error(rc, out, err, *needles):
    assert rc == 2, err
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.fixture
def behavior_pkl(tmp_path) -> Path:
    p = tmp_path / "client_behave_trace.pkl"
    p.write_bytes(pickle.dumps(BEHAVIOR))
    return p


def test_import_behavior_via_cli_and_exact_availability(tmp_path, behavior_pkl, capsys):
    out = tmp_path / "behave.npz"
    rc, stdout, err = cli(["trace", "import", str(behavior_pkl), "--out", str(out)], capsys)
    assert rc == 0, err
    assert "4 traces" in stdout
    tr = load_trace(out)
    assert tr.num_traces == 4  # dict order kept: 3834, 17, 99, 5
    assert tr.model.tolist() == ["CPH1801", "SM-G960F", "Pixel 4", "unknown"]
    assert tr.online_seconds()[0] == 211625  # FedScale's duration = total online time
    act, ina = CLIENT_3834["active"], CLIENT_3834["inactive"]
    period = 518400
    for k in range(3):  # periodicity: t mod finish_time
        shift = k * period
        for a, b in zip(act, ina):
            for t, want in ((a, True), (b, True), ((a + b) / 2, True), (a - 0.5, False), (b + 0.5, False)):
                assert tr.is_online([0], t + shift)[0] == want, (t, k)
            assert tr.online_until([0], a + shift + 1)[0] == b + shift
    # random times against the FedScale rule, for every client
    rng = np.random.default_rng(0)
    for t in rng.uniform(0, 3 * period, 300):
        for i, v in enumerate(BEHAVIOR.values()):
            tau = t % v["finish_time"]
            want = any(a <= tau <= b for a, b in zip(v["active"], v["inactive"]))
            assert tr.is_online([i], t)[0] == want
    assert np.isinf(tr.online_until([2], 123.0)[0])  # online for the whole period
    assert not tr.is_online([3], 10.0)[0]  # no intervals: never online


def test_roundtrip_export_import():
    tr, rep = behavior_from_dict(BEHAVIOR)
    back = export_fedscale_behavior(tr, keys=list(BEHAVIOR))
    assert back == BEHAVIOR
    assert rep.merged == rep.dropped == rep.clipped == 0


def test_normalisation_is_reported():
    messy = {1: {"active": [50, 10, 15, 20, 900], "inactive": [60, 15, 18, 1200, 950], "finish_time": 1000,
                 "duration": 0, "model": "x"}}
    tr, rep = behavior_from_dict(messy)
    assert tr.intervals(0).tolist() == [[10.0, 18.0], [20.0, 1000.0]]
    assert rep.unsorted_traces == 1 and rep.merged == 3 and rep.clipped == 1 and rep.dropped == 0


@pytest.mark.parametrize("bad, needle", [
    ([1, 2], "holds a list"),
    ({}, "empty dict"),
    ({1: [1, 2]}, "entry 1 is a list"),
    ({1: {"active": [1], "inactive": [2]}}, "lacks finish_time"),
    ({1: {"active": [1], "inactive": [2, 3], "finish_time": 10}}, "active has 1 entries but inactive has 2"),
    ({1: {"active": [5], "inactive": [2], "finish_time": 10}}, "expected 0 <= active <= inactive"),
    ({1: {"active": ["a"], "inactive": [2], "finish_time": 10}}, "expected finite numbers"),
    ({1: {"active": [1], "inactive": [2], "finish_time": 0}}, "finish_time = 0"),
    ({1: {"active": [1], "inactive": [2], "finish_time": 10, "model": 3}}, "model = 3"),
])
def test_schema_errors_are_one_line(tmp_path, capsys, bad, needle):
    p = tmp_path / "b.pkl"
    p.write_bytes(pickle.dumps(bad))
    rc, out, err = cli(["trace", "import", str(p), "--out", str(tmp_path / "b.npz")], capsys)
    one_line_error(rc, out, err, needle)
    assert not (tmp_path / "b.npz").exists()


def test_malicious_pickle_is_refused(tmp_path, capsys):
    marker = tmp_path / "pwned"
    Evil.marker = marker
    p = tmp_path / "evil.pkl"
    p.write_bytes(pickle.dumps({1: {"active": [Evil()], "inactive": [2], "finish_time": 10}}))
    rc, out, err = cli(["trace", "import", str(p), "--out", str(tmp_path / "e.npz")], capsys)
    one_line_error(rc, out, err, "was refused", "system")
    assert not marker.exists()
    for kind in ("capacity",):
        rc, out, err = cli(["trace", "import", str(p), "--kind", kind, "--out", str(tmp_path / "e.csv")], capsys)
        one_line_error(rc, out, err, "was refused")
    assert not marker.exists()
    # builtins such as eval are refused too, whatever the protocol
    evil2 = b"cbuiltins\neval\n(S'1+1'\ntR."
    (tmp_path / "e2.pkl").write_bytes(evil2)
    with pytest.raises(DataError, match="builtins.eval"):
        safe_unpickle(tmp_path / "e2.pkl")


def test_garbage_and_truncated_pickles(tmp_path, behavior_pkl):
    data = behavior_pkl.read_bytes()
    (tmp_path / "t.pkl").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="not a readable pickle"):
        import_fedscale_behavior(tmp_path / "t.pkl")
    (tmp_path / "g.pkl").write_bytes(b"hello world")
    with pytest.raises(DataError, match="not a readable pickle"):
        import_fedscale_behavior(tmp_path / "g.pkl")


def test_import_capacity_to_csv(tmp_path, capsys):
    p = tmp_path / "client_device_capacity"
    p.write_bytes(pickle.dumps(CAPACITY))
    out = tmp_path / "cap.csv"
    rc, stdout, err = cli(["trace", "import", str(p), "--kind", "capacity", "--out", str(out)], capsys)
    assert rc == 0, err
    t = read_capacity_csv(out)
    assert t.client.tolist() == [432802, 1, 2]
    assert t.communication_kbps.tolist() == [5648.109619499134, 12000.0, 800.25]
    assert t.computation_ms_per_sample.tolist() == [162.0, 30.5, 80.0]
    assert not t.has_links
    # GlueFL's per-direction columns
    glue = {k: {**v, "dl_kbps": 2 * float(v["communication"]), "ul_kbps": 0.5 * float(v["communication"])}
            for k, v in CAPACITY.items()}
    p2 = tmp_path / "ul_dl.pkl"
    p2.write_bytes(pickle.dumps(glue))
    rc, _, err = cli(["trace", "import", str(p2), "--kind", "capacity", "--out", str(tmp_path / "g.csv")], capsys)
    assert rc == 0, err
    g = read_capacity_csv(tmp_path / "g.csv")
    assert g.has_links and g.dl_kbps[0] == 2 * 5648.109619499134
    # non-positive bandwidth is an error, never a fallback
    bad = dict(CAPACITY)
    bad[7] = {"computation": 10.0, "communication": 0.0}
    p3 = tmp_path / "bad.pkl"
    p3.write_bytes(pickle.dumps(bad))
    rc, out, err = cli(["trace", "import", str(p3), "--kind", "capacity", "--out", str(tmp_path / "b.csv")], capsys)
    one_line_error(rc, out, err, "entry 7", "communication = 0.0", "> 0")


def test_out_exists_needs_force(tmp_path, behavior_pkl, capsys):
    out = tmp_path / "o.npz"
    out.write_bytes(b"x")
    rc, o, err = cli(["trace", "import", str(behavior_pkl), "--out", str(out)], capsys)
    one_line_error(rc, o, err, "--out", "already exists")
    rc, _, err = cli(["trace", "import", str(behavior_pkl), "--out", str(out), "--force"], capsys)
    assert rc == 0, err


def test_generate_cli(tmp_path, capsys):
    out = tmp_path / "g.npz"
    rc, stdout, err = cli(["trace", "generate", "--clients", "300", "--seed", "4", "--days", "2",
                           "--out", str(out)], capsys)
    assert rc == 0, err
    tr = load_trace(out)
    assert tr.num_traces == 300 and np.all(tr.period_s == 2 * 86400)
    rc, o, err = cli(["trace", "generate", "--clients", "0", "--out", str(tmp_path / "z.npz")], capsys)
    one_line_error(rc, o, err, "--clients")


# --- used through a config -------------------------------------------------------------------

BASE = {
    "name": "trace-cfg", "seeds": [0], "rounds": 2,
    "data": {"name": "synthetic", "num_clients": 6, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "selector": {"name": "uniform", "clients_per_round": 1},
    "output": {"progress": False, "plots": False},
}


def run_cfg(tmp_path, capsys, availability):
    cfg = dict(BASE, availability=availability)
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    rc, out, err = cli(["run", str(p), "--out", str(run_dir), "--quiet"], capsys)
    return rc, out, err, run_dir


def test_bad_trace_files_fail_the_run_in_one_line(tmp_path, capsys, behavior_pkl):
    good = tmp_path / "good.npz"
    assert cli(["trace", "import", str(behavior_pkl), "--out", str(good)], capsys)[0] == 0
    data = good.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[: len(data) - 30])
    np.savez_compressed(tmp_path / "malformed.npz", offsets=np.array([0, 2]), start_s=np.array([5.0, 1.0]),
                        end_s=np.array([6.0, 2.0]), period_s=np.array([10.0]))
    cases = [
        (str(tmp_path / "trunc.npz"), "truncated or corrupt"),
        (str(behavior_pkl), "is a Python pickle"),
        (str(tmp_path / "malformed.npz"), "unsorted or overlap"),
        (str(tmp_path / "nope.npz"), "file not found"),
    ]
    for path, needle in cases:
        rc, out, err, run_dir = run_cfg(tmp_path, capsys, {"name": "trace", "path": path})
        one_line_error(rc, out, err, "availability.path", needle)
        assert not run_dir.exists() and not run_dir.with_name("run.partial").exists()
    rc, out, err, run_dir = run_cfg(tmp_path, capsys, {"name": "trace", "path": str(good), "lookup": "bogus"})
    one_line_error(rc, out, err, "availability.lookup")


def test_imported_trace_runs(tmp_path, capsys, behavior_pkl):
    good = tmp_path / "good.npz"
    assert cli(["trace", "import", str(behavior_pkl), "--out", str(good)], capsys)[0] == 0
    rc, out, err, run_dir = run_cfg(tmp_path, capsys, {"name": "trace", "path": str(good),
                                                       "time_offset_s": 12788.0})
    assert rc == 0, err
    assert (run_dir / "summary.json").is_file()
