"""Fan a cohort's clients out over Ray actors: many cores, many GPUs, many machines.

For a cohort that outgrows one machine (thousands of clients a round, or a large model), each
actor holds the model and the dataset — put into Ray's object store once per simulation, so an
actor on the driver's node maps it without a copy; actors are started once and serve simulation
after simulation — and trains the clients it is sent with the
sequential executor's trainer on one torch thread and the client's own (seed, "batches", round,
client) stream, so the numbers are bitwise those of ``executor: sequential``, whatever the number
of actors, the nodes or the order they finish. As with the parallel executor, the algorithm's
hooks stay in the driver (:mod:`turnout.executors.cohort`); a free actor gets a shrinking share
of the clients left.

Where actors train: ``gpus_per_actor > 0`` asks Ray for that share of a GPU per actor
(``0.25``: four actors per GPU) and trains on it; otherwise on the CPU slots
``cpus_per_actor`` asks for. ``runtime.device`` is the driver's device; with CUDA there, set
``gpus_per_actor`` (refused otherwise, naming the fix).

Training is a pure function of what an actor is sent, so a lost actor is restarted by Ray and its
clients trained again (``max_restarts``) without changing a number. The executor joins the Ray
this process is connected to (a sweep's Ray task, a notebook's ``ray.init``), else the cluster at
``address``, else starts a local Ray for the run and stops it when the run ends.

Ray is an optional extra shared with the sweep backend: ``pip install 'turnout[ray]'``.
"""

from __future__ import annotations

import warnings
import weakref

import numpy as np
import torch
from pydantic import Field

from ..algorithms.base import Algorithm
from ..config.base import StrictModel
from ..core.errors import ConfigError
from ..data.federated import FederatedDataset
from ..models.flat import FlatModel
from ..training.local_sgd import LocalTrainer
from .base import EXECUTORS, ClientBatch, CohortResult, Executor
from .cohort import InOrderUpdates, chunk_size, empty_result, prepare, train_client
from .parallel import WorkerError


class RayExecutorConfig(StrictModel):
    actors: int | None = Field(None, ge=1, le=4096, description="actors training clients (default: as many as the "
                                                                "cluster's free CPUs, or GPUs, hold at the per-actor "
                                                                "share)")
    cpus_per_actor: float = Field(1.0, gt=0.0, le=256.0, description="CPU slots each actor asks Ray for")
    gpus_per_actor: float = Field(0.0, ge=0.0, le=16.0, description="GPU share each actor asks for (0.25: four "
                                                                    "actors per GPU); > 0 trains on that GPU")
    max_restarts: int = Field(2, ge=0, le=100, description="times Ray restarts a lost actor (its clients are "
                                                           "trained again; results do not change)")
    address: str | None = Field(None, description="Ray cluster to join (HOST:PORT or ray://HOST:PORT) when this "
                                                  "process is not connected yet; default: start a local Ray")


class ClientTrainer:
    """The actor: trains the clients it is sent with the model and dataset of the simulation it is told.

    What to train with arrives as object references beside every chunk and is fetched only when it
    changed (a new simulation) — so one set of actors serves simulation after simulation, and an
    actor that Ray restarted (its memory lost) fetches it again on its next chunk.
    """

    def __init__(self):
        torch.set_num_threads(1)
        # Arrays from the object store are read-only views; training only reads them.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        self.key: int | None = None
        self.trainer: LocalTrainer | None = None
        self.x = self.y = self.offsets = None

    def train(self, setup: tuple, batch_round: int, seed: int, lr: float, buffers: dict,
              global_params: torch.Tensor, tasks: list[tuple]) -> list[tuple]:
        """Train each ``(row, client, steps, start or None for the global model, objective)`` task."""
        key, refs = setup
        if key != self.key:
            import ray

            module, cfg, grad_backend, device, self.x, self.y, self.offsets = ray.get(list(refs))
            self.trainer = LocalTrainer(FlatModel(module), cfg, grad_backend, device=device)
            self.key = key
        out = []
        for row, client, steps, start, objective in tasks:
            res = train_client(self.trainer, self.x, self.y, self.offsets, batch_round, seed, lr, buffers, client,
                               steps, global_params if start is None else start, objective)
            out.append((row, res.mean_loss, res.samples, res.buffers, res.params, res.grad_sum))
        return out


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("executor.name", "ray", "needs Ray, which is not installed: pip install 'turnout[ray]'") \
            from None
    return ray


