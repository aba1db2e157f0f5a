"""Record REFL's IPS selection and stale-aware aggregation, and REFL's SAFA emulation, from the authors' code.

    python scripts/conformance/refl.py --checkout /path/to/REFL      # a clone of ahmedcs/REFL

Writes ``tests/conformance/records/refl.json`` (cases ``ips`` and ``saa``) and ``.../safa.json`` (case
``safa``; ``--safa-out`` moves it). Needs numpy and torch only (the project's environment is enough).

What runs is the authors' code, imported from ``<checkout>/core``:

* ``core/client_manager.py``: ``clientManager`` (``registerClient``, ``getFeasibleClients``,
  ``resampleClients`` with ``getPriority`` / ``isAvailable``: the least-available-first priority list, the
  noisy oracle's thinning, the draw) and ``core/helper/client.py``'s ``Client`` (the trace pointer);
* ``core/aggregator.py``: ``Aggregator`` itself — ``round_completion_handler`` (selection, ``tictak_client_tasks``'s
  deadline cut, the removal of pending / recently-run clients, the straggler cache and ``get_stale_updates``'
  count-down), ``client_completion_handler`` (fresh models summed, straggler models cached), ``update_importance``
  (the stale weights), ``stale_clients_handler``, ``normalize_importance`` and ``round_reset_metrics``, called in
  the order of its ``event_monitor``'s ``train`` branch.

Stubbed around them: ``fl_aggregator_libs`` (the star import that would parse the command line, start
logging to files and import torchvision: replaced by a module holding the standard modules the aggregator
reads and the job's ``args`` namespace), ``wandb`` and ``utils.utils_model`` (imported, not reached), the
executors (each client's result dict: a full local model = the broadcast model + a fixed seeded delta), the
model (a two-tensor ``torch.nn.Module``), the device-capacity cost model (each client's fixed duration is
written into ``clients_exe_cost``, as ``executor_info_handler`` would after ``registerDuration``) and the
aggregator's unseeded replacement generator (``self.rng``, seeded here). Clients get their traces
sequentially (``random_behv = 0``: client ``c`` gets trace ``c % N``, turnout's ``mapping: modulo``).

Scenarios (REFL's run scripts unless said otherwise; DL mode ``exp_type = 0``, deadline 100 s):

* ``ips``: the client manager alone, 40 clients, N_t = 6, 14 rounds 100 s apart, window = the deadline, with
  the noisy oracle off (``avail_probability = 0``) and on (0.9). ``random.Random`` calls of the manager are
  recorded (the lists it thins, fills and shuffles), so the test can check each list's membership and size.
* ``saa``: REFL (``avail_priority = 1``, ``avail_probability = 0.9``, ``stale_update = -1``,
  ``stale_factor = -4``, ``stale_beta = 0.35``, ``scale_coff = 1``, ``send_delta = 0``, ``prohibit_reselect = 5``,
  ``adapt_selection = 0``), 30 clients, N_t = 5, 12 rounds.
* ``safa``: REFL's SAFA emulation (``wandb_tags = safa``, ``stale_update = 5``, ``avail_priority = 0``,
  ``stale_factor = 1`` as in the CIFAR-10 config, which sets none), target ratio 0.3, 30 clients, 12 rounds;
  ``safa_on_time``: the same with 20 clients that all beat the deadline, 4 rounds.
"""

from __future__ import annotations

import collections
import gc
import logging
import math
import os
import random
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RECORDS, commit_of, parse_args, write_record  # noqa: E402

DEADLINE = 100.0
PERIOD = 6000  # trace period (FedScale finish_time); the runs span < 2,000 s, so no window wraps


