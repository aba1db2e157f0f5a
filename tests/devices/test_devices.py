"""FLASH-calibrated and FedScale-capacity device models."""

from __future__ import annotations

import numpy as np
import pytest

from turnout.config.components import validate_component
from turnout.core.errors import ConfigError, DataError
from turnout.devices import DEVICES
from turnout.devices.fedscale import CapacityTable, FedScaleCapacity, read_capacity_csv, write_capacity_csv
from turnout.devices.flash import benchmark_scores, speed_distributions
from turnout.world.population import DeviceProfiles


def build(options: dict):
    cls, cfg = validate_component(DEVICES, options, "devices")
    return cls(cfg)


# --- FLASH ---------------------------------------------------------------------------------------

def test_flash_data_is_packaged():
    sd = speed_distributions()
    assert len(sd["down_u"]) == 19
    assert np.median(sd["down_u"]) == pytest.approx(4317.63, abs=0.01)
    assert np.median(sd["up_u"]) == pytest.approx(3285.69, abs=0.01)
    names, scores = benchmark_scores()
    assert len(names) == 307 and scores.min() > 0


def test_flash_bandwidth_medians_in_bytes_per_second():
    kb = 1024  # FLASH's KB/s: it compares model_size / 1024 with the speed
    mean = build({"name": "flash", "bandwidth": "mean"}).profiles(20_000, seed=0)
    assert np.median(mean.down_bytes_per_s) == pytest.approx(4317.63 * kb, rel=1e-3)
    assert np.median(mean.up_bytes_per_s) == pytest.approx(3285.69 * kb, rel=1e-3)
    drawn = build({"name": "flash"}).profiles(20_000, seed=0)
    assert np.median(drawn.down_bytes_per_s) == pytest.approx(4318 * kb, rel=0.15)
    assert np.median(drawn.up_bytes_per_s) == pytest.approx(3286 * kb, rel=0.15)
    assert drawn.down_bytes_per_s.min() > 0 and drawn.up_bytes_per_s.min() > 0  # negatives redrawn
    si = build({"name": "flash", "bandwidth": "mean", "kilobyte_bytes": 1000}).profiles(20_000, seed=0)
    assert np.allclose(si.down_bytes_per_s * 1.024, mean.down_bytes_per_s)


def test_flash_compute():
    p = build({"name": "flash"}).profiles(20_000, seed=1)
    _, scores = benchmark_scores()
    assert np.median(p.compute_s_per_sample) == pytest.approx(0.005, rel=0.05)  # median phone: ref 0.005 s
    assert p.compute_s_per_sample.max() == pytest.approx(0.005 * np.median(scores) / scores.min(), rel=1e-9)
    ln = build({"name": "flash", "compute": "lognormal"}).profiles(50_000, seed=1).compute_s_per_sample
    # FedScale: max(1e-4, lognormal(1, 0.6)) * 0.005 -> median 0.005 e, mean 0.005 e^(1.18)
    assert np.median(ln) == pytest.approx(0.005 * np.e, rel=0.03)
    assert ln.mean() == pytest.approx(0.005 * np.exp(1.18), rel=0.03)
    unit = build({"name": "flash", "compute": "lognormal", "lognormal_mu": -0.18}).profiles(50_000, 1)
    assert unit.compute_s_per_sample.mean() == pytest.approx(0.005, rel=0.03)


