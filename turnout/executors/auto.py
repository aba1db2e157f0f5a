"""Pick the fastest executor for the model, the device, the cohort and the cores, by a fixed rule.

The rule, applied to every round (the cohort size can change), first match wins:

1. one client in the round → ``sequential`` (nothing to batch or spread);
2. ``runtime.device`` is a CUDA device and the model can be batched with ``vmap`` (no BatchNorm running statistics,
   no fused ``nn.LSTM``) → ``vectorized``: a GPU needs many clients' work per kernel;
3. a dense model (only linear and activation layers) with at most :data:`SMALL_DENSE_PARAMS`
   parameters → ``vectorized``: its step is mostly Python overhead, which batching removes;
4. on the CPU, at least two cores (``workers``, default the available cores) → ``parallel``: one client already
   saturates a core with larger or convolutional models, so using every core pays;
5. otherwise ``sequential`` (on a GPU: a model ``vmap`` cannot batch trains one client at a time).

The threshold of rule 3 is measured on the project's 2-core AMD EPYC (10 steps of batch 32,
one thread): ``vmap`` over K = 100 clients takes 0.13× the per-client loop's time for logistic
regression (610 parameters), 0.31–0.50× for MLPs of 12,730–25,450 parameters, 0.74× at 50,890
and 2.8× at 159,010 (MLP(200) on 28×28 inputs), while ``parallel`` on 2 cores takes about 0.55×.
The choice is deterministic and recorded in ``summary.json`` (:meth:`AutoExecutor.summary`).
"""

from __future__ import annotations

from pydantic import Field
from torch import nn

from ..algorithms.base import Algorithm
from ..config.base import NoOptions
from ..config.limits import MAX_STATE_MB
from ..data.federated import FederatedDataset
from ..models.flat import FlatModel
from ..training.local_sgd import LocalTrainer
from .base import EXECUTORS, ClientBatch, CohortResult, Executor, WorkersOption
from .parallel import ParallelConfig, ParallelExecutor
from .sequential import SequentialExecutor
from .vectorized import VectorizedConfig, VectorizedExecutor

#: largest dense model (parameters) that rule 3 batches on a CPU
SMALL_DENSE_PARAMS = 30_000
#: layers a "dense" model may consist of (anything else — convolutions, recurrences, norms — is not)
DENSE_LAYERS = (nn.Linear, nn.Flatten, nn.Identity, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.GELU,
                nn.SiLU, nn.ELU, nn.Softplus)


class AutoConfig(WorkersOption):
    memory_mb: float = Field(512.0, gt=0.0, le=MAX_STATE_MB,
                             description="vectorized's memory budget per chunk of clients")


def choose(model: FlatModel, cohort: int, cores: int, device: str) -> tuple[str, str]:
    """``(executor name, reason)`` by the rule in this module's docstring."""
    leaves = [m for m in model.module.modules() if not list(m.children())]
    batchable = not model.buffer_names and not any(isinstance(m, nn.RNNBase) for m in model.module.modules())
    dense = all(isinstance(m, DENSE_LAYERS) for m in leaves)
    if cohort <= 1:
        return "sequential", "one client per round: nothing to batch or spread"
    if device == "cuda" and batchable:
        return "vectorized", "runtime.device is CUDA: clients are batched on the GPU"
    if dense and batchable and model.dim <= SMALL_DENSE_PARAMS:
        return "vectorized", (f"dense model with {model.dim:,} parameters <= {SMALL_DENSE_PARAMS:,}: batching "
                              "clients removes the per-step overhead that dominates on a CPU")
    if device != "cpu":
        return "sequential", f"runtime.device is {device} and vmap cannot batch this model: one client at a time there"
    if cores >= 2:
        kind = "dense" if dense else "convolutional/recurrent/normalised"
        return "parallel", f"{kind} model with {model.dim:,} parameters on {cores} cores: one process per core"
    return "sequential", "one core and a model too large to batch profitably"


@EXECUTORS.register("auto")
class AutoExecutor(Executor):
    """Picks sequential, vectorized or parallel per round by a fixed rule (model, device, cohort, cores)."""

    matches_sequential = False  # within float tolerance of sequential, not bitwise

    Config = AutoConfig

    reports_on_device = True  # on a device it runs vectorized or sequential, which both leave reports there

    def __init__(self, cfg: AutoConfig):
        super().__init__(cfg)
        self.cores = cfg.worker_count()  # as many as parallel would start: the rule may pick it on a CPU
        self.executors: dict[str, Executor] = {}
        self.rounds: dict[str, int] = {}
        self.reasons: dict[str, str] = {}

    def _executor(self, name: str) -> Executor:
        if name not in self.executors:
            build = {"sequential": lambda: SequentialExecutor(NoOptions()),
                     "vectorized": lambda: VectorizedExecutor(VectorizedConfig(memory_mb=self.cfg.memory_mb)),
                     "parallel": lambda: ParallelExecutor(ParallelConfig(workers=self.cores))}
            self.executors[name] = build[name]()
        return self.executors[name]

    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        name, reason = choose(trainer.model, len(batch.clients), self.cores, trainer.device.type)
        self.rounds[name] = self.rounds.get(name, 0) + 1
        self.reasons.setdefault(name, reason)
        return self._executor(name).run(batch, algorithm, trainer, data)

    def summary(self) -> dict:
        if not self.rounds:
            return {}
        top = max(self.rounds, key=lambda n: self.rounds[n])  # most rounds; the first chosen on a tie
        chosen = {k: v for ex in self.executors.values() for k, v in ex.summary().items()}  # e.g. GPU chunk sizes
        return {"auto_executor": top, "auto_executor_reason": self.reasons[top],
                "auto_executor_rounds": dict(self.rounds), **chosen}

    def close(self) -> None:
        for ex in self.executors.values():
            ex.close()
        self.executors.clear()


__all__ = ["AutoExecutor", "SMALL_DENSE_PARAMS", "choose"]
