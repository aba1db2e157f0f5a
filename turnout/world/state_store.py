"""Per-client model-sized state with a RAM budget that spills to a memory-mapped file.

SCAFFOLD's control variates, MIFA/FedVARP memories, FedSUM-CR copies and error-feedback
residuals are one model-sized vector per client that has ever participated. GlueFL's authors
needed 50 GB for this; here rows live in RAM until ``budget_bytes`` is used, and further rows go
to a memory-mapped file (a sparse file: disk is only used for rows actually written). Never-seen
clients cost 4 bytes per slot name (their row index); reading them returns zeros.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from ..core.state import Stateful


class _Slot:
    """One named kind of state (e.g. "scaffold_c"): client → row, rows in RAM or on disk."""

    def __init__(self, num_clients: int):
        self.row = np.full(num_clients, -1, dtype=np.int64)  # ≥ 0: RAM row; ≤ −2: disk row −(r+2)


class ClientStateStore(Stateful):
    """Named float32 vectors of length ``dim`` per client, read and written in batches by client id.

    Its checkpoint (:meth:`state_dict`) carries every slot's row map, the RAM rows, and the spilled
    rows as read-only memory maps of a copy of the spill files (so a checkpoint of a store that
    spilled 50 GB never holds 50 GB in RAM); that copy stays valid until the next
    :meth:`state_dict` or :meth:`close`.
    """

    def __init__(self, dim: int, num_clients: int, budget_bytes: int, spill_dir: str | Path | None = None):
        self.dim, self.num_clients, self.budget_bytes = int(dim), int(num_clients), int(budget_bytes)
        self._spill_dir = Path(spill_dir) if spill_dir is not None else None
        self._own_dir: Path | None = None
        self._slots: dict[str, _Slot] = {}
        self._ram = np.zeros((0, self.dim), dtype=np.float32)
        self._ram_used = 0
        self._chunks: list[np.memmap] = []  # spill files of ``_chunk_rows`` rows each
        self._chunk_rows = max(1, (256 << 20) // max(1, self.dim * 4))
        self._paths: list[Path] = []
        self._snapshots: list[Path] = []  # copies of the spill files handed out by the last state_dict()
        self._disk_used = 0
        self.peak_ram_bytes = 0
        self.spilled_bytes = 0

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    def _slot(self, name: str) -> _Slot:
        if name not in self._slots:
            self._slots[name] = _Slot(self.num_clients)
        return self._slots[name]

    def has(self, name: str, clients: np.ndarray) -> np.ndarray:
        """Which of ``clients`` have a stored row under ``name``."""
        if name not in self._slots:
            return np.zeros(len(clients), dtype=bool)
        return self._slots[name].row[np.asarray(clients, dtype=np.int64)] != -1

    def get(self, name: str, clients: np.ndarray) -> torch.Tensor:
        """Rows for ``clients`` as a ``(k, dim)`` tensor (a copy); zeros where nothing was stored."""
        clients = np.asarray(clients, dtype=np.int64)
        out = np.zeros((len(clients), self.dim), dtype=np.float32)
        if name in self._slots:
            rows = self._slots[name].row[clients]
            ram = rows >= 0
            out[ram] = self._ram[rows[ram]]
            for i in np.flatnonzero(rows <= -2):
                out[i] = self._disk_row(-rows[i] - 2)
        return torch.from_numpy(out)

    def put(self, name: str, clients: np.ndarray, values: torch.Tensor | np.ndarray) -> None:
        """Store ``values[i]`` as client ``clients[i]``'s row under ``name`` (later duplicates win)."""
        clients = np.asarray(clients, dtype=np.int64)
        vals = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
        vals = vals.astype(np.float32, copy=False).reshape(len(clients), self.dim)
        slot = self._slot(name)
        for i, c in enumerate(clients.tolist()):
            r = slot.row[c]
            if r == -1:
                r = self._allocate()
                slot.row[c] = r
            if r >= 0:
                self._ram[r] = vals[i]
            else:
                self._disk_row(-r - 2)[:] = vals[i]

    def _disk_row(self, r: int) -> np.ndarray:
        return self._chunks[r // self._chunk_rows][r % self._chunk_rows]

    def _allocate(self) -> int:
        """A new row: in RAM while the budget allows, else in the spill file (encoded as −(r+2))."""
        if (self._ram_used + 1) * self.row_bytes <= self.budget_bytes:
            if self._ram_used == len(self._ram):
                cap = max(16, 2 * len(self._ram))
                cap = min(cap, max(1, self.budget_bytes // self.row_bytes))
                grown = np.zeros((cap, self.dim), dtype=np.float32)
                grown[: self._ram_used] = self._ram[: self._ram_used]
                self._ram = grown
            self._ram_used += 1
            self.peak_ram_bytes = max(self.peak_ram_bytes, self._ram.nbytes)
            return self._ram_used - 1
        return self._allocate_disk()

    def _allocate_disk(self) -> int:
        if self._disk_used == len(self._chunks) * self._chunk_rows:  # open the next spill chunk
            if self._spill_dir is None and self._own_dir is None:
                self._own_dir = Path(tempfile.mkdtemp(prefix="turnout-state-"))
            base = self._spill_dir or self._own_dir
            base.mkdir(parents=True, exist_ok=True)
            path = base / f"client_state-{len(self._chunks):04d}.f32"
            self._paths.append(path)
            self._chunks.append(np.memmap(path, dtype=np.float32, mode="w+", shape=(self._chunk_rows, self.dim)))
        self._disk_used += 1
        self.spilled_bytes = self._disk_used * self.row_bytes
        return -(self._disk_used - 1) - 2

    # ---- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        self._drop_snapshots()
        disk = []
        for i, chunk in enumerate(self._chunks):
            chunk.flush()
            copy = self._paths[i].with_name(self._paths[i].name + ".snapshot")
            shutil.copyfile(self._paths[i], copy)
            self._snapshots.append(copy)
            used = min(self._chunk_rows, self._disk_used - i * self._chunk_rows)
            disk.append(np.memmap(copy, dtype=np.float32, mode="r", shape=(self._chunk_rows, self.dim))[:used])
        return {"slots": {name: slot.row.copy() for name, slot in self._slots.items()},
                "ram": self._ram[: self._ram_used].copy(), "ram_capacity": int(len(self._ram)),
                "disk": disk, "peak_ram_bytes": int(self.peak_ram_bytes), "spilled_bytes": int(self.spilled_bytes)}

    def load_state_dict(self, state: dict) -> None:
        """Rebuild the store from a checkpoint (into this store's own RAM buffer and spill files)."""
        self.close()
        self._slots = {}
        for name, rows in state["slots"].items():
            slot = self._slot(name)
            slot.row[:] = np.asarray(rows, dtype=np.int64)
        ram = np.asarray(state["ram"], dtype=np.float32).reshape(-1, self.dim)
        self._ram = np.zeros((int(state["ram_capacity"]), self.dim), dtype=np.float32)
        self._ram[: len(ram)] = ram
        self._ram_used = len(ram)
        self._disk_used = 0
        for chunk in state["disk"]:
            for start in range(0, len(chunk), 4096):  # bounded memory: copy spilled rows in blocks
                block = np.asarray(chunk[start:start + 4096], dtype=np.float32)
                for row in block:
                    self._disk_row(-self._allocate_disk() - 2)[:] = row
        self.peak_ram_bytes = int(state["peak_ram_bytes"])
        self.spilled_bytes = int(state["spilled_bytes"])

    def _drop_snapshots(self) -> None:
        for path in self._snapshots:
            path.unlink(missing_ok=True)
        self._snapshots = []

    def stats(self) -> dict[str, int]:
        return {"state_peak_ram_bytes": int(self.peak_ram_bytes), "state_spilled_bytes": int(self.spilled_bytes),
                "state_rows": int(self._ram_used + self._disk_used)}

    def close(self) -> None:
        """Delete the spill files (and their folder when the store made it)."""
        self._drop_snapshots()
        self._chunks = []
        for path in self._paths:
            path.unlink(missing_ok=True)
        self._paths = []
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None
