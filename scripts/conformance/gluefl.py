"""Record GlueFL's sticky sampling, aggregation weights, mask shifting and re-scaled error compensation
as the authors' code computes them, for ``tests/conformance/test_conformance_gluefl.py``.

Run (turnout's venv has what it needs, numpy and torch; nothing else of the authors' dependencies is imported)::

    git clone https://github.com/TCtower/GlueFL /tmp/GlueFL
    python scripts/conformance/gluefl.py --checkout /tmp/GlueFL

What runs is the authors' code, imported from the checkout and driven round after round in FedScale's
order: ``GlueFL_Aggregator.round_completion_handler`` (candidate counts, ``GlueflClientManager.
select_participants_sticky``, the tictak filter, ``update_sticky_group``), ``create_client_task`` /
``get_gradient_weight`` (aggregation weights, the client's scale and sticky flag), ``GlueFL_Client.train``
(error compensation, shared + unique mask; the residual files it writes carry the state between rounds),
``client_completion_handler`` / ``aggregate_client_weights`` / ``apply_and_update_mask`` (the server's step
and the next shared mask). Stubbed, as the framework around them:

- FedScale's ``Aggregator`` base class (gRPC server, logging, tensorboard): the attributes GlueFL reads;
- the executor's ``Client`` base class and log folder (read at import only);
- device availability (FedScale's traces): a script of who is online each round and which launched
  candidates go offline before they finish;
- local training: a model whose one local step moves its parameters by a given update, so the client's
  "gradient" (old − new) is exactly the recorded input.

Client ids are FedScale's 1..N; the record holds them 0-based (id − 1), as turnout numbers clients.
Floats are float32 written with 9 significant digits (they read back bit-exact).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import random
import sys
import tempfile
import threading
import time
import types
import warnings
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from common import commit_of, parse_args, write_record

MECHANISM = "gluefl"
REPO = "TCtower/GlueFL"
SOURCE = ("examples/gluefl/gluefl_aggregator.py: GlueFL_Aggregator.round_completion_handler, create_client_task, "
          "get_gradient_weight, client_completion_handler, aggregate_client_weights, apply_and_update_mask; "
          "examples/gluefl/gluefl_client_manager.py: GlueflClientManager.select_participants_sticky, "
          "update_sticky_group; examples/gluefl/gluefl_client.py: GlueFL_Client.train; "
          "fedscale/utils/compressor/topk.py: TopKCompressor")

# The model: its tensors' sizes decide the per-tensor k. With q = 0.3 and q_shr = 0.2 the 4-value head.bias
# has k = |M| = 1, the case where the code's "force M with max|g|" can drop a shared coordinate.
SHAPES = OrderedDict([("fc.weight", (6, 8)), ("fc.bias", (8,)), ("head.weight", (3, 8)), ("head.bias", (4,))])
TIE_TENSOR = "head.bias"


# ---- the framework around GlueFL's functions ---------------------------------------------------------------
class AggregatorBase:
    """Stands in for FedScale's ``Aggregator``: the state GlueFL's handlers read, no servers or logs."""

    def __init__(self, args):
        from fedscale.core.resource_manager import ResourceManager
        self.args = args
        self.experiment_mode = args.experiment_mode
        self.device = torch.device("cpu")
        self.resource_manager = ResourceManager(self.experiment_mode)
        self.client_manager = self.init_client_manager(args=args)
        self.round = 0
        self.global_virtual_clock = 0.0
        self.round_duration = 0.0
        self.num_of_clients = 0
        self.client_profiles = {}
        self.client_conf = {}
        self.individual_client_events = {}
        self.sampled_participants = []
        self.round_stragglers = []
        self.virtual_client_clock = {}
        self.stats_util_accumulator = []
        self.loss_accumulator = []
        self.client_training_results = []
        self.last_gradient_weights = []
        self.model_in_update = 0
        self.tasks_round = 0
        self.update_lock = threading.Lock()

    def round_weight_handler(self, last_model):
        pass

    def log_train_result(self, avg_loss):
        pass

    def broadcast_aggregator_events(self, event):
        pass

    def save_last_param(self):
        pass

    def get_client_conf(self, client_id):
        return {"learning_rate": self.args.learning_rate, "model": None}


class ClientBase:
    """Stands in for FedScale's executor ``Client`` (GlueFL's ``train`` uses none of its state)."""

    def __init__(self, conf):
        self.conf = conf


class ScriptedModel:
    """A model whose one local step moves every parameter by ``-delta``: the client's gradient is ``delta``."""

    def __init__(self, delta: dict):
        self.params = OrderedDict((k, torch.zeros(v.shape)) for k, v in delta.items())
        self.delta = delta
        self.dummy = torch.nn.Parameter(torch.zeros(1))  # what the optimiser steps (nothing that is read)
        self.stepped = False

    def to(self, *a, **kw):
        return self

    def train(self):
        return self

    def parameters(self):
        return [self.dummy]

    def state_dict(self):
        return self.params

    def __call__(self, data):
        if not self.stepped:
            for k in self.params:
                self.params[k] -= self.delta[k]
            self.stepped = True
        return self.dummy * torch.ones(len(data), 2)


