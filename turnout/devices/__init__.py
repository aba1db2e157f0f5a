"""Devices seam: per-client compute speed and link bandwidths."""

from . import fedscale, flash, homogeneous, link_env  # noqa: F401  (registers components)
from .base import DEVICES, DeviceModel

__all__ = ["DEVICES", "DeviceModel"]
