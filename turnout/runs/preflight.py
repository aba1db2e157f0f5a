"""Refuse, before any work, an experiment that cannot fit in this machine's memory.

Every option can be within its bounds while their product is not (``data.dim: 10^6`` needs a
``dim × dim`` covariance; ten million clients with a big model need terabytes of per-client
state). Without this check such a run allocates for minutes, then dies with ``MemoryError`` or
is killed by the OS. :func:`check_resources` adds up what a plan will hold at its peak, from the
configs alone:

* **data** — every distinct dataset of every seed (a plan keeps them all), from the dataset
  class's own ``footprint(cfg)`` (:class:`turnout.data.federated.DataFootprint`);
* **model** — its parameters counted by building it on PyTorch's ``meta`` device (no memory),
  times the model-sized vectors a simulation keeps (global model, server optimiser state,
  coordinate ledger, evaluation copy) plus two per launched client (its update, its encoding);
* **client state** — per-client model-sized state up to ``runtime.state_budget_mb`` (the rest
  spills to disk);
* **population** — per-client columns and the label histogram, one permutation of a client's
  rows for its minibatches;
* **components** — whatever a component class declares with ``memory_bytes(cfg, sizes)``
  (generated availability traces, FedGS's dense ``N × N`` graph);
* **worker processes** — an executor that starts processes (``parallel``, ``auto``; ``Executor.processes``)
  costs, per worker, a fresh interpreter with torch and turnout imported (measured once by starting one:
  :func:`turnout.executors.parallel.worker_process_bytes`) plus its model copies, and once for all of them the
  shared copy of the dataset and of the parameter board they map. More workers than cores is allowed, with a
  one-line warning: they share the cores and the run gets slower, not faster.

The estimate is rough by design (within a small factor) and meant to stop the absurd, so it is
compared with the memory actually available: ``MemAvailable`` from ``/proc/meminfo`` (where
there is none, the ``sysconf`` count of available pages; where neither exists, nothing is
refused), capped by an address-space limit (``ulimit -v``) minus what the process already maps.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from ..config.loader import ResolvedExperiment
from ..core.errors import ConfigError, ConfigWarning
from ..executors.base import available_cores
from ..executors.parallel import worker_process_bytes

#: Model-sized float32 vectors a simulation keeps besides the cohort's (global model, server momentum
#: or Adam moments, the coordinate ledger's int64 rounds, an evaluation copy, aggregation buffers).
MODEL_COPIES = 8
#: Model-sized vectors per launched client held at once (its update and its encoded upload).
COHORT_COPIES = 2
#: Bytes per client of the population's struct-of-arrays columns (devices, counters, participation).
CLIENT_BYTES = 256
#: Launched clients assumed when a selector has no ``clients_per_round``.
DEFAULT_COHORT = 10
#: Model-sized float32 vectors a worker process keeps (its module, gradients, the optimiser's state, a buffer).
WORKER_MODEL_COPIES = 4
#: Model-sized rows per launched client on the parameter board the workers map (start, offset, end, gradient).
BOARD_COPIES = 4


@dataclass(frozen=True)
class Sizes:
    """What a component's ``memory_bytes(cfg, sizes)`` hook may scale with."""

    num_clients: int
    dim: int  # model parameters
    cohort: int  # clients launched per round


@dataclass(frozen=True)
class Term:
    """One part of the estimate: what it is, the key a user would change to shrink it, and its bytes."""

    label: str
    key: str
    value: Any
    bytes: int
    fix: str = ""  # what to do about it; default "make <label> smaller"


def check_resources(variants: list[ResolvedExperiment], available: int | None = None) -> None:
    """Raise :class:`ConfigError` if the plan's estimated peak memory exceeds what is available.

    ``available`` (bytes) defaults to :func:`available_bytes`; when that is unknown nothing is refused.
    """
    terms = estimate(variants)
    need = sum(t.bytes for t in terms)
    if available is None:
        available = available_bytes()
    if available is None or need <= available:
        warn_oversubscribed(variants)  # a plan that fits may still ask for more workers than cores
        return
    terms.sort(key=lambda t: t.bytes, reverse=True)
    parts = ", ".join(f"{t.label} {format_bytes(t.bytes)}" for t in terms[:3] if t.bytes)
    big = terms[0]
    fix = big.fix or f"make {big.label} smaller"
    raise ConfigError(big.key, big.value, f"the run needs about {format_bytes(need)} of memory ({parts}), more "
                                          f"than the {format_bytes(available)} available; {fix} "
                                          "or run it on a machine with more memory")


