"""Identical devices: the simple default, already giving real seconds and bytes.

Defaults are the medians of FLASH's measured phone speeds (``turnout/devices/data/flash/speed_distri.json``:
download 4,318 KB/s, upload 3,286 KB/s) and FedScale's mean compute cost of 5 ms per sample.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_KBPS, MAX_S_PER_SAMPLE, MIN_KBPS
from ..world.population import DeviceProfiles
from .base import DEVICES, DeviceModel


class HomogeneousConfig(StrictModel):
    compute_s_per_sample: float = Field(0.005, ge=0.0, le=MAX_S_PER_SAMPLE,
                                        description="seconds of local training per sample (at most 3,600)")
    down_kBps: float = Field(4318.0, ge=MIN_KBPS, le=MAX_KBPS,
                             description="download bandwidth, kilobytes (1000 B) per second (1e-3 to 1e9)")
    up_kBps: float = Field(3286.0, ge=MIN_KBPS, le=MAX_KBPS,
                           description="upload bandwidth, kilobytes (1000 B) per second (1e-3 to 1e9)")


@DEVICES.register("homogeneous")
class HomogeneousDevices(DeviceModel):
    """Every client has the same compute speed and bandwidth (FLASH medians by default)."""

    Config = HomogeneousConfig

    def profiles(self, num_clients: int, seed: int) -> DeviceProfiles:
        c = self.cfg
        return DeviceProfiles(
            compute_s_per_sample=np.full(num_clients, c.compute_s_per_sample),
            down_bytes_per_s=np.full(num_clients, c.down_kBps * 1000.0),
            up_bytes_per_s=np.full(num_clients, c.up_kBps * 1000.0),
        )
