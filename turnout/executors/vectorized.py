"""Train a cohort's clients together: one ``vmap``-ed SGD step over their stacked parameters.

For small models most of a client's step is Python and dispatch overhead, so stacking ``k``
clients into one batched kernel per step is several times faster than a loop on a CPU; on a GPU
it is how the device (``runtime.device``) gets enough work. Clients are trained in chunks whose size a memory budget
sets (parameter-sized tensors per client, its padded minibatches, the activations of a step).

The algorithm's hooks run here, in client order, as the sequential executor runs them: every
client's ``client_start`` and ``local_objective`` first, then training, then every
``client_update`` — the hooks read state that training does not change, so this order gives the
same reports. Under the default rule (every client starts from the global model and reports end − start)
the reports are made by one subtraction per chunk instead of a hook call per client, bitwise the same.
Minibatch indices come from the same (seed, "batches", round, client) streams.
Results equal the sequential executor's up to float32 reassociation in batched kernels.

Not supported (refused at validation): BatchNorm models (a padded short batch would enter the
batch statistics, and the running statistics are per-client state), and model options that
select a layer without a ``vmap`` batching rule (``char_lstm``'s fused ``nn.LSTM``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field

from ..algorithms.base import Algorithm
from ..config.base import StrictModel
from ..config.limits import MAX_STATE_MB
from ..core import rng as rngmod
from ..core.errors import ConfigError
from ..data.federated import FederatedDataset
from ..models.flat import FlatModel
from ..training.local_sgd import LocalTrainer, batch_indices
from ..training.resident import free_bytes
from ..training.stacked_sgd import StackedObjective, StackedTrainer, padded_rows
from .base import EXECUTORS, ClientBatch, CohortResult, Executor

#: parameter-sized float tensors a client holds during a step (params, new params, gradients,
#: velocity, proximal anchor, offset, gradient sum, temporaries of the update)
PARAM_COPIES = 10
#: activation bytes kept per sample and float of forward output (saved for backward, their gradients)
ACTIVATION_COPIES = 3


class VectorizedConfig(StrictModel):
    memory_mb: float = Field(512.0, gt=0.0, le=MAX_STATE_MB,
                             description="memory budget of one chunk of clients trained together "
                                         "(parameters, minibatches, activations) on the CPU")
    compile: bool = Field(False, description="torch.compile the vmapped step (compiled once per chunk shape, "
                                             "10-25 s; on an H100, cnn_fedavg W100 rounds went from 0.20 to 0.17 s: "
                                             "docs/gpu.md)")
    device_share: float = Field(0.5, gt=0.0, le=0.9,
                                description="on a GPU, the share of the device's free memory (measured at the first "
                                            "round) one chunk of clients may use; memory_mb is the CPU's budget")
    # The device is ``runtime.device`` (the trainer's): one setting says where local training runs,
    # whichever executor runs it.


@EXECUTORS.register("vectorized")
class VectorizedExecutor(Executor):
    """Trains the cohort's clients together with torch.func.vmap, in chunks sized by a memory budget."""

    matches_sequential = False  # within float tolerance of sequential, not bitwise

    Config = VectorizedConfig
    trains_running_stats = False
    needs_vmap = True
    reports_on_device = True

    def __init__(self, cfg: VectorizedConfig):
        super().__init__(cfg)
        self._stacked: tuple[LocalTrainer, StackedTrainer] | None = None
        self._activations: tuple[FlatModel, int] | None = None
        self._largest_chunk = 0
        self._gpu_budget: float | None = None  # bytes a chunk may use on the GPU, measured once

    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        model = trainer.model
        if model.buffer_names:
            raise ConfigError("executor.name", "vectorized", "cannot keep the model's per-client BatchNorm running "
                                                             "statistics exactly; use sequential or parallel")
        clients, k, dim, dtype = batch.clients.tolist(), len(batch.clients), model.dim, batch.global_params.dtype
        if k == 0:
            return CohortResult(torch.empty((0, dim), dtype=dtype), np.zeros(0), np.zeros(0, np.int64), [])
        starts = [algorithm.client_start(c, batch.global_params) for c in clients]
        objectives = [algorithm.local_objective(c, s) for c, s in zip(clients, starts)]
        bsz = trainer.cfg.batch_size
        sizes = data.n_train[batch.clients].tolist()
        batches = [list(batch_indices(n, bsz, steps, rngmod.stream(batch.seed, "batches", batch.stream_round, c)))
                   for c, n, steps in zip(clients, sizes, batch.steps.tolist())]
        out = batch.report_device or torch.device("cpu")  # where the reports are left
        # The default client rule (end − start, every client starting from the global model) is one subtraction
        # per chunk, written straight into the reports: no hook call, model-sized temporary and copy per client
        # (the same numbers: an element-wise difference does not depend on how many rows it covers).
        plain = type(algorithm).client_update is Algorithm.client_update and \
            all(s is batch.global_params for s in starts)
        updates = torch.empty((k, dim), dtype=dtype, device=out)
        ends = None if plain else torch.empty((k, dim), dtype=dtype, device=out)
        grad_sums = [None] * k
        losses, samples = np.zeros(k), np.zeros(k, dtype=np.int64)
        stacked = self._trainer(trainer)
        device = trainer.device
        buffers = {n: b.to(device) for n, b in batch.buffers.items()}
        first_row = np.asarray(data.train_offsets[batch.clients], dtype=np.int64)
        # On a GPU the pooled rows live there (put once per simulation): a chunk's minibatches are gathered
        # on the device from one copy of their row numbers. Clients starting from the global model share one
        # copy of it (on any device: the trainer copies its start points once, into the parameters it trains).
        resident = trainer.resident(data.x_train, data.y_train)
        global_on_device = batch.global_params.to(device)
        if device.type != "cpu":
            starts_on_device = [global_on_device if s is batch.global_params else s.to(device) for s in starts]
        size = self.chunk_size(model, data, max((len(b) for b in batches), default=0), bsz, device)
        if device.type != "cpu":
            self._largest_chunk = max(self._largest_chunk, min(size, k))
        for a in range(0, k, size):
            rows = slice(a, min(k, a + size))
            if all(s is batch.global_params for s in starts[rows]):
                chunk_starts = global_on_device.reshape(1, -1).to(dtype).expand(rows.stop - rows.start, -1)
            else:
                chunk_starts = torch.stack([s.reshape(-1).to(dtype) for s in
                                            (starts if device.type == "cpu" else starts_on_device)[rows]])
            idx, counts = padded_rows(batches[rows], first_row[rows], bsz)
            if resident is not None:
                at = torch.from_numpy(idx).to(device)
                xs, ys = resident.inputs(resident.x[at]), resident.y[at]
            else:
                xs = torch.from_numpy(np.ascontiguousarray(data.x_train[idx])).to(device)
                ys = torch.from_numpy(np.ascontiguousarray(data.y_train[idx])).to(device)
            obj = StackedObjective.stack(objectives[rows], dim, dtype, device)
            res = stacked.train(chunk_starts, buffers, xs, ys, torch.from_numpy(counts).to(device), batch.lr, obj)
            if plain:
                torch.sub(res.params.to(out), batch.global_params.to(out), out=updates[rows])
            else:
                ends[rows] = res.params.to(out)
            losses[rows], samples[rows] = res.mean_loss, res.samples
            if res.grad_sum is not None:
                frozen = obj.freeze.cpu().tolist()
                gs = res.grad_sum.to(out)
                for i, row in enumerate(range(rows.start, rows.stop)):
                    grad_sums[row] = gs[i] if frozen[i] else None
        if plain:
            return CohortResult(updates=updates, losses=losses, samples=samples, buffers=[{} for _ in clients])
        if out.type != "cpu":  # the hooks see the start points where the end points are (out is the training device)
            starts = starts_on_device
        for row, c in enumerate(clients):
            update = algorithm.client_update(c, starts[row], ends[row], grad_sum=grad_sums[row])
            # A report of the wrong shape is kept as NaN so the engine rejects it before aggregation.
            updates[row] = update.reshape(-1) if update.numel() == dim else float("nan")
        return CohortResult(updates=updates, losses=losses, samples=samples, buffers=[{} for _ in clients])

    def chunk_size(self, model: FlatModel, data: FederatedDataset, steps: int, batch_size: int,
                   device: torch.device | None = None) -> int:
        """Clients per chunk: how many fit the budget (at least one).

        The budget is ``memory_mb`` on the CPU; on a GPU it is ``device_share`` of the memory the device has
        free at the first round (after the resident data), kept for the run: chunk shapes then stay the same
        from round to round, so cuDNN's timed algorithm choices and a compiled step are reused, not redone.
        """
        item = np.dtype(data.x_train.dtype).itemsize * math.prod(data.input_shape)
        on_gpu = device is not None and device.type != "cpu"
        widened = 4 * math.prod(data.input_shape) if on_gpu else 0  # float16-stored rows, widened per chunk
        per_client = (PARAM_COPIES * model.dim * 4
                      + steps * batch_size * (item + widened + 8 + 8)
                      + ACTIVATION_COPIES * batch_size * 4 * self._activation_floats(model, data))
        budget = self.cfg.memory_mb * 2**20
        free = free_bytes(device) if on_gpu else None
        if free is not None:
            if self._gpu_budget is None:
                self._gpu_budget = self.cfg.device_share * (free + torch.cuda.memory_reserved(device)
                                                            - torch.cuda.memory_allocated(device))
            budget = self._gpu_budget
        return max(1, int(budget // per_client))

    def summary(self) -> dict:
        """The most clients trained together in one chunk (what the memory budget allowed)."""
        return {"vectorized_chunk_clients": self._largest_chunk} if self._largest_chunk else {}

    def _trainer(self, trainer: LocalTrainer) -> StackedTrainer:
        if self._stacked is None or self._stacked[0] is not trainer:
            self._stacked = (trainer, StackedTrainer(trainer.model, trainer.cfg, compile=self.cfg.compile))
        return self._stacked[1]

    def _activation_floats(self, model: FlatModel, data: FederatedDataset) -> int:
        """Floats every leaf module outputs for one sample (measured once on a zero input)."""
        if self._activations is None or self._activations[0] is not model:
            total = 0

            def count(_module, _inputs, output):
                nonlocal total
                total += sum(t.numel() for t in (output if isinstance(output, tuple) else (output,))
                             if isinstance(t, torch.Tensor))

            leaves = [m for m in model.module.modules() if not list(m.children())]
            hooks = [m.register_forward_hook(count) for m in leaves]
            try:
                with torch.no_grad():
                    x = torch.zeros((1, *data.input_shape), dtype=torch.from_numpy(data.x_train[:0]).dtype)
                    model.module(x)
            finally:
                for h in hooks:
                    h.remove()
            self._activations = (model, total)
        return self._activations[1]