def estimate(variants: list[ResolvedExperiment]) -> list[Term]:
    """The plan's peak memory as terms: every dataset of every seed, plus the largest single simulation."""
    if not variants:
        return []
    seeds = len(variants[0].config.seeds)
    where = (lambda v: "") if len(variants) == 1 and variants[0].variant == "base" else \
        (lambda v: f"variants[{v.variant}].")
    data_terms: dict[str, Term] = {}
    footprints = {}
    for v in variants:
        key = json.dumps(v["data"].as_dict(), sort_keys=True)
        if key not in footprints:
            footprints[key] = _footprint(v)
            fp = footprints[key]
            if fp is not None:
                value = getattr(v["data"].cfg, fp.driver, v["data"].name)
                data_terms[key] = Term("the data", f"{where(v)}data.{fp.driver}", value, fp.bytes * seeds)
    sims = [_simulation_terms(v, footprints[json.dumps(v["data"].as_dict(), sort_keys=True)], where(v))
            for v in variants]
    largest = max(sims, key=lambda ts: sum(t.bytes for t in ts))
    return list(data_terms.values()) + largest


def _footprint(v: ResolvedExperiment):
    comp = v["data"]
    fn = getattr(comp.cls, "footprint", None)
    return fn(comp.cfg) if fn is not None else None


def _simulation_terms(v: ResolvedExperiment, fp, where: str) -> list[Term]:
    """What one (variant, seed) simulation holds besides its dataset."""
    if fp is None:
        return []
    n = fp.num_clients or 0
    dim = model_parameters(v, fp.input_shape, fp.num_classes) if fp.input_shape and fp.num_classes else 0
    selector = v["selector"]
    k = getattr(selector.cfg, "clients_per_round", None) or DEFAULT_COHORT
    launch = math.ceil(k * getattr(v["round_mode"].cfg, "oc", 1.0))
    sizes = Sizes(num_clients=n, dim=dim, cohort=launch)
    state_budget = int(v.config.runtime.state_budget_mb * 2**20)
    terms = [
        Term(f"the model (with {launch} clients' updates)", f"{where}model.name", v["model"].name,
             4 * dim * (MODEL_COPIES + COHORT_COPIES * launch)),
        Term("the per-client state", f"{where}runtime.state_budget_mb", v.config.runtime.state_budget_mb,
             min(state_budget, 4 * dim * n)),
        Term("the population", f"{where}data.num_clients", n,
             n * (CLIENT_BYTES + 8 * (fp.num_classes or 0)) + 8 * fp.max_client_rows),
    ]
    for seam, comp in v.components.items():
        hook = getattr(comp.cls, "memory_bytes", None)
        if hook is not None:
            terms.append(Term(f"the {seam}", f"{where}{seam}.name", comp.name, int(hook(comp.cfg, sizes))))
    workers = _worker_term(v, dim, launch, fp.bytes, where)
    if workers is not None:
        terms.append(workers)
    return terms


def _worker_term(v: ResolvedExperiment, dim: int, launch: int, data_bytes: int, where: str) -> Term | None:
    """The executor's worker processes: each an interpreter with torch, plus the data and board they share."""
    executor = v["executor"]
    n = executor.cls.processes(executor.cfg)
    if n < 1:
        return None
    each = worker_process_bytes() + 4 * dim * WORKER_MODEL_COPIES
    shared = data_bytes + 4 * dim * BOARD_COPIES * launch
    return Term(f"the executor's {n} worker processes", f"{where}executor.workers", n, n * each + shared,
                fix=f"lower executor.workers (each worker process holds about {format_bytes(each)}: a Python "
                    "interpreter with torch imported and its model copies)")


def warn_oversubscribed(variants: list[ResolvedExperiment]) -> None:
    """One warning when an executor would start more worker processes than this process has cores."""
    cores = available_cores()
    for v in variants:
        executor = v["executor"]
        n = executor.cls.processes(executor.cfg)
        if n > cores:
            warnings.warn(ConfigWarning(f"executor.workers = {n} starts more worker processes than the {cores} "
                                        "cores this process may use; they will share the cores and the rounds get "
                                        "slower, not faster"), stacklevel=3)
            return


def model_parameters(v: ResolvedExperiment, input_shape: Iterable[int], num_classes: int) -> int:
    """Parameters of the variant's model for this data shape, built on the ``meta`` device (no memory used)."""
    comp = v["model"]
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            module = comp.cls.build(comp.cfg, tuple(input_shape), int(num_classes))
    except Exception:  # a model that does not fit the data is refused later, with the model's own message
        return 0
    return sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())


def available_bytes() -> int | None:
    """Memory this process can still allocate, or ``None`` when the platform does not say."""
    limits = []
    avail = _proc_value("/proc/meminfo", "MemAvailable")
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            avail = None
    if avail is not None:
        limits.append(avail)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limits.append(max(0, soft - (_proc_value("/proc/self/status", "VmSize") or 0)))
    except (ImportError, ValueError, OSError):
        pass
    return min(limits) if limits else None


def _proc_value(path: str, field: str) -> int | None:
    """``field`` of a ``/proc`` file in bytes (the files give kB), or ``None``."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == field:
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def format_bytes(n: float) -> str:
    """``1536`` → ``"1.5 KiB"``; binary units up to EiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"
