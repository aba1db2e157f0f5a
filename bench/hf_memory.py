"""Peak memory of loading a large Hugging Face-style dataset: 1,000,000 28×28 uint8 images by writer.

Writes the images (random pixels, 10 classes, 3,500 writers as in FEMNIST) as a folder of parquet
files and as an Arrow stream file (the format of ``save_to_disk``), then loads each through
``data: {name: huggingface, partition: natural}`` in a fresh process and reports its peak resident
memory (VmHWM) against the images' uint8 size (784 MB), both as the whole process and above
what the process held before loading (Python, torch, pyarrow and datasets imported).

    python bench/hf_memory.py [--rows 1000000] [--dir /tmp/hf_memory]

Needs ``turnout[huggingface]`` and about 1.6 GB of disk. On the 2-core development machine
(2026-11-26), 1,000,000 rows, 3,500 writers (748 MiB of uint8 images):

  parquet loaded in 17.7 s: peak RSS 1,318 MiB = 1.76x the uint8 size; 977 MiB above the 342 MiB held before = 1.31x
  arrow   loaded in  6.2 s: peak RSS 1,219 MiB = 1.63x the uint8 size; 877 MiB above the 342 MiB held before = 1.17x

The 342 MiB are the interpreter with torch, pyarrow and datasets imported, before any data is read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIDE = 28
WRITERS = 3500
CHUNK = 50_000


def write(folder: Path, rows: int, fmt: str) -> None:
    """``rows`` images in chunks (never all in memory): parquet files, or one Arrow stream file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    schema = pa.schema([("pixels", pa.list_(pa.uint8(), SIDE * SIDE)), ("label", pa.int64()),
                        ("writer_id", pa.string())])
    sink = None
    for start in range(0, rows, CHUNK):
        n = min(CHUNK, rows - start)
        px = rng.integers(0, 256, (n, SIDE * SIDE), dtype=np.uint8)
        table = pa.table({
            "pixels": pa.FixedSizeListArray.from_arrays(pa.array(px.ravel()), SIDE * SIDE),
            "label": pa.array(rng.integers(0, 10, n)),
            "writer_id": pa.array([f"f{w:04d}" for w in rng.integers(0, WRITERS, n)])}, schema=schema)
        if fmt == "parquet":
            pq.write_table(table, folder / f"train-{start // CHUNK:05d}.parquet", compression="none")
        else:
            if sink is None:
                sink = pa.ipc.new_stream(str(folder / "train-00000.arrow"), schema)
            sink.write_table(table, max_chunksize=1000)
    if sink is not None:
        sink.close()


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS: resident now, VmHWM: the peak of this process image)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def load(folder: Path) -> dict:
    """Load through turnout in this process; resident memory before and at the peak, in bytes.

    VmHWM, not ``ru_maxrss``: Linux carries ``ru_maxrss`` across ``exec``, so a child would report
    its parent's peak when that was higher.
    """
    import datasets  # noqa: F401  (imported before the baseline is read: it is part of any such run)

    from turnout.config.components import validate_component
    from turnout.data.registry import DATASETS

    before = _status("VmRSS")
    cls, cfg = validate_component(DATASETS, {
        "name": "huggingface", "path": str(folder), "input": "pixels", "input_shape": [1, SIDE, SIDE],
        "client_id": "writer_id", "test_fraction": 0.1}, "data")
    t0 = time.perf_counter()
    d = cls.build(cfg, 0)
    seconds = time.perf_counter() - t0
    peak = _status("VmHWM")
    held = d.x_train.nbytes + d.x_test.nbytes + d.x_server_test.nbytes
    return {"rows": int(len(d.x_train) + len(d.x_test) + len(d.x_server_test)), "clients": d.num_clients,
            "dtype": str(d.x_train.dtype), "held_bytes": held, "before": before, "peak": peak, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/hf_memory"))
    ap.add_argument("--formats", nargs="+", default=["parquet", "arrow"])
    ap.add_argument("--load", type=Path, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.load is not None:
        print(json.dumps(load(args.load)))
        return
    size = args.rows * SIDE * SIDE
    for fmt in args.formats:
        folder = args.dir / f"{fmt}-{args.rows}"
        if not folder.exists():
            t0 = time.perf_counter()
            write(folder, args.rows, fmt)
            print(f"wrote {folder} in {time.perf_counter() - t0:.0f} s")
        out = subprocess.run([sys.executable, __file__, "--load", str(folder)], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        mib = 2**20
        print(f"{fmt:8s} {r['rows']:,} rows, {r['clients']} clients, {r['dtype']}, loaded in {r['seconds']:.1f} s: "
              f"peak RSS {r['peak'] / mib:,.0f} MiB = {r['peak'] / size:.2f}x the uint8 size ({size / mib:,.0f} MiB); "
              f"{(r['peak'] - r['before']) / mib:,.0f} MiB above the {r['before'] / mib:,.0f} MiB held before "
              f"loading = {(r['peak'] - r['before']) / size:.2f}x")


if __name__ == "__main__":
    main()
