"""The device-model interface: produce every client's speed profile at once."""

from __future__ import annotations

from abc import ABC, abstractmethod

from pydantic import BaseModel

from ..core.registry import Registry
from ..world.population import DeviceProfiles

DEVICES: Registry = Registry("devices", "compute speed and up/down bandwidth per client")


class DeviceModel(ABC):
    """Builds :class:`DeviceProfiles` (struct-of-arrays) for ``num_clients`` clients from a seed."""

    Config: type[BaseModel]

    def __init__(self, cfg: BaseModel):
        self.cfg = cfg

    @abstractmethod
    def profiles(self, num_clients: int, seed: int) -> DeviceProfiles:
        """Every client's compute cost per sample and bandwidths (bytes/s)."""