class OneBatch:
    """The client's data loader: one batch (the scripted model ignores it)."""

    dataset = [0]

    def __iter__(self):
        yield torch.zeros(1, 1), torch.zeros(1, dtype=torch.long)


def install_stubs() -> None:
    """Framework modules GlueFL imports whose real versions pull in gRPC servers, torchvision and loggers."""
    base = types.ModuleType("fedscale.core.aggregation.aggregator")
    base.Aggregator = AggregatorBase
    std = types.ModuleType("fedscale.core.logger.aggragation")  # GlueFL takes these through a star import
    for name, mod in {"logging": logging, "math": math, "pickle": pickle, "random": random, "time": time,
                      "os": os, "torch": torch, "numpy": np, "np": np}.items():
        setattr(std, name, mod)
    client = types.ModuleType("fedscale.core.execution.client")
    client.Client = ClientBase
    execution = types.ModuleType("fedscale.core.logger.execution")
    execution.logDir = tempfile.gettempdir()
    sys.modules.update({base.__name__: base, std.__name__: std, client.__name__: client,
                        execution.__name__: execution})


def import_authors(checkout: Path):
    sys.path.insert(0, str(checkout))
    install_stubs()
    warnings.filterwarnings("ignore", category=SyntaxWarning)  # resource_manager.py's assert on a tuple
    argv, sys.argv = sys.argv, sys.argv[:1]  # FedScale parses the command line when config_parser is imported
    try:
        from fedscale.core.config_parser import args
    finally:
        sys.argv = argv
    from examples.gluefl.gluefl_aggregator import GlueFL_Aggregator
    from examples.gluefl.gluefl_client import GlueFL_Client
    return args, GlueFL_Aggregator, GlueFL_Client


# ---- inputs --------------------------------------------------------------------------------------------------
def vec(x) -> str:
    """A float32 vector as one line of space-separated values with 9 significant digits (bit-exact on reading)."""
    a = np.asarray(x.detach().numpy() if hasattr(x, "detach") else x, dtype=np.float32).ravel()
    return " ".join(f"{v:.9g}" for v in a.tolist())


def line(ints) -> str:
    """Integers (client ids in drawing order, positions) as one line, space-separated."""
    return " ".join(str(int(i)) for i in ints)


def ids(mask) -> str:
    """The positions a boolean vector holds, as one line of space-separated indices."""
    return line(torch.nonzero(torch.as_tensor(mask)).flatten().tolist())


def client_update(seed: int, rnd: int, cid: int, tie: bool) -> dict:
    """A client's gradient, fixed by (seed, round, client): values rounded to 3 decimals, so they are short.

    head.bias: coordinate 0 dominates (so it is the shared mask's only position there); ``tie`` makes
    coordinate 1 the largest instead, once, to show the code's tie.
    """
    g = np.random.default_rng([seed, rnd, cid])
    out = {}
    for name, shape in SHAPES.items():
        v = np.round(g.normal(0.0, 1.0, size=shape), 3)
        if name == TIE_TENSOR:
            v = np.round(g.normal(0.0, 0.05, size=shape), 3)
            v[0] += 20.0
            if tie:
                v[1] = 30.0
        out[name] = torch.tensor(v, dtype=torch.float32)
    return out


def flat(tensors) -> torch.Tensor:
    return torch.cat([torch.as_tensor(t).reshape(-1).to(torch.float32) for t in tensors])


