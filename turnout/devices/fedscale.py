"""FedScale's device-capacity profiles, read from turnout's CSV form of the capacity schema.

FedScale's ``client_device_capacity`` is a pickled dict ``{key: {'computation': ms/sample,
'communication': kbps}}`` (GlueFL's ``_ul_dl`` variants add ``'dl_kbps'`` and ``'ul_kbps'``).
turnout never unpickles at run time: ``turnout trace import FILE --kind capacity --out FILE.csv``
converts it once into a CSV with the columns

    client,computation_ms_per_sample,communication_kbps[,dl_kbps,ul_kbps]

one row per profile, in the pickle's key order. This module reads that CSV
(:func:`read_capacity_csv`), writes it (:func:`write_capacity_csv`), and registers the
``fedscale_capacity`` device model, which follows FedScale's simulator:

* client ``i`` (0-based) gets profile ``(i + 1) % n_profiles`` (FedScale/GlueFL number clients
  from 1 and look up ``client_device_capacity[(client_id + 1) % len]``);
* compute: ``aug × computation_ms_per_sample / 1000`` seconds per training sample — FedScale's
  ``get_completion_time`` multiplies the inference latency by ``augmentation_factor = 3.0``
  (backward ≈ 2 × forward); GlueFL uses 0.4;
* bandwidth: FedScale divides a size in kbit (``bytes × 8 / 1024``) by the bandwidth, so one
  kbit is 1,024 bits and ``bytes/s = kbps × 1024 / 8 = kbps × 128`` (``kilobit_bits: 1024``,
  the default; ``1000`` gives the SI reading ``kbps × 125``);
* links: ``dl_kbps`` / ``ul_kbps`` when the file has them (GlueFL), else ``communication_kbps``
  for both directions (FedScale charges ``(up + down) / communication``, i.e. the same rate).

Any missing, non-numeric, non-finite or non-positive bandwidth is an error naming the file,
column and row — never a silent fallback (FedScale substitutes ``{1.0, 1.0}`` for a missing key).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from ..config.base import StrictModel
from ..config.limits import MAX_SCALE
from ..core.errors import DataError
from ..core.files import replaced_atomically
from ..traces.fedscale import CapacityTable
from ..world.population import DeviceProfiles
from .base import DEVICES, DeviceModel

REQUIRED_COLUMNS = ("client", "computation_ms_per_sample", "communication_kbps")
LINK_COLUMNS = ("dl_kbps", "ul_kbps")
FIX = ("write it with `turnout trace import FILE --kind capacity --out FILE.csv` or "
       "turnout.devices.fedscale.write_capacity_csv")


def _err(path, msg: str) -> DataError:
    return DataError(f"capacity file {str(path)!r} {msg}")


def read_capacity_csv(path: str | os.PathLike) -> CapacityTable:
    """Read and validate a capacity CSV; every problem is a one-line :class:`DataError`."""
    p = Path(path)
    try:
        f = open(p, newline="", encoding="utf-8")
    except FileNotFoundError:
        raise _err(p, f"not found; {FIX}") from None
    except OSError as exc:
        raise _err(p, f"cannot be read ({exc.strerror or exc})") from None
    with f:
        try:
            head = f.read(2)
        except UnicodeDecodeError:
            raise _err(p, f"is not a UTF-8 CSV (a FedScale pickle? {FIX})") from None
        if head[:1] == "\x80":
            raise _err(p, f"is a Python pickle; convert it once: {FIX}")
        f.seek(0)
        try:
            rows = list(csv.reader(f))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise _err(p, f"is not a readable CSV ({exc}); {FIX}") from None
    if not rows:
        raise _err(p, f"is empty; expected a header {','.join(REQUIRED_COLUMNS)}[,dl_kbps,ul_kbps]")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise _err(p, f"lacks column(s) {', '.join(missing)}; expected header "
                      f"{','.join(REQUIRED_COLUMNS)}[,dl_kbps,ul_kbps] (got {','.join(header)[:60]})")
    links = [c for c in LINK_COLUMNS if c in header]
    if len(links) == 1:
        raise _err(p, f"has {links[0]} without {({'dl_kbps': 'ul_kbps', 'ul_kbps': 'dl_kbps'})[links[0]]}; "
                      "give both per-direction columns or neither")
    body = rows[1:]
    if not body:
        raise _err(p, "has a header but no profiles")
    cols = {}
    for name in REQUIRED_COLUMNS + tuple(links):
        j = header.index(name)
        try:
            vals = np.array([r[j] for r in body], dtype=np.float64)
        except (ValueError, IndexError):  # find the offending row for the message
            for i, r in enumerate(body):
                try:
                    float(r[j])
                except (ValueError, IndexError):
                    cell = r[j] if j < len(r) else ""
                    raise _err(p, f"row {i + 2} column {name}: {cell!r} is not a number") from None
            raise
        cols[name] = vals
    client = cols["client"]
    if not np.all(client == np.round(client)):
        i = int(np.argmax(client != np.round(client)))
        raise _err(p, f"row {i + 2} column client: {float(client[i])!r} is not an integer key")
    comp = cols["computation_ms_per_sample"]
    bad = ~np.isfinite(comp) | (comp < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise _err(p, f"row {i + 2} column computation_ms_per_sample: {float(comp[i])!r} must be a finite value >= 0")
    for name in ("communication_kbps",) + tuple(links):
        v = cols[name]
        bad = ~np.isfinite(v) | (v <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise _err(p, f"row {i + 2} column {name}: {float(v[i])!r} kbps; every bandwidth must be a finite "
                          "value > 0 (drop or fix that profile)")
    return CapacityTable(client.astype(np.int64), comp, cols["communication_kbps"],
                         cols.get("dl_kbps"), cols.get("ul_kbps"))


def write_capacity_csv(path: str | os.PathLike, profiles: CapacityTable | DeviceProfiles,
                       aug: float = 3.0, kilobit_bits: int = 1024) -> Path:
    """Write capacity profiles (a :class:`CapacityTable`, or :class:`DeviceProfiles` converted back
    with ``aug`` and ``kilobit_bits``) as CSV, exactly round-trippable (17 significant digits)."""
    t = profiles if isinstance(profiles, CapacityTable) else CapacityTable.from_profiles(profiles, aug, kilobit_bits)
    cols = [t.client.astype(np.int64), t.computation_ms_per_sample, t.communication_kbps]
    names = list(REQUIRED_COLUMNS)
    if t.has_links:
        cols += [t.dl_kbps, t.ul_kbps]
        names += list(LINK_COLUMNS)
    for name, c in zip(names[2:], cols[2:]):
        if not (np.all(np.isfinite(c)) and np.all(c > 0)):
            raise DataError(f"capacity profiles column {name} has non-positive or non-finite bandwidths; "
                            "every bandwidth must be > 0")
    p = Path(path)
    with replaced_atomically(p, "w", newline="", encoding="utf-8") as f:
        f.write(",".join(names) + "\n")
        floats = np.column_stack(cols[1:]) if len(cols) > 1 else np.zeros((len(cols[0]), 0))
        for key, row in zip(cols[0].tolist(), floats.tolist()):
            f.write(str(key) + "," + ",".join(repr(float(x)) for x in row) + "\n")
    return p


class FedScaleCapacityConfig(StrictModel):
    path: str = Field(...,
                      description="capacity CSV: client,computation_ms_per_sample,communication_kbps[,dl_kbps,ul_kbps]")
    aug: float = Field(3.0, gt=0.0, le=MAX_SCALE,
                       description="compute multiplier on inference latency (FedScale 3.0, GlueFL 0.4)")
    kilobit_bits: Literal[1000, 1024] = Field(1024, description="bits per kbit (FedScale's sizes use 1024)")

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str) -> str:
        if not Path(v).is_file():
            raise ValueError(f"file not found; give a capacity CSV ({FIX})")
        return v


@DEVICES.register("fedscale_capacity")
class FedScaleCapacity(DeviceModel):
    """FedScale capacity profiles from a CSV; client i gets profile (i+1) % n, as in FedScale."""

    Config = FedScaleCapacityConfig

    def table(self) -> CapacityTable:
        return read_capacity_csv(self.cfg.path)

    @staticmethod
    def mapping(num_clients: int, num_profiles: int) -> np.ndarray:
        """Profile row of each client: ``(i + 1) % num_profiles`` (FedScale/GlueFL)."""
        return (np.arange(num_clients, dtype=np.int64) + 1) % num_profiles

    def profiles(self, num_clients: int, seed: int) -> DeviceProfiles:
        t = self.table()
        rows = self.mapping(num_clients, len(t))
        bytes_per_kbit = self.cfg.kilobit_bits / 8.0
        down = (t.dl_kbps if t.has_links else t.communication_kbps)[rows] * bytes_per_kbit
        up = (t.ul_kbps if t.has_links else t.communication_kbps)[rows] * bytes_per_kbit
        return DeviceProfiles(compute_s_per_sample=self.cfg.aug * t.computation_ms_per_sample[rows] / 1000.0,
                              down_bytes_per_s=down, up_bytes_per_s=up)

