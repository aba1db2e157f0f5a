"""Network environments of GlueFL §5.4 / Fig. 9(b, c): commercial 5G and Google Cloud links, FLASH compute.

GlueFL (MLSys 2023, §5.4) repeats Table 2 "on commercial 5G (Narayanan et al., 2021) and Google Cloud
(Mok et al., 2021)" and changes only the network: compute stays as in the edge-device setting. Here compute
is :class:`~turnout.devices.flash.FlashDevices`'s (same options, same random stream ``devices/flash/compute``,
so a seed gives every client the same compute speed as under ``devices: {name: flash}``), and the links
come from the environment named by ``env``. Bandwidths are static per client, drawn once from the run seed
(stream ``devices/link_env/network``). Units: Mb/s, 1 Mb = 10^6 bits, so bytes/s = Mb/s × 125,000.

``env: 5g`` — Narayanan et al., "A Variegated Look at 5G in the Wild: Performance, Power, and QoE
Implications", SIGCOMM 2021, §3 (Speedtest throughput per radio type, stationary). The medians used,
**download 1,000 Mb/s and upload 100 Mb/s**, are round values of the order of that section's mmWave
(Verizon NSA-mmWave) Speedtest medians, from our reading of the paper; they were not re-derived from
its released dataset. GlueFL's authors pooled every 5G radio type (mmWave and low-band) of that dataset.
Per-client spread: log-normal around the median, ``ln`` standard deviation ``spread`` (default 0.6:
10th-90th percentile 0.46×-2.2× the median), download and upload drawn independently.

``env: cloud`` — Mok et al., "Measuring the Network Performance of Google Cloud Platform", IMC 2021,
the throughput distributions of the premium (Google's private WAN) and standard (public Internet) tiers,
pooled, in 50 Mb/s bins as GlueFL's authors tabulated them for their cloud environment
(``TCtower/GlueFL``): bin counts 4, 10, 6, 6, 51, 62, 71, 30, 14, 4 for 0-50, ..., 450-500 Mb/s
(258 in all). Download: a bin in proportion to its count, then uniform within it — the **median
is 291.9 Mb/s** (the 129th of 258 falls 52/62 of the way into the 250-300 bin); upload: N(90, 7) Mb/s
(**median 90 Mb/s**), values ``<= 0`` redrawn. ``spread`` does not apply.

``bandwidth: median`` gives every client the environment's medians (no spread): a hand-checkable world.
``down_Mbps`` / ``up_Mbps`` override the 5G medians (e.g. to model low-band 5G).
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..config.limits import MAX_S_PER_SAMPLE
from ..core import rng as rngmod
from ..world.population import DeviceProfiles
from .base import DEVICES, DeviceModel
from .flash import FlashConfig, FlashDevices, positive_normal

#: bytes per second in one Mb/s (10^6 bits)
BYTES_PER_MBIT = 125_000.0
#: 5G medians (Mb/s), Narayanan et al. SIGCOMM 2021 §3: mmWave Speedtest, rounded
FIVE_G_DOWN_MBPS, FIVE_G_UP_MBPS = 1000.0, 100.0
#: Google Cloud download distribution: counts per 50 Mb/s bin (Mok et al. IMC 2021, premium + standard tier)
CLOUD_BIN_MBPS = 50.0
CLOUD_DOWN_COUNTS = np.array([4, 10, 6, 6, 51, 62, 71, 30, 14, 4], dtype=np.float64)
#: Google Cloud upload: N(mean, sigma) Mb/s
CLOUD_UP_MEAN_MBPS, CLOUD_UP_SIGMA_MBPS = 90.0, 7.0


def binned_median(counts: np.ndarray, width: float) -> float:
    """The value where the CDF of a histogram (uniform within each bin) reaches 1/2."""
    cum = np.cumsum(counts)
    half = cum[-1] / 2.0
    b = int(np.searchsorted(cum, half))
    before = cum[b - 1] if b else 0.0
    return float(width * (b + (half - before) / counts[b]))


class LinkEnvConfig(StrictModel):
    env: Literal["5g", "cloud"] = Field(..., description="network environment: 5g (commercial 5G, Narayanan et al. "
                                                         "2021) or cloud (Google Cloud, Mok et al. 2021)")
    bandwidth: Literal["drawn", "median"] = Field(
        "drawn", description="drawn: per-client spread around the environment's medians; median: every client gets "
                             "the medians")
    spread: float = Field(0.6, ge=0.0, le=5.0, description="5g: ln standard deviation of the per-client log-normal")
    down_Mbps: Optional[float] = Field(None, gt=0.0, le=1e6, description="5g: median download Mb/s (unset: 1,000)")
    up_Mbps: Optional[float] = Field(None, gt=0.0, le=1e6, description="5g: median upload Mb/s (unset: 100)")
    # compute, exactly as devices: {name: flash}
    compute: Literal["ai_benchmark", "lognormal"] = Field(
        "ai_benchmark", description="per-sample compute as the flash devices: AI-Benchmark score ratio or log-normal")
    s_per_sample: float = Field(0.005, gt=0.0, le=MAX_S_PER_SAMPLE,
                                description="seconds/sample of a median-score phone (as the flash devices)")
    tail_skew: float = Field(0.6, ge=0.0, le=10.0, description="sigma of FedScale's log-normal (lognormal)")
    lognormal_mu: float = Field(1.0, ge=-50.0, le=50.0, description="mu of FedScale's log-normal (lognormal)")

    @model_validator(mode="after")
    def _cloud_has_no_medians(self) -> "LinkEnvConfig":
        if self.env == "cloud" and (self.down_Mbps is not None or self.up_Mbps is not None):
            raise ValueError("down_Mbps / up_Mbps apply to env: 5g only; the cloud environment is a measured "
                             "distribution (remove them)")
        return self


@DEVICES.register("link_env")
class LinkEnvDevices(DeviceModel):
    """GlueFL §5.4's 5G or Google Cloud links per client; compute as the FLASH devices."""

    Config = LinkEnvConfig

    def medians_Mbps(self) -> tuple[float, float]:
        """(download, upload) medians of the environment in Mb/s."""
        c = self.cfg
        if c.env == "cloud":
            return binned_median(CLOUD_DOWN_COUNTS, CLOUD_BIN_MBPS), CLOUD_UP_MEAN_MBPS
        return (c.down_Mbps if c.down_Mbps is not None else FIVE_G_DOWN_MBPS,
                c.up_Mbps if c.up_Mbps is not None else FIVE_G_UP_MBPS)

    def bandwidths_Mbps(self, num_clients: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(down, up) in Mb/s per client."""
        c = self.cfg
        down_med, up_med = self.medians_Mbps()
        if c.bandwidth == "median":
            return np.full(num_clients, down_med), np.full(num_clients, up_med)
        rng = rngmod.stream(seed, "devices/link_env/network")
        if c.env == "5g":
            return (down_med * np.exp(c.spread * rng.standard_normal(num_clients)),
                    up_med * np.exp(c.spread * rng.standard_normal(num_clients)))
        p = CLOUD_DOWN_COUNTS / CLOUD_DOWN_COUNTS.sum()
        bins = rng.choice(len(p), size=num_clients, p=p)
        down = CLOUD_BIN_MBPS * (bins + rng.random(num_clients))
        down = np.maximum(down, 1e-3)  # the lowest bin starts at 0 Mb/s: keep a transfer finite
        up = positive_normal(rng, np.full(num_clients, CLOUD_UP_MEAN_MBPS), np.full(num_clients, CLOUD_UP_SIGMA_MBPS))
        return down, up

    def profiles(self, num_clients: int, seed: int) -> DeviceProfiles:
        c = self.cfg
        flash = FlashDevices(FlashConfig(compute=c.compute, s_per_sample=c.s_per_sample, tail_skew=c.tail_skew,
                                         lognormal_mu=c.lognormal_mu))
        down, up = self.bandwidths_Mbps(num_clients, seed)
        return DeviceProfiles(compute_s_per_sample=flash.compute_s_per_sample(num_clients, seed),
                              down_bytes_per_s=down * BYTES_PER_MBIT, up_bytes_per_s=up * BYTES_PER_MBIT)