def traces(n: int, seed: int, short=(150, 450), long=(500, 1500)) -> dict:
    """FedScale-format behaviour traces: odd clients with ``short`` online sessions, even ones with ``long``."""
    g = np.random.default_rng(seed)
    out = {}
    for k in range(n):
        lo, hi = short if k % 2 else long
        t = -int(g.integers(0, 400))
        active, inactive = [], []
        while t < PERIOD:
            on = int(g.integers(lo, hi))
            s, e = max(t, 0), min(t + on, PERIOD - 1)
            if e - s >= 30:
                active.append(s)
                inactive.append(e)
            t += on + int(g.integers(60, 300))
        out[k] = {"active": active, "inactive": inactive, "finish_time": PERIOD,
                  "duration": int(sum(e - s for s, e in zip(active, inactive))), "model": "stub"}
    return out


def job_args(**over) -> types.SimpleNamespace:
    """The job's argument namespace: REFL's parser defaults for what this path reads, then the run settings."""
    a = dict(
        # framework
        learners="1", use_cuda=False, cuda_device=None, task="cv", data_set="stub", model="stub", epochs=10 ** 6,
        eval_interval=10 ** 6, decay_epoch=10 ** 6, decay_factor=1.0, learning_rate=0.01, min_learning_rate=0.0,
        gradient_policy="fed-avg", sample_mode="random", filter_less=0, filter_more=10 ** 9, used_samples=-1,
        device_avail_file=None, random_behv=0, sample_seed=0, use_wandb=False, batch_size=10, local_steps=1,
        scale_sys=1.0, scale_sys_percent=0.0, initial_total_worker=100,
        # deadline mode (run scripts: exp_type 0, deadline 100)
        exp_type=0, deadline=DEADLINE, initial_deadline=1000.0, deadline_alpha=0.25, deadline_percent=0.0,
        last_worker=False, no_filter_dropouts=0, dropout_ratio=0.0, overcommitment=1.3, stale_all=False,
        # REFL
        avail_priority=1, avail_probability=0.9, stale_update=-1, stale_factor=-4.0, stale_beta=0.35, scale_coff=1.0,
        adapt_scale_coff=False, send_delta=False, model_boost=False, adapt_selection=0, adapt_selection_cap=0.5,
        prohibit_reselect=5, stale_skip_round=False, target_ratio=0.8, wandb_tags="refl", total_worker=5)
    a.update(over)
    return types.SimpleNamespace(**a)


class RecordingRandom(random.Random):
    """The client manager's ``random.Random``: passes every call through, recording ``sample`` and ``shuffle``."""

    def __init__(self, seed):
        super().__init__(seed)
        self.calls: list[dict] = []

    def sample(self, population, k, **kw):
        out = super().sample(population, k, **kw)
        self.calls.append({"op": "sample", "population": [int(c) for c in population], "k": int(k),
                           "result": [int(c) for c in out]})
        return out

    def shuffle(self, x):
        super().shuffle(x)
        self.calls.append({"op": "shuffle", "result": [int(c) for c in x]})


def load_code(checkout: Path, args: types.SimpleNamespace):
    """Import the authors' client manager and aggregator with the framework modules stubbed."""
    core = checkout / "core"
    sys.path.insert(0, str(core))
    from client_manager import clientManager

    libs = types.ModuleType("fl_aggregator_libs")
    libs.__dict__.update(os=os, sys=sys, time=time, gc=gc, logging=logging, collections=collections, math=math,
                         Queue=object, dist=None, BaseManager=object, clientManager=clientManager, args=args)
    sys.modules["fl_aggregator_libs"] = libs
    sys.modules["wandb"] = types.ModuleType("wandb")
    model_utils = types.ModuleType("utils.utils_model")
    model_utils.__dict__.update(cosine_sim=None, kl_divergence=None, normalize=None)
    sys.modules["utils.utils_model"] = model_utils
    import aggregator as aggregator_module

    return clientManager, aggregator_module


class TinyModel(torch.nn.Module):
    """The global model: two float32 tensors (8 numbers)."""

    def __init__(self, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(2, 3, generator=g))
        self.b = torch.nn.Parameter(torch.randn(2, generator=g))


