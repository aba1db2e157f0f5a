"""FLASH-calibrated heterogeneous phones: measured bandwidth distributions and AI-Benchmark speed.

Data (vendored in ``turnout/devices/data/flash/``, BSD-2-Clause, see its README): FLASH's
``speed_distri.json`` (19 real phones, each a normal distribution N(u, σ) of download and upload
speed) and ``benchmark2score.json`` (307 phone models → AI-Benchmark score). Citation: Yang et
al., "Characterizing Impacts of Heterogeneity in Federated Learning upon Large-Scale Smartphone
Data", WWW 2021.

Per client, drawn once from the run seed (streams ``devices/flash/network`` and
``devices/flash/compute``), vectorised:

* **bandwidth** — a phone of ``speed_distri.json`` uniformly at random (FLASH's ``hard_hete``
  mode, ``random.sample``), then one draw from its N(down_u, down_σ) and N(up_u, up_σ),
  redrawing values ``<= 0`` as FLASH redraws negative ones (FLASH only rejects ``< 0``; a zero
  bandwidth would be an infinite transfer, so we reject it too). FLASH redraws a speed for every
  transfer; turnout's device profiles are static, so the draw is per client.
  ``bandwidth: mean`` uses ``u`` itself (no noise). Units: FLASH compares ``model_size / 1024``
  with the speed, so the values are **KB/s with 1 KB = 1,024 bytes** (``kilobyte_bytes: 1024``,
  the default). Medians of ``u`` over the 19 phones: down 4,318 KB/s, up 3,286 KB/s.
  (``homogeneous`` uses the same medians but with 1 KB = 1,000 bytes.)
* **compute** —
  ``ai_benchmark`` (default): a phone of ``benchmark2score.json`` uniformly at random;
  ``compute_s_per_sample = s_per_sample × median_score / score`` — a phone with the median
  AI-Benchmark score (4,638) takes ``s_per_sample`` (default FedScale's 0.005 s), and speed is
  taken as proportional to the score (spread 212 … 76,206, so 0.11 s … 0.0003 s per sample).
  ``lognormal``: FedScale's ``get_completion_time_lognormal``:
  ``max(1e-4, LogNormal(mu=1, sigma=tail_skew)) × s_per_sample`` with ``tail_skew = 0.6``.
  Note that FedScale calls 0.005 the "mean seconds per sample" but multiplies it by a
  log-normal whose mean is ``exp(1 + 0.6²/2) ≈ 3.25``; we follow the code (``lognormal_mu: 1``),
  set ``lognormal_mu: -0.18`` for a mean of exactly ``s_per_sample``. FedScale draws it per task;
  here it is per client.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Literal

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_S_PER_SAMPLE
from ..core import rng as rngmod
from ..world.population import DeviceProfiles
from .base import DEVICES, DeviceModel


@lru_cache(maxsize=None)
def _load(name: str):
    res = resources.files("turnout.devices").joinpath("data").joinpath("flash").joinpath(name)
    return json.loads(res.read_text(encoding="utf-8"))


def speed_distributions() -> dict[str, np.ndarray]:
    """FLASH's 19 phones: arrays ``down_u, down_sigma, up_u, up_sigma`` in KB/s, file order."""
    d = _load("speed_distri.json")
    keys = ("down_u", "down_sigma", "up_u", "up_sigma")
    return {k: np.array([float(v[k]) for v in d.values()]) for k in keys}


def benchmark_scores() -> tuple[list[str], np.ndarray]:
    """AI-Benchmark phone models and their scores (``benchmark2score.json``, file order)."""
    d = _load("benchmark2score.json")
    return list(d.keys()), np.array([float(v) for v in d.values()])


def positive_normal(rng: np.random.Generator, mean: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """One N(mean, sigma) draw per entry, redrawing values ``<= 0`` (FLASH's rejection loop)."""
    out = rng.normal(mean, sigma)
    bad = np.flatnonzero(out <= 0)
    while len(bad):
        out[bad] = rng.normal(mean[bad], sigma[bad])
        bad = bad[out[bad] <= 0]
    return out


class FlashConfig(StrictModel):
    compute: Literal["ai_benchmark", "lognormal"] = Field(
        "ai_benchmark", description="per-sample compute: AI-Benchmark score ratio, or FedScale's log-normal")
    s_per_sample: float = Field(0.005, gt=0.0, le=MAX_S_PER_SAMPLE,
                                description="seconds/sample of a median-score phone "
                                            "(ai_benchmark) or FedScale's mean_seconds_per_sample (lognormal)")
    tail_skew: float = Field(0.6, ge=0.0, le=10.0, description="sigma of FedScale's log-normal (lognormal)")
    lognormal_mu: float = Field(1.0, ge=-50.0, le=50.0, description="mu of FedScale's log-normal (FedScale's code: 1)")
    bandwidth: Literal["normal", "mean"] = Field("normal", description="draw from N(u, sigma) or use u")
    kilobyte_bytes: Literal[1000, 1024] = Field(1024, description="bytes per KB of FLASH's KB/s (FLASH: 1024)")


@DEVICES.register("flash")
class FlashDevices(DeviceModel):
    """FLASH's measured phone bandwidths and AI-Benchmark (or FedScale log-normal) compute speed."""

    Config = FlashConfig

    def bandwidths_kBps(self, num_clients: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(down, up) in FLASH's KB/s per client."""
        sd = speed_distributions()
        rng = rngmod.stream(seed, "devices/flash/network")
        phone = rng.integers(0, len(sd["down_u"]), num_clients)
        if self.cfg.bandwidth == "mean":
            return sd["down_u"][phone], sd["up_u"][phone]
        down = positive_normal(rng, sd["down_u"][phone], sd["down_sigma"][phone])
        up = positive_normal(rng, sd["up_u"][phone], sd["up_sigma"][phone])
        return down, up

    def compute_s_per_sample(self, num_clients: int, seed: int) -> np.ndarray:
        c = self.cfg
        rng = rngmod.stream(seed, "devices/flash/compute")
        if c.compute == "lognormal":
            return np.maximum(1e-4, rng.lognormal(c.lognormal_mu, c.tail_skew, num_clients)) * c.s_per_sample
        _, scores = benchmark_scores()
        phone = rng.integers(0, len(scores), num_clients)
        return c.s_per_sample * float(np.median(scores)) / scores[phone]

    def profiles(self, num_clients: int, seed: int) -> DeviceProfiles:
        down, up = self.bandwidths_kBps(num_clients, seed)
        kb = float(self.cfg.kilobyte_bytes)
        return DeviceProfiles(compute_s_per_sample=self.compute_s_per_sample(num_clients, seed),
                              down_bytes_per_s=down * kb, up_bytes_per_s=up * kb)