# ---- one run of the authors' code ------------------------------------------------------------------------------
def run(authors, sc: dict, comp_dir: str) -> dict:
    args, GlueFL_Aggregator, GlueFL_Client = authors
    n, k, ch = sc["N"], sc["K"], sc["change"]
    for key, val in dict(dataset_total_worker=n, num_participants=k, sticky_group_size=sc["S"],
                         sticky_group_change_num=ch, total_mask_ratio=sc["q"], shared_mask_ratio=sc["q_shr"],
                         regenerate_epoch=sc["I"], overcommitment=sc["oc"], overcommit_weight=sc["w_oc"],
                         sampling_strategy="STICKY", fl_method="GlueFL", use_compensation=True,
                         compensation_dir=comp_dir, job_name=sc["name"], time_stamp="record", sample_mode="random",
                         filter_less=0, experiment_mode="simulation", rounds=10_000, eval_interval=10_000,
                         local_steps=1, batch_size=20, learning_rate=0.01, task="cv", model="record").items():
        setattr(args, key, val)
    random.seed(sc["seed"])  # random.sample in round_completion_handler
    agg = GlueFL_Aggregator(args)
    model = torch.nn.Module()
    for name, shape in SHAPES.items():
        model.register_buffer(name.replace(".", "_"), torch.zeros(shape))
    agg.model = model
    agg.init_mask()
    agg.model_update_size = 200.0  # kbit (the code measures a pickled model); only timings depend on it
    agg.model_bitmap_size = agg.model_update_size / 32
    agg.last_update_index = [0 for _ in range(n * 2)]
    prof = np.random.default_rng([sc["seed"], 7])
    agg.client_profiles = {i: {"computation": float(prof.uniform(5, 50)),
                               "communication": float(prof.uniform(1e3, 1e4)),
                               "dl_kbps": float(prof.uniform(1e2, 1e3)), "ul_kbps": float(prof.uniform(1e2, 1e3))}
                           for i in range(n)}
    agg.client_register_handler(1, {"size": [100] * n})

    cm = agg.client_manager
    online_rng = np.random.default_rng([sc["seed"], 11])
    online_of = {r: sorted(c for c in range(1, n + 1) if online_rng.random() >= sc["offline"])
                 for r in range(1, sc["rounds"] + 1)}

    def feasible(cur_time):  # FedScale's availability traces, scripted per round
        return list(online_of[agg.round])

    def active(client_id, cur_time):  # lost: scripted candidates that go offline before they finish
        lost = sc["lost"].get(agg.round, {})
        changed = sorted(agg.sampled_changed_clients)
        sticky = sorted(agg.sampled_sticky_clients)
        return not (client_id in changed[:lost.get("changed", 0)] or client_id in sticky[:lost.get("sticky", 0)])

    spied = {}
    select = cm.select_participants_sticky

    def spy_select(numOfClients, cur_time=0, K=0, change_num=0, overcommit=1.3):
        spied.update(n_tot=numOfClients, n_ch=change_num)
        return select(numOfClients, cur_time=cur_time, K=K, change_num=change_num, overcommit=overcommit)

    cm.getFeasibleClients, cm.isClientActive, cm.select_participants_sticky = feasible, active, spy_select

    rounds = []
    for rnd in range(1, sc["rounds"] + 1):
        group_before = list(cm.sticky_group)
        agg.round_completion_handler()
        assert agg.round == rnd
        to_run = list(agg.clients_to_run)
        row = {"round": rnd, "online": line(c - 1 for c in online_of[rnd]), "n_tot": spied["n_tot"],
               "n_ch": spied["n_ch"], "group_before": line(sorted(c - 1 for c in group_before)),
               "sticky_drawn": line(c - 1 for c in agg.sampled_sticky_clients),
               "changed_drawn": line(c - 1 for c in agg.sampled_changed_clients),
               "group_after": line(sorted(c - 1 for c in cm.sticky_group)),
               # the init round's draw is the group in its shuffled order (its candidates are the first ones)
               "group_order": line(c - 1 for c in cm.sticky_group) if not group_before else None,
               "removed": line(sorted({c - 1 for c in group_before} - {c - 1 for c in cm.sticky_group}))}
        if not sc["train"]:
            row["aggregated"] = line(sorted(c - 1 for c in to_run))
            rounds.append(row)
            continue
        mask_in = flat(agg.get_shared_mask()).bool()
        keep = sc["keep_tensors"]
        tie_client = min(to_run) if rnd == sc.get("tie_round") else None
        clients, weights, scales, sticky, updates, uploads, residuals = [], [], [], [], [], [], []
        while True:
            task, _ = agg.create_client_task(1)
            if task is None:
                break
            cid = task["client_id"]
            weights.append(agg.get_gradient_weight(cid))
            scales.append(task["agg_weight"])
            sticky.append(bool(task["sticky_client_flag"]))
            conf = SimpleNamespace(clientId=cid, device=torch.device("cpu"), local_steps=1, batch_size=1,
                                   learning_rate=0.01, loss_decay=0.2, task="cv")
            delta = client_update(sc["seed"], rnd, cid, tie=cid == tie_client)
            mask_model = [m.clone() for m in agg.get_shared_mask()]  # the executor's unpickled copy
            res = GlueFL_Client(conf).train(
                client_data=OneBatch(), model=ScriptedModel(delta),
                conf=conf, mask_model=mask_model, epochNo=agg.round, agg_weight=float(task["agg_weight"]),
                sticky_client_flag=task["sticky_client_flag"])
            up = flat(res["update_gradient"])
            if cid == tie_client:  # torch.topk's choice among tied values is its own: check the record shows the tie
                at = sum(int(np.prod(shape)) for shape in list(SHAPES.values())[:-1])
                if not (up[at] == 0 and up[at + 1] != 0 and mask_model[-1][0]):
                    sys.exit(f"the tie kept the shared coordinate on torch {torch.__version__}: choose another "
                             "tie position in client_update")
            path = os.path.join(comp_dir, sc["name"], "record", f"compensation_c{cid}.pth.tar")
            with open(path, "rb") as fh:
                comp = flat(pickle.load(fh))
            clients.append(cid - 1)
            updates.append(vec(flat(delta.values())))
            uploads.append(vec(up))
            residuals.append(vec(comp))
            agg.client_completion_handler(res)
        row.update(aggregated=line(sorted(clients)), clients=clients, weights=weights, scales=scales, sticky=sticky)
        if keep:
            row.update(mask_in=ids(mask_in), updates=updates, uploads=uploads, residuals=residuals,
                       step=vec(flat(agg.compressed_gradient)), mask_out=ids(flat(agg.shared_mask).bool()),
                       tie_client=None if tie_client is None else tie_client - 1)
        # The equal weights of the paper's "GlueFL (Equal)" (Fig. 5): the code's 1/tasks_round branch.
        agg.sampling_strategy = "EQUAL"
        row["equal_weight"] = agg.get_gradient_weight(to_run[0])
        agg.sampling_strategy = "STICKY"
        rounds.append(row)
    params = {k: v for k, v in sc.items() if k not in ("lost",)}
    params["layout"] = [[name, int(np.prod(shape))] for name, shape in SHAPES.items()]  # state_dict order
    return {"name": sc["name"], "params": params, "lost": {str(r): v for r, v in sc["lost"].items()},
            "rounds": rounds}