def delta(client: int, epoch: int, seed: int) -> list[np.ndarray]:
    """A client's local update in a round (fixed, seeded; each client has its own drift)."""
    g = np.random.default_rng([seed, client, epoch])
    drift = np.random.default_rng([seed, client]).normal(0.0, 0.5, 8)
    d = (drift + g.normal(0.0, 0.2, 8)).astype(np.float32)
    return [d[:6].reshape(2, 3), d[6:]]


def flat(params) -> list[float]:
    """Parameters (tensors or arrays) as one list of floats."""
    return [float(x) for p in params for x in np.asarray(p.detach() if hasattr(p, "detach") else p, np.float32).ravel()]


# ------------------------------------------------------------------------------------------------------------
def record_ips(clientManager, n: int = 40, k: int = 6, rounds: int = 14, seed: int = 3) -> dict:
    """The client manager's least-available-first draw, round after round (noisy oracle off and on)."""
    user_trace = traces(n, seed)
    runs = {}
    for prob in (0.0, 0.9):
        args = job_args(avail_probability=prob)
        manager = clientManager("random", args)
        manager.user_trace = user_trace
        manager.rng = RecordingRandom(233 + args.sample_seed)
        for c in range(1, n + 1):
            manager.registerClient(0, c, size=100, speed={"computation": 1.0, "communication": 1.0})
        out = []
        for r in range(rounds):
            clock = DEADLINE * (r + 1)  # the aggregator's clock at epoch r+1 (advance_round adds the deadline)
            manager.rng.calls = []
            priority = {c: manager.getPriority(c, clock, DEADLINE) for c in manager.getAllClients()}
            picked, kept = manager.resampleClients(k, cur_time=clock, time_window=DEADLINE)
            out.append({"round": r, "clock": clock, "online": [int(c) for c in manager.cur_online_clients],
                        "priority_all": sorted(int(c) for c, p in priority.items() if p == 1),
                        "calls": list(manager.rng.calls), "picked": [int(c) for c in picked],
                        "priority_kept": [int(c) for c in kept]})
        runs[str(prob)] = out
    return {"name": "ips", "num_clients": n, "K": k, "window": DEADLINE, "period": PERIOD,
            "traces": [user_trace[i] for i in range(n)], "runs": runs}