def test_flash_is_deterministic_per_seed():
    a = build({"name": "flash"}).profiles(1000, seed=3)
    b = build({"name": "flash"}).profiles(1000, seed=3)
    c = build({"name": "flash"}).profiles(1000, seed=4)
    for f in ("compute_s_per_sample", "down_bytes_per_s", "up_bytes_per_s"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
        assert not np.array_equal(getattr(a, f), getattr(c, f))


# --- FedScale capacity CSV ------------------------------------------------------------------------

def write(tmp_path, text: str, name: str = "cap.csv") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_capacity_profiles_follow_fedscale(tmp_path):
    path = write(tmp_path, "client,computation_ms_per_sample,communication_kbps\n"
                           "432802,162.0,5648.109619499134\n1,30.0,1000\n2,50.0,8000\n")
    p = build({"name": "fedscale_capacity", "path": path}).profiles(7, seed=0)
    rows = (np.arange(7) + 1) % 3  # FedScale: (client + 1) % n_profiles
    comp = np.array([162.0, 30.0, 50.0])[rows]
    kbps = np.array([5648.109619499134, 1000.0, 8000.0])[rows]
    assert np.allclose(p.compute_s_per_sample, 3.0 * comp / 1000.0)  # aug 3 (forward + backward)
    assert np.allclose(p.down_bytes_per_s, kbps * 1024 / 8)  # FedScale's kbit = 1024 bits
    assert np.array_equal(p.down_bytes_per_s, p.up_bytes_per_s)
    glue = build({"name": "fedscale_capacity", "path": path, "aug": 0.4, "kilobit_bits": 1000}).profiles(3, 0)
    assert np.allclose(glue.compute_s_per_sample, 0.4 * np.array([30.0, 50.0, 162.0]) / 1000.0)
    assert np.allclose(glue.down_bytes_per_s, np.array([1000.0, 8000.0, 5648.109619499134]) * 125)
    assert FedScaleCapacity.mapping(4, 3).tolist() == [1, 2, 0, 1]


def test_capacity_per_direction_columns(tmp_path):
    path = write(tmp_path, "client,computation_ms_per_sample,communication_kbps,dl_kbps,ul_kbps\n"
                           "0,10,100,400,50\n1,20,200,800,25\n")
    p = build({"name": "fedscale_capacity", "path": path}).profiles(2, seed=0)
    assert np.allclose(p.down_bytes_per_s, np.array([800.0, 400.0]) * 128)
    assert np.allclose(p.up_bytes_per_s, np.array([25.0, 50.0]) * 128)


def test_capacity_csv_roundtrip(tmp_path):
    t = CapacityTable(np.array([5, 9, 11]), np.array([162.0, 1 / 3, 7.25]),
                      np.array([5648.109619499134, 0.1, 3e6]), np.array([1.5, 2.5, 3.5]), np.array([0.7, 0.8, 0.9]))
    back = read_capacity_csv(write_capacity_csv(tmp_path / "c.csv", t))
    for f in ("client", "computation_ms_per_sample", "communication_kbps", "dl_kbps", "ul_kbps"):
        assert np.array_equal(getattr(back, f), getattr(t, f)), f
    # DeviceProfiles -> CSV -> profiles (client i is row i, and FedScale reads row (i+1) % n)
    prof = DeviceProfiles(np.array([0.003, 0.01, 0.2]), np.array([1e6, 2e6, 3e5]), np.array([5e5, 1e5, 7e4]))
    path = write_capacity_csv(tmp_path / "p.csv", prof)
    got = build({"name": "fedscale_capacity", "path": str(path)}).profiles(3, seed=0)
    inv = np.array([2, 0, 1])  # client j reads row (j+1) % 3, so row i is seen by client (i-1) % 3
    assert np.allclose(got.compute_s_per_sample[inv], prof.compute_s_per_sample)
    assert np.allclose(got.down_bytes_per_s[inv], prof.down_bytes_per_s)
    assert np.allclose(got.up_bytes_per_s[inv], prof.up_bytes_per_s)


@pytest.mark.parametrize("text, needle", [
    ("client,computation_ms_per_sample,communication_kbps\n0,10,0\n", "row 2 column communication_kbps: 0.0"),
    ("client,computation_ms_per_sample,communication_kbps\n0,10,5\n1,10,-3\n", "row 3 column communication_kbps"),
    ("client,computation_ms_per_sample,communication_kbps,dl_kbps,ul_kbps\n0,10,5,5,0\n", "column ul_kbps"),
    ("client,computation_ms_per_sample,communication_kbps\n0,10,nan\n", "must be a finite value > 0"),
    ("client,computation_ms_per_sample,communication_kbps\n0,10,fast\n", "'fast' is not a number"),
    ("client,computation_ms_per_sample,communication_kbps\n0,10\n", "row 2 column communication_kbps"),
    ("client,computation_ms_per_sample,communication_kbps\n0,-1,5\n", "computation_ms_per_sample"),
    ("client,computation,communication\n0,10,5\n", "lacks column(s) computation_ms_per_sample"),
    ("client,computation_ms_per_sample,communication_kbps,dl_kbps\n0,1,5,5\n", "without ul_kbps"),
    ("client,computation_ms_per_sample,communication_kbps\n", "no profiles"),
    ("", "is empty"),
])
def test_capacity_errors_name_file_and_column(tmp_path, text, needle):
    path = write(tmp_path, text)
    dev = build({"name": "fedscale_capacity", "path": path})
    with pytest.raises(DataError) as exc:
        dev.profiles(4, seed=0)
    msg = str(exc.value)
    assert needle in msg and "cap.csv" in msg and "\n" not in msg, msg


def test_capacity_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"devices\.path .*file not found"):
        build({"name": "fedscale_capacity", "path": str(tmp_path / "none.csv")})
    with pytest.raises(ConfigError, match=r"devices\.path"):
        build({"name": "fedscale_capacity"})
    path = write(tmp_path, "client,computation_ms_per_sample,communication_kbps\n0,1,1\n")
    with pytest.raises(ConfigError, match=r"devices\.aug"):
        build({"name": "fedscale_capacity", "path": path, "aug": 0})
    (tmp_path / "p.csv").write_bytes(b"\x80\x04\x95")
    with pytest.raises(DataError, match="pickle"):
        build({"name": "fedscale_capacity", "path": str(tmp_path / "p.csv")}).profiles(2, 0)


def test_writer_refuses_non_positive_bandwidth(tmp_path):
    t = CapacityTable(np.array([0]), np.array([1.0]), np.array([0.0]))
    with pytest.raises(DataError, match="> 0"):
        write_capacity_csv(tmp_path / "x.csv", t)
