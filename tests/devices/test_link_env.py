"""GlueFL §5.4's network environments (devices: link_env): 5G and cloud links, FLASH compute."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.devices import DEVICES
from turnout.world.wire import WirePricer


def build(options: dict):
    cls, cfg = validate_component(DEVICES, options, "devices")
    return cls(cfg)


def pricer(profiles) -> WirePricer:
    """A pricer over bare device profiles: delivery times need nothing else."""
    return WirePricer(SimpleNamespace(devices=profiles), ledger=None, compressor=None, downlink_vectors=1,
                      buffer_bytes=0)


def test_link_env_5g_transfer_time_by_hand():
    # Every client at the 5G medians: 1,000 Mb/s down = 125,000,000 B/s, 100 Mb/s up = 12,500,000 B/s.
    # A dense MLP(200) on Fashion-MNIST: 159,010 float32 = 636,040 B each way. 200 samples (10 steps × 20).
    #   download 636,040 / 125,000,000 = 0.00508832 s
    #   upload   636,040 /  12,500,000 = 0.0508832 s
    # Compute is the FLASH model's, checked separately: delivery = download + compute + upload.
    prof = build({"name": "link_env", "env": "5g", "bandwidth": "median"}).profiles(4, seed=0)
    clients = np.arange(4)
    size = np.full(4, 636_040.0)
    p = pricer(prof)
    assert p.download_s(clients, size) == pytest.approx(np.full(4, 0.00508832), rel=1e-12)
    assert p.upload_s(clients, size) == pytest.approx(np.full(4, 0.0508832), rel=1e-12)
    compute = 200 * prof.compute_s_per_sample
    assert p.delivery_s(clients, size, np.full(4, 200), size) == pytest.approx(0.00508832 + compute + 0.0508832,
                                                                               rel=1e-12)


def test_link_env_cloud_transfer_time_by_hand():
    # Cloud medians 1,000 Mb/s both ways = 125,000,000 B/s. For 1,000,000 B: 1e6 / 125e6 = 0.008 s each way.
    prof = build({"name": "link_env", "env": "cloud", "bandwidth": "median"}).profiles(3, seed=5)
    p, clients, size = pricer(prof), np.arange(3), np.full(3, 1e6)
    assert p.download_s(clients, size).tolist() == [0.008] * 3
    assert p.upload_s(clients, size).tolist() == [0.008] * 3


def test_link_env_drawn_spread_by_hand():
    # One client, seed 0: the two standard normals z_down, z_up of the stream devices/link_env/network give
    # 5G bandwidths 1,000 × exp(0.6 z_down) and 100 × exp(0.6 z_up) Mb/s.
    from turnout.core import rng as rngmod
    g = rngmod.stream(0, "devices/link_env/network")
    z_down, z_up = g.standard_normal(1)[0], g.standard_normal(1)[0]
    five = build({"name": "link_env", "env": "5g"}).profiles(1, seed=0)
    assert five.down_bytes_per_s[0] == pytest.approx(1000 * np.exp(0.6 * z_down) * 125_000, rel=1e-12)
    assert five.up_bytes_per_s[0] == pytest.approx(100 * np.exp(0.6 * z_up) * 125_000, rel=1e-12)
    cloud = build({"name": "link_env", "env": "cloud"}).profiles(1, seed=0)
    assert cloud.down_bytes_per_s[0] == pytest.approx(1000 * np.exp(0.2 * z_down) * 125_000, rel=1e-12)


def test_link_env_drawn_spread_keeps_the_medians():
    five = build({"name": "link_env", "env": "5g"}).profiles(40_000, seed=1)
    assert np.median(five.down_bytes_per_s) == pytest.approx(1000 * 125_000, rel=0.03)
    assert np.median(five.up_bytes_per_s) == pytest.approx(100 * 125_000, rel=0.03)
    # ln-σ 0.6: the 90th percentile is exp(1.2816 × 0.6) = 2.158× the median
    assert np.quantile(five.down_bytes_per_s, 0.9) / np.median(five.down_bytes_per_s) == pytest.approx(2.158, rel=0.04)
    cloud = build({"name": "link_env", "env": "cloud"}).profiles(40_000, seed=1)
    assert np.median(cloud.up_bytes_per_s / 125_000) == pytest.approx(1000.0, rel=0.01)
    # ln-σ 0.2: the 90th percentile is exp(1.2816 × 0.2) = 1.292× the median
    assert np.quantile(cloud.down_bytes_per_s, 0.9) / np.median(cloud.down_bytes_per_s) == pytest.approx(1.292,
                                                                                                          rel=0.02)


def test_link_env_changes_only_the_network():
    # The paper changes only the network: same seed, same compute per client as devices: {name: flash}.
    flash = build({"name": "flash"}).profiles(500, seed=3)
    for env in ("5g", "cloud"):
        prof = build({"name": "link_env", "env": env}).profiles(500, seed=3)
        np.testing.assert_array_equal(prof.compute_s_per_sample, flash.compute_s_per_sample)
        assert not np.array_equal(prof.down_bytes_per_s, flash.down_bytes_per_s)
    again = build({"name": "link_env", "env": "5g"}).profiles(500, seed=3)
    np.testing.assert_array_equal(again.down_bytes_per_s, build({"name": "link_env", "env": "5g"}).profiles(
        500, seed=3).down_bytes_per_s)
    assert not np.array_equal(again.down_bytes_per_s,
                              build({"name": "link_env", "env": "5g"}).profiles(500, seed=4).down_bytes_per_s)


def test_link_env_median_override_and_errors():
    low = build({"name": "link_env", "env": "5g", "bandwidth": "median", "down_Mbps": 80, "up_Mbps": 20})
    prof = low.profiles(2, seed=0)
    assert prof.down_bytes_per_s.tolist() == [10_000_000.0] * 2 and prof.up_bytes_per_s.tolist() == [2_500_000.0] * 2
    slow_cloud = build({"name": "link_env", "env": "cloud", "bandwidth": "median", "up_Mbps": 8}).profiles(1, seed=0)
    assert slow_cloud.down_bytes_per_s.tolist() == [125_000_000.0] and slow_cloud.up_bytes_per_s.tolist() == [1e6]
    with pytest.raises(ConfigError, match="devices.spread"):
        build({"name": "link_env", "env": "cloud", "spread": -1})
    with pytest.raises(ConfigError, match="devices.env"):
        build({"name": "link_env", "env": "4g"})
    with pytest.raises(ConfigError, match="devices.env"):
        build({"name": "link_env"})