# ------------------------------------------------------------------------------------------------------------
def drive_aggregator(aggregator_module, clientManager, args, *, n: int, durations: dict, rounds: int, seed: int,
                     user_trace: dict) -> list[dict]:
    """Run the authors' Aggregator for ``rounds`` rounds on the stub world; one record per round."""
    aggregator_module.args = args  # the module reads the job's args as a global too
    Aggregator = aggregator_module.Aggregator
    agg = Aggregator(args)
    agg.rng = random.Random(seed)  # setup_seed leaves it unseeded
    agg.model = TinyModel(seed)
    agg.round_reset_metrics()  # sizes the per-parameter counters, as run() does
    manager = agg.client_manager
    manager.user_trace = user_trace
    manager.rng = RecordingRandom(233 + args.sample_seed)
    for c in range(1, n + 1):  # executor_info_handler, with the cost model replaced by fixed durations
        manager.registerClient(0, c, size=100, speed={"computation": 1.0, "communication": 1.0})
        manager.clients_exe_cost[manager.getUniqueId(0, c)] = (float(durations[c]), 0.0)
        agg.clients_select_count[c] = agg.clients_success_count[c] = agg.clients_fail_count[c] = 0
        agg.last_run_round[c] = 0
    agg.save_last_param()

    tictak = agg.tictak_client_tasks
    seen = {}

    def recording_tictak(sampled, num):
        out = tictak(sampled, num)
        seen["tictak"] = {"sampled": [int(c) for c in sampled], "num_to_collect": int(num),
                          "fresh": [int(c) for c in out[0]], "stragglers": [int(c) for c in out[1]],
                          "dropouts": sorted(int(c) for c in out[2])}
        return out

    agg.tictak_client_tasks = recording_tictak
    count_down = agg.get_stale_updates

    def recording_count_down(duration=0):
        cached = [c for c in agg.staleWeights if len(agg.staleWeights[c]) > 0]
        out = count_down(duration)
        seen["expired"] = sorted(int(c) for c in cached if c not in agg.staleWeights and c not in out[0])
        return out

    agg.get_stale_updates = recording_count_down
    out = []
    manager.rng.calls = []
    agg.round_completion_handler()  # the first selection (executor_info_handler ends with it)
    for _ in range(rounds):
        epoch = agg.epoch
        broadcast = [p.detach().clone() for p in agg.model.parameters()]
        queue = list(agg.resource_manager.client_run_queue)
        strugglers = [int(c) for c in agg.strugglers_to_run]
        rec = {
            "epoch": epoch, "clock": float(agg.global_virtual_clock), "time_window": float(agg.time_window),
            "total_worker": int(agg.total_worker),
            "online": [int(c) for c in (agg.sampled_participants if args.wandb_tags == "safa"  # SAFA: all online
                                        else manager.cur_online_clients)],
            "selection_calls": list(manager.rng.calls), "sampled": [int(c) for c in agg.sampled_participants],
            "priority_kept": [int(c) for c in agg.priority_clients], "tictak": dict(seen["tictak"]),
            "queue": [int(c) for c in queue], "tasks_round": int(agg.tasks_round), "new_stragglers": strugglers,
            "stale_applied": {str(c): int(t) for c, t in agg.update_stale_rounds.items()},
            "stale_expired": seen.pop("expired", []), "mov_avg_deadline": float(agg.mov_avg_deadline),
            "round_duration": float(agg.round_duration),
            "stale_models": {str(c): flat(agg.round_stale_param[c]) for c in agg.round_stale_param},
            "broadcast": flat(broadcast),
        }
        results = {}
        for c in queue:  # the executors train each queued client from the broadcast model
            full = [b.numpy() + d for b, d in zip(broadcast, delta(c, epoch, seed))]
            results[str(c)] = flat(full)
            agg.client_completion_handler({
                "clientId": c, "update_weight": full, "moving_loss": 1.0, "utility": 1.0, "train_acc": 0.0,
                "train_acc_5": 0.0, "train_loss": 1.0, "sample_count": 100, "label_counter": {}})
        agg.update_importance()
        rec["client_ratio"] = {str(c): float(v) for c, v in agg.client_ratio.items()}
        rec["importance"] = {str(c): float(v) for c, v in agg.client_importance.items()}
        rec["fresh_added"] = [int(c) for c in agg.update_clients]  # the models summed into the global model
        if set(rec["fresh_added"]) & set(strugglers):
            raise SystemExit(f"epoch {epoch}: a client is both fresh and a new straggler; pick another seed")
        agg.stale_clients_handler()
        agg.normalize_importance()
        rec["results"] = results
        rec["model_after"] = flat(agg.model.parameters())
        out.append(rec)
        manager.rng.calls = []
        agg.round_completion_handler()
        agg.event_queue.clear()
        agg.round_reset_metrics()
    return out


def durations_for(n: int, seed: int, fast: int, late_max: int) -> dict:
    """Per-client round durations: ``fast`` clients under the deadline, the rest 1 to ``late_max`` deadlines late.

    Late durations keep 10-85 s from a multiple of the deadline, away from where the code's count-down by the
    moving average μ_t (75, 93.75, … s in the first rounds) and the 100 s clock disagree.
    """
    g = np.random.default_rng(seed)
    ids = g.permutation(np.arange(1, n + 1))
    out = {}
    for i, c in enumerate(ids):
        if i < fast:
            out[int(c)] = float(g.integers(15, 95))
        else:
            out[int(c)] = float(100 * g.integers(1, late_max + 1) + g.integers(10, 85))
    return out