@EXECUTORS.register("ray")
class RayExecutor(Executor):
    """Trains the cohort's clients on Ray actors (CPU or GPU slots, any nodes); bitwise equal to sequential."""

    Config = RayExecutorConfig
    requires = (("ray", "ray"),)

    def __init__(self, cfg: RayExecutorConfig):
        super().__init__(cfg)
        self.actors: list = []
        self._started_ray = False
        self._for: tuple | None = None  # weak references to the trainer and data of ``_setup``
        self._setup: tuple = ()  # (generation, object refs of model, settings and data) sent with every chunk
        self._generation = 0

    # ---- the actors --------------------------------------------------------------------------
    def _ensure_actors(self, trainer: LocalTrainer, data: FederatedDataset) -> None:
        """Start the actors (once) and put this simulation's model and data into the object store (once)."""
        if self._for is not None and self._for[0]() is trainer and self._for[1]() is data:
            return
        ray = _ray()
        if trainer.device.type != "cpu" and self.cfg.gpus_per_actor == 0:
            raise ConfigError("executor.gpus_per_actor", 0, f"runtime.device is {trainer.device}, but Ray actors "
                                                            "train where their slot is: give each actor a GPU share "
                                                            "(e.g. 1 or 0.25), or set runtime.device: cpu")
        if not ray.is_initialized():
            ray.init(address=self.cfg.address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            self._started_ray = True
        if not self.actors:
            remote = ray.remote(ClientTrainer).options(num_cpus=self.cfg.cpus_per_actor,
                                                       num_gpus=self.cfg.gpus_per_actor,
                                                       max_restarts=self.cfg.max_restarts,
                                                       max_task_retries=self.cfg.max_restarts)
            self.actors = [remote.remote() for _ in range(self.cfg.actors or self._default_actors(ray))]
        device = "cuda" if self.cfg.gpus_per_actor > 0 else "cpu"
        what = (trainer.model.module, trainer.cfg, trainer.grad_backend, device,
                *(np.ascontiguousarray(a) for a in (data.x_train, data.y_train, data.train_offsets)))
        self._generation += 1
        self._setup = (self._generation, tuple(ray.put(v) for v in what))
        self._for = (weakref.ref(trainer), weakref.ref(data))

    def _default_actors(self, ray) -> int:
        """As many actors as the cluster's free slots hold (what other work — a sweep's units — leaves)."""
        total = ray.available_resources()
        if self.cfg.gpus_per_actor > 0:
            gpus = total.get("GPU", 0.0)
            if gpus < self.cfg.gpus_per_actor:
                raise ConfigError("executor.gpus_per_actor", self.cfg.gpus_per_actor,
                                  f"the Ray cluster has {gpus:g} free GPUs; lower the share or set it to 0 (CPU "
                                  "actors)")
            return max(1, int(gpus // self.cfg.gpus_per_actor))
        return max(1, int(total.get("CPU", 1.0) // self.cfg.cpus_per_actor))

    def _kill_actors(self) -> None:
        if self.actors:
            ray = _ray()
            for actor in self.actors:
                ray.kill(actor)
        self.actors, self._for, self._setup = [], None, ()

    # ---- a round -----------------------------------------------------------------------------
    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        if len(batch.clients) == 0:  # nobody to train: no reason to start Ray
            return empty_result(batch)
        clients, starts, objectives = prepare(batch, algorithm)
        g = batch.global_params
        cohort = InOrderUpdates(algorithm, clients, starts, g.numel(), g.dtype)
        try:
            self._ensure_actors(trainer, data)
            self._train(batch, clients, starts, objectives, cohort)
        except BaseException:
            self.close()  # a failed set of actors is not reused
            raise
        return cohort.result()

    def _train(self, batch: ClientBatch, clients: list[int], starts: list, objectives: list,
               cohort: InOrderUpdates) -> None:
        ray = _ray()
        g = batch.global_params
        g_ref = ray.put(g)
        todo = [(row, c, int(steps), None if s is g else s, o)
                for row, (c, steps, s, o) in enumerate(zip(clients, batch.steps.tolist(), starts, objectives))]
        todo.reverse()
        pending: dict = {}  # object ref → (actor, what it is doing)

        def hand_out(i: int) -> None:
            chunk = [todo.pop() for _ in range(min(chunk_size(len(todo), len(self.actors)), len(todo)))]
            ref = self.actors[i].train.remote(self._setup, batch.round, batch.seed, batch.lr, batch.buffers, g_ref,
                                              chunk)
            pending[ref] = (i, f"training round {batch.round}'s clients {[t[1] for t in chunk]}")

        for i in range(len(self.actors)):
            if todo:
                hand_out(i)
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            i, what = pending.pop(ref)
            try:
                replies = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                raise WorkerError(f"executor.ray: actor {i} was lost while {what} and could not be restarted "
                                  f"({type(exc).__name__}); raise executor.max_restarts or check the cluster") \
                    from None
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if exc.cause is not None else exc
                raise WorkerError(f"executor.ray: actor {i} failed while {what}: {type(cause).__name__}: {cause}") \
                    from None
            if todo:
                hand_out(i)
            for row, mean_loss, n, bufs, end, grad in replies:
                cohort.arrive(row, mean_loss, n, bufs, end, grad)

    def summary(self) -> dict:
        return {"ray_actors": len(self.actors)} if self.actors else {}

    def close(self) -> None:
        try:
            self._kill_actors()
        finally:
            if self._started_ray:
                _ray().shutdown()
                self._started_ray = False


__all__ = ["RayExecutor", "RayExecutorConfig"]
