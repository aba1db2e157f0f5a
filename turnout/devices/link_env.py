"""Network environments of GlueFL §5.4 / Fig. 9(b, c): commercial 5G and cloud links, FLASH compute.

GlueFL (MLSys 2023, §5.4) repeats Table 2 "on commercial 5G (Narayanan et al., 2021) and Google Cloud
(Mok et al., 2021)" and changes only the network: compute stays as in the edge-device setting. Here compute
is :class:`~turnout.devices.flash.FlashDevices`'s (same options, same random stream ``devices/flash/compute``,
so a seed gives every client the same compute speed as under ``devices: {name: flash}``), and the links
come from the environment named by ``env``. Units: Mb/s, 1 Mb = 10^6 bits, so bytes/s = Mb/s × 125,000.

**The bandwidths are turnout's stated assumptions, not measurements.** The paper gives no bandwidth for
either environment, and the per-client profiles its authors ran (``client_device_capacity_ul_dl_5G`` and
``..._GCP`` in ``TCtower/GlueFL``) are listed in that repository but absent from its public snapshot. So each
environment is a log-normal per client around a median, drawn once from the run seed (stream
``devices/link_env/network``), download and upload independently, with these defaults:

- ``env: 5g``: download **1,000 Mb/s**, upload **100 Mb/s**, ``ln`` spread 0.6 (10th-90th percentile
  0.46×-2.2× the median): a mmWave-class link, the fast end of commercial 5G. Low-band 5G is several times
  slower; set ``down_Mbps`` / ``up_Mbps`` for it.
- ``env: cloud``: **1,000 Mb/s** both ways, ``ln`` spread 0.2: clients as virtual machines in one cloud
  region, symmetric links of the order of a gigabit ("intra-datacenter networks", GlueFL §5.4).

``down_Mbps`` / ``up_Mbps`` / ``spread`` override an environment's values; ``bandwidth: median`` gives every
client the medians (no spread): a hand-checkable world. At these values a model of a few MB moves in
tens of milliseconds against seconds of compute, the regime the paper describes; docs/algorithms/world.md
says how far the medians can fall before that changes.
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_S_PER_SAMPLE
from ..core import rng as rngmod
from ..world.population import DeviceProfiles
from .base import DEVICES, DeviceModel
from .flash import FlashConfig, FlashDevices

#: bytes per second in one Mb/s (10^6 bits)
BYTES_PER_MBIT = 125_000.0
#: (download median Mb/s, upload median Mb/s, ln spread) per environment: turnout's assumptions (module docstring)
ENVIRONMENTS: dict[str, tuple[float, float, float]] = {
    "5g": (1000.0, 100.0, 0.6),
    "cloud": (1000.0, 1000.0, 0.2),
}


class LinkEnvConfig(StrictModel):
    env: Literal["5g", "cloud"] = Field(..., description="network environment: 5g (mmWave-class commercial 5G) or "
                                                         "cloud (symmetric gigabit links in one region)")
    bandwidth: Literal["drawn", "median"] = Field(
        "drawn", description="drawn: per-client log-normal spread around the medians; median: every client gets "
                             "the medians")
    spread: Optional[float] = Field(None, ge=0.0, le=5.0, description="ln standard deviation of the per-client "
                                                                      "log-normal (unset: 0.6 for 5g, 0.2 for cloud)")
    down_Mbps: Optional[float] = Field(None, gt=0.0, le=1e6, description="median download Mb/s (unset: 1,000)")
    up_Mbps: Optional[float] = Field(None, gt=0.0, le=1e6,
                                     description="median upload Mb/s (unset: 100 for 5g, 1,000 for cloud)")
    # compute, exactly as devices: {name: flash}
    compute: Literal["ai_benchmark", "lognormal"] = Field(
        "ai_benchmark", description="per-sample compute as the flash devices: AI-Benchmark score ratio or log-normal")
    s_per_sample: float = Field(0.005, gt=0.0, le=MAX_S_PER_SAMPLE,
                                description="seconds/sample of a median-score phone (as the flash devices)")
    tail_skew: float = Field(0.6, ge=0.0, le=10.0, description="sigma of FedScale's log-normal (lognormal)")
    lognormal_mu: float = Field(1.0, ge=-50.0, le=50.0, description="mu of FedScale's log-normal (lognormal)")


@DEVICES.register("link_env")
class LinkEnvDevices(DeviceModel):
    """GlueFL §5.4's 5G or cloud links per client; compute as the FLASH devices."""

    Config = LinkEnvConfig

    def medians_Mbps(self) -> tuple[float, float]:
        """(download, upload) medians of the environment in Mb/s, overrides applied."""
        c = self.cfg
        down, up, _ = ENVIRONMENTS[c.env]
        return (c.down_Mbps if c.down_Mbps is not None else down, c.up_Mbps if c.up_Mbps is not None else up)

    def bandwidths_Mbps(self, num_clients: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(down, up) in Mb/s per client."""
        c = self.cfg
        down_med, up_med = self.medians_Mbps()
        if c.bandwidth == "median":
            return np.full(num_clients, down_med), np.full(num_clients, up_med)
        spread = c.spread if c.spread is not None else ENVIRONMENTS[c.env][2]
        rng = rngmod.stream(seed, "devices/link_env/network")
        return (down_med * np.exp(spread * rng.standard_normal(num_clients)),
                up_med * np.exp(spread * rng.standard_normal(num_clients)))

    def profiles(self, num_clients: int, seed: int) -> DeviceProfiles:
        c = self.cfg
        flash = FlashDevices(FlashConfig(compute=c.compute, s_per_sample=c.s_per_sample, tail_skew=c.tail_skew,
                                         lognormal_mu=c.lognormal_mu))
        down, up = self.bandwidths_Mbps(num_clients, seed)
        return DeviceProfiles(compute_s_per_sample=flash.compute_s_per_sample(num_clients, seed),
                              down_bytes_per_s=down * BYTES_PER_MBIT, up_bytes_per_s=up * BYTES_PER_MBIT)