# Scenario "masks": no over-commitment, so every launched client runs (turnout's engine encodes every launched
# client's update, the code's simulation trains only those that will be aggregated); the mask is regenerated in
# the code's rounds 1, 6, 11 (I = 5); the last round carries the one forced-mask tie.
# Scenario "overcommit": GlueFL's over-commitment (oc 1.3, w_oc 0.4); two of the three changed candidates are lost
# in round 4 (fewer non-sticky reports than K − C: the code's and the paper's weights part), one in round 7 (K − C
# still report), a sticky candidate in round 5.
SCENARIOS = [
    dict(name="masks", seed=3, N=50, K=6, change=2, S=20, q=0.3, q_shr=0.2, I=5, oc=1.0, w_oc=0.4, offline=0.2,
         rounds=12, tie_round=12, lost={}, train=True, keep_tensors=True),
    dict(name="overcommit", seed=5, N=50, K=6, change=2, S=20, q=0.3, q_shr=0.2, I=5, oc=1.3, w_oc=0.4,
         offline=0.2, rounds=9, lost={4: {"changed": 2}, 5: {"sticky": 1}, 7: {"changed": 1}}, train=True,
         keep_tensors=False),
]
# Candidate counts (round 2, the first sticky round) for other (K, K − C, oc, w_oc): only the selection runs.
COUNTS = [(10, 2, 1.3, 0.4), (30, 6, 1.3, 0.4), (30, 6, 1.3, 0.9), (30, 6, 1.3, -1), (10, 2, 1.3, -1),
          (6, 2, 1.25, -1), (6, 2, 1.25, 0.4), (20, 4, 1.0, 0.4)]


def main(argv=None) -> None:
    a = parse_args(MECHANISM, REPO, argv)
    logging.disable(logging.CRITICAL)
    authors = import_authors(a.checkout.resolve())
    cases = []
    with tempfile.TemporaryDirectory() as comp_dir:
        for sc in SCENARIOS:
            cases.append(run(authors, sc, comp_dir))
        counts = []
        for i, (k, ch, oc, w) in enumerate(COUNTS):
            sc = dict(name=f"counts{i}", seed=100 + i, N=4 * k + 40, K=k, change=ch, S=4 * k, q=0.3, q_shr=0.2, I=5,
                      oc=oc, w_oc=w, offline=0.0, rounds=2, lost={}, train=False, keep_tensors=False)
            r2 = run(authors, sc, comp_dir)["rounds"][1]
            counts.append({"K": k, "change": ch, "oc": oc, "w_oc": w, "n_tot": r2["n_tot"], "n_ch": r2["n_ch"],
                           "n_sticky_drawn": len(r2["sticky_drawn"].split()),
                           "n_changed_drawn": len(r2["changed_drawn"].split())})
        cases.append({"name": "counts", "counts": counts})
    cases.append({"name": "environment", "torch": torch.__version__})  # torch.topk resolves the tie
    write_record(a.out, mechanism=MECHANISM, repo=REPO, commit=commit_of(a.checkout), source=SOURCE, cases=cases)


if __name__ == "__main__":
    main()
