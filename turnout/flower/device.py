"""turnout's client rule on one device: apply the model sync, local SGD, the compressor's encoding.

The device keeps two things between rounds (:class:`DeviceState`): its copy of the global model,
with the last round the copy includes, and the per-client rows a compressor keeps for it (error
feedback residuals) in a :class:`NodeStore`. Everything else comes with the
:class:`~turnout.flower.protocol.Instruction`. Training is :meth:`LocalTrainer.train
<turnout.training.local_sgd.LocalTrainer.train>` with the client's own
``(seed, "batches", round, client)`` stream, exactly as the simulator's sequential executor calls it,
and the upload is the compressor's own :meth:`encode_uploads` on this client's update — so a device
computes bit for bit what the simulated client computes.

Nothing here imports Flower: :mod:`turnout.flower.client` moves :class:`DeviceState` in and out of
Flower's ``Context.state`` and messages in and out of records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config.loader import ResolvedExperiment
from ..core import rng as rngmod
from ..core.records import Cohort
from ..models.flat import FlatModel
from ..training.local_sgd import LocalTrainer
from ..world.population import NEVER
from . import codec
from .protocol import Instruction, Report


class NodeStore:
    """The client-state store of one device: model-sized rows of its own client only, by slot name.

    It answers the calls a compressor makes on :class:`~turnout.world.state_store.ClientStateStore`
    (``get``/``put``/``has``) for this device's client; rows never written read as zeros.
    """

    def __init__(self, client: int, dim: int, rows: dict[str, np.ndarray] | None = None):
        self.client, self.dim = int(client), int(dim)
        self.rows = {k: np.asarray(v, dtype=np.float32).reshape(self.dim) for k, v in (rows or {}).items()}

    def _check(self, clients) -> np.ndarray:
        clients = np.asarray(clients, dtype=np.int64).reshape(-1)
        if np.any(clients != self.client):
            raise ValueError(f"device of client {self.client} asked for the state of clients {clients.tolist()}")
        return clients

    def has(self, name: str, clients) -> np.ndarray:
        return np.full(len(self._check(clients)), name in self.rows)

    def get(self, name: str, clients) -> torch.Tensor:
        k = len(self._check(clients))
        row = self.rows.get(name, np.zeros(self.dim, np.float32))
        return torch.from_numpy(np.tile(row, (k, 1)))

    def put(self, name: str, clients, values) -> None:
        k = len(self._check(clients))
        if k:
            vals = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
            self.rows[name] = vals.astype(np.float32, copy=False).reshape(k, self.dim)[-1].copy()


@dataclass
class DeviceState:
    """What a device keeps between rounds."""

    params: np.ndarray | None = None  # its copy of the global model (float32), None before the first sync
    through: int = NEVER  # the last round that copy includes
    rows: dict[str, np.ndarray] = field(default_factory=dict)  # NodeStore rows


class DeviceRule:
    """Runs one :class:`Instruction` on this device's training data."""

    def __init__(self, exp: ResolvedExperiment, input_shape, num_classes: int, input_scaling=None):
        comp = exp["model"]
        self.exp = exp
        module = comp.cls.build(comp.cfg, tuple(input_shape), int(num_classes))
        if input_scaling is not None:  # the dataset's uint8 inputs become floats in the forward, as in a simulation
            input_scaling.attach(module)
        self.model = FlatModel(module)
        self.dim = self.model.dim
        self.trainer = LocalTrainer(self.model, exp.train)

    def apply_sync(self, ins: Instruction, state: DeviceState) -> np.ndarray | None:
        """The global model after the instruction's sync, or None when the device's copy is not the assumed one."""
        have = NEVER if state.params is None else state.through
        if have != ins.base_round:
            return None
        mask, values = codec.decode_values(ins.sync_form, ins.sync, self.dim)
        params = np.zeros(self.dim, np.float32) if state.params is None else state.params.copy()
        params[mask] = values
        return params

    def run(self, ins: Instruction, state: DeviceState, x: np.ndarray, y: np.ndarray) -> tuple[Report, DeviceState]:
        """Train and encode; returns the report and the state to keep (a lost copy asks for a full resync)."""
        params = self.apply_sync(ins, state)
        if params is None:
            return Report(ins.round, ins.client, resync=True), DeviceState(None, NEVER, state.rows)
        kept = DeviceState(params, ins.round - 1, state.rows)
        started_at, t0 = time.time(), time.perf_counter()
        start = torch.from_numpy(ins.start if ins.start is not None else params.copy())
        res = self.trainer.train(start, ins.buffers, x, y, ins.steps, ins.lr,
                                 rngmod.stream(ins.seed, "batches", ins.round, ins.client), objective=ins.objective)
        report = Report(ins.round, ins.client, mean_loss=res.mean_loss, samples=res.samples, buffers=res.buffers,
                        started_at=started_at)
        if ins.send_end:  # the server derives the upload from where training ended
            report.form, report.upload = codec.encode_values(res.params.numpy(), np.ones(self.dim, bool))
            report.grad_sum = None if res.grad_sum is None else res.grad_sum.numpy()
        else:
            update = res.params - start  # a model delta: what every model_delta rule uploads
            store = NodeStore(ins.client, self.dim, state.rows)
            comp = self.exp["compressor"]
            compressor = comp.build(self.dim, ins.seed, store, layout=list(self.model.sizes))
            compressor.load_device_state(ins.compressor_state)
            me = np.array([ins.client], np.int64)
            compressor.begin_round(ins.round, Cohort(me, np.array([ins.weight]), normalize=False, target=1,
                                                     tags={k: np.array([v]) for k, v in ins.tags.items()}))
            decoded, up = compressor.encode_uploads(ins.round, me, update.reshape(1, -1))
            row = decoded[0].numpy()
            report.form, report.upload = codec.encode_values(row, row != 0)
            report.upload_bytes = int(up[0])
            kept.rows = store.rows
        report.train_s = time.perf_counter() - t0
        return report, kept


__all__ = ["DeviceRule", "DeviceState", "NodeStore"]