def record_saa(aggregator_module, clientManager, n: int = 30, k: int = 6, rounds: int = 16, seed: int = 11) -> dict:
    args = job_args(total_worker=k)
    user_trace = traces(n, seed, short=(400, 1200), long=(800, 2500))
    durations = durations_for(n, seed, fast=2 * n // 5, late_max=3)
    rows = drive_aggregator(aggregator_module, clientManager, args, n=n, durations=durations, rounds=rounds,
                            seed=seed, user_trace=user_trace)
    return {"name": "saa", "num_clients": n, "K": k, "deadline": DEADLINE, "beta": args.stale_beta,
            "scale_coff": args.scale_coff, "durations": {str(c): d for c, d in durations.items()},
            "traces": [user_trace[i] for i in range(n)], "period": PERIOD, "rounds": rows}


def record_safa(aggregator_module, clientManager, n: int = 30, rounds: int = 12, seed: int = 5,
                ratio: float = 0.3) -> dict:
    args = job_args(wandb_tags="safa", stale_update=5, avail_priority=0, avail_probability=0.0, stale_factor=1.0,
                    target_ratio=ratio, total_worker=10)
    user_trace = traces(n, seed, short=(800, 2500), long=(800, 2500))
    durations = durations_for(n, seed, fast=n // 3, late_max=7)
    rows = drive_aggregator(aggregator_module, clientManager, args, n=n, durations=durations, rounds=rounds,
                            seed=seed, user_trace=user_trace)
    return {"name": "safa", "num_clients": n, "deadline": DEADLINE, "target_ratio": ratio, "max_staleness": 5,
            "durations": {str(c): d for c, d in durations.items()}, "traces": [user_trace[i] for i in range(n)],
            "period": PERIOD, "rounds": rows}


def record_safa_on_time(aggregator_module, clientManager, n: int = 20, rounds: int = 4, seed: int = 5,
                        ratio: float = 0.3) -> dict:
    """REFL's SAFA emulation when every client beats the deadline: only then does its quota bind."""
    args = job_args(wandb_tags="safa", stale_update=5, avail_priority=0, avail_probability=0.0, stale_factor=1.0,
                    target_ratio=ratio, total_worker=10)
    user_trace = traces(n, seed, short=(800, 2500), long=(800, 2500))
    durations = {c: float(10 + 4 * c) for c in range(1, n + 1)}
    rows = drive_aggregator(aggregator_module, clientManager, args, n=n, durations=durations, rounds=rounds,
                            seed=seed, user_trace=user_trace)
    return {"name": "safa_on_time", "num_clients": n, "deadline": DEADLINE, "target_ratio": ratio,
            "max_staleness": 5, "durations": {str(c): d for c, d in durations.items()}, "rounds": rows}


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    safa_out = RECORDS / "safa.json"
    if "--safa-out" in argv:
        i = argv.index("--safa-out")
        safa_out = Path(argv[i + 1])
        del argv[i:i + 2]
    args = parse_args("refl", "ahmedcs/REFL", argv)
    clientManager, aggregator_module = load_code(args.checkout, job_args())
    commit = commit_of(args.checkout)
    manager_src = "core/client_manager.py: clientManager.resampleClients, getPriority, isAvailable, getFeasibleClients"
    agg_src = ("core/aggregator.py: Aggregator.round_completion_handler, tictak_client_tasks, get_stale_updates, "
               "client_completion_handler, update_importance, stale_clients_handler, normalize_importance")
    write_record(args.out, mechanism="refl", repo="ahmedcs/REFL", commit=commit, source=f"{manager_src}; {agg_src}",
                 cases=[record_ips(clientManager), record_saa(aggregator_module, clientManager)])
    write_record(safa_out, mechanism="safa", repo="ahmedcs/REFL", commit=commit,
                 source=f"{agg_src} (wandb_tags = safa); {manager_src}",
                 cases=[record_safa(aggregator_module, clientManager),
                        record_safa_on_time(aggregator_module, clientManager)])


if __name__ == "__main__":
    main()
