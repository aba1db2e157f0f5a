"""A page's record: what the page was made from and its check slice, cut at the horizon measured at recording.

The record (``turnout/pages/records/NAME.json``, shipped in the wheel) holds the commit and the hash of the
resolved configs the page's tables came from, and the slice: the rounds asked for and the rounds kept, the
horizon under every emulated CPU family, and the numbers natively computed at the rounds kept. A record whose
slice runs past its own measured horizon is refused (:func:`validate`), so a check holds on any CPU by
construction, not by the recording machine's luck.
"""

from __future__ import annotations

import json
import platform
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...core.emulation import FAMILIES, family_environment, native_kernels
from ...core.errors import ConfigError
from .horizon import cut, markdown_table
from .run import run_slice, slice_numbers
from .spec import Page, names, pages_root


def records_root() -> Path:
    return pages_root() / "records"


def record_path(name: str) -> Path:
    return records_root() / f"{name}.json"


def read(name: str, path: Path | None = None) -> dict | None:
    """Page ``name``'s record (``None``: none yet)."""
    path = path or record_path(name)
    return json.loads(path.read_text()) if path.is_file() else None


def write(record: dict, path: Path) -> None:
    validate(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def validate(record: dict) -> None:
    """Refuse a record whose slice is longer than its measured horizon (or was never measured)."""
    sl = record["slice"]
    name = record.get("page", "?")
    if "horizons" not in sl:
        raise ConfigError(f"{name}.slice", "unmeasured", "the slice has no measured horizons; record it again "
                                                         f"with `turnout reproduce --record-slice {name}`")
    limit = sl["integer_horizon"] if sl["integers_only"] else sl["horizon"]
    if limit is not None and sl["rounds"] > limit:
        what = "its integers' horizon" if sl["integers_only"] else "its horizon"
        raise ConfigError(f"{name}.slice.rounds", sl["rounds"],
                          f"past {what} of {limit} rounds measured under {', '.join(FAMILIES)}: another CPU would "
                          f"not give the recorded numbers; keep at most {limit} rounds")


def measure_slice(page: Page, tuned: dict, rounds: int | None = None, jobs: int = 2) -> dict:
    """Run the check slice natively and under every emulated family, cut it at the horizon, and run it natively
    at the rounds kept: the record's ``slice``.

    ``rounds`` forces the slice's length (default: the page's ``slice.rounds``, cut at the horizon); a forced
    length past the horizon is refused, as a record that says so would be."""
    asked = max(page.slice.rounds, rounds or 0)
    kernels = native_kernels()
    envs = {"native": {}, **{f: family_environment(f, kernels) for f in FAMILIES}}
    with tempfile.TemporaryDirectory(prefix=f"turnout-horizon-{page.name}-") as tmp:
        def one(family: str) -> str:
            out = run_slice(page, tuned, asked, Path(tmp) / family, envs[family])
            return (out / "rounds.csv").read_text()

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            tables = dict(zip(envs, pool.map(one, envs)))
        c = cut(asked, tables)
        keep = c.rounds if rounds is None else rounds
        sl = {"setting": page.slice.setting, "variants": list(page.slice.variants), **c.as_record(),
              "rounds": keep, "measured_on": {"torch_cpu": kernels[0], "numpy_blas": kernels[1], "cpu": cpu_model()}}
        sl["asked_rounds"] = sl.pop("asked")
        if keep < 1:
            raise ConfigError(f"{page.name}.slice", sl["first_drift"],
                              "not even the slice's integers hold one round under another CPU: choose another "
                              "setting or variant for the slice")
        validate({"page": page.name, "slice": sl})
        sl["numbers"] = slice_numbers(run_slice(page, tuned, keep, Path(tmp) / "kept"))
    return sl


def horizon_table() -> str:
    """Every page's slice cut as a Markdown table (docs/determinism.md holds it; a test keeps it current)."""
    cuts = {n: r["slice"] for n in names() if (r := read(n)) and "horizons" in r["slice"]}
    return markdown_table(cuts, FAMILIES)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
