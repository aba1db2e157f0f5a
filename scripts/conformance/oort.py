"""Record FedScale's Oort training selector, driven by FedScale's own client manager and aggregator bookkeeping.

    python scripts/conformance/oort.py --checkout /path/to/FedScale     # a clone of SymbioticLab/FedScale

Needs numpy only (the project's environment is enough). What runs is the authors' code:
``thirdparty/oort/oort.py`` (``_training_selector``: ``getTopK``, ``pacer``, ``update_client_util``),
``fedscale/cloud/client_manager.py`` (``ClientManager.select_participants``, ``register_client``,
``register_feedback``) and three methods of ``fedscale/cloud/aggregation/aggregator.py``'s ``Aggregator``
(``round_completion_handler``, ``client_completion_handler``, ``select_participants``), called on a stub
aggregator that holds only the attributes those methods touch. Stubbed around them: the modules the aggregator
imports but this path never reaches (gRPC, wandb, TensorBoard, torchvision, the model adapters, the config
parser), ``tictak_client_tasks`` (which clients of the cohort report: the fixed inputs below), the resource
manager and the event broadcast, and the client manager's availability (the fixed available set of each round).

Oort draws its exploit and explore samples with ``numpy.random.choice(candidates, k, p=...)``; the recorder
passes those calls through to numpy and records their arguments and results, so a test can check turnout's
candidates and probabilities and replay the code's draw to carry the same state into the next round.

The scenario: 12 clients of distinct data sizes, K = 4 with over-commitment 1.5 (6 launched, the 4 fastest
report, 2 straggle), 10 of 12 available each round, 14 rounds, ε decaying by 0.8 to 0.3, pacer windows of 3
rounds, losses that jump ×20 at round 6 (so the pacer tightens, then relaxes).
"""

from __future__ import annotations

import builtins
import logging
import sys
import threading
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit_of, parse_args, write_record  # noqa: E402

N, K, OC, ROUNDS, AVAILABLE = 12, 4, 1.5, 14, 10
OORT_ARGS = dict(exploration_factor=0.9, exploration_decay=0.8, exploration_min=0.3, exploration_alpha=0.3,
                 round_threshold=30.0, sample_window=5.0, pacer_step=3, pacer_delta=10.0, blacklist_rounds=-1,
                 blacklist_max_len=0.3, clip_bound=0.95, round_penalty=2.0, cut_off_util=0.05)


def inputs(seed: int = 7) -> dict:
    """The fixed world: data sizes, durations, per-round availability and losses."""
    g = np.random.default_rng(seed)
    sizes = (30 + 7 * g.permutation(N)).tolist()  # distinct: no ties in Oort's sorts
    durations = np.round(5 + 55 * g.random(N), 3).tolist()  # distinct seconds per round
    available = [sorted(g.choice(N, AVAILABLE, replace=False).tolist()) for _ in range(ROUNDS)]
    losses = [np.round((1.0 if r < 6 else 20.0) * (0.5 + g.random(N)), 6).tolist() for r in range(ROUNDS)]
    return {"sizes": sizes, "durations": durations, "available": available, "losses": losses}


def stub_modules() -> None:
    """Modules the aggregator imports at load time but the selection path never uses."""
    import importlib

    def module(name: str, **attrs) -> None:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        parent, _, child = name.rpartition(".")
        if parent:  # `import a.b.c as x` reads c as an attribute of a.b
            setattr(sys.modules.get(parent) or importlib.import_module(parent), child, m)

    from fedscale.cloud import commons

    module("fedscale.cloud.channels")

    module("grpc")
    module("wandb")
    module("torch.utils.tensorboard", SummaryWriter=object)
    module("fedscale.cloud.channels.job_api_pb2_grpc", JobServiceServicer=object)
    module("fedscale.cloud.channels.job_api_pb2")
    module("fedscale.cloud.logger.aggregator_logging")
    module("fedscale.cloud.aggregation.optimizers", TorchServerOptimizer=object)
    module("fedscale.cloud.internal.tensorflow_model_adapter", TensorflowModelAdapter=object)
    module("fedscale.cloud.internal.torch_model_adapter", TorchModelAdapter=object)
    module("fedscale.cloud.fllibs", commons=commons, logging=logging)  # fllibs re-exports both


class RecordingRandom:
    """``numpy.random`` for Oort's module: passes every call through, recording ``choice``'s arguments."""

    def __init__(self):
        self.calls: list[dict] = []

    def seed(self, s):
        np.random.seed(s)

    def choice(self, a, size, p=None, replace=True):
        out = np.random.choice(a, size, p=p, replace=replace)
        self.calls.append({"candidates": [int(x) for x in a], "k": int(size),
                           "p": [float(x) for x in (p if p is not None else [])], "picked": [int(x) for x in out]})
        return out


def arms_of(selector) -> dict:
    """Oort's per-client state: reward, last time stamp, times run, duration."""
    return {str(c): {k: selector.totalArms[c][k] for k in ("reward", "time_stamp", "count", "duration")}
            for c in range(N)}


def main(argv=None) -> None:
    args = parse_args("oort", "SymbioticLab/FedScale", argv)
    sys.path.insert(0, str(args.checkout))
    stub_modules()
    import thirdparty.oort.oort as oort_module
    from fedscale.cloud import commons
    from fedscale.cloud.aggregation.aggregator import Aggregator
    from fedscale.cloud.client_manager import ClientManager

    # oort.py does `from .utils.lp import *`, and lp.py `from numpy import *`: under numpy >= 2 that star import
    # brings numpy's min / max / sum / round / abs over Python's (numpy 1.x did not export them), and
    # `min(a, b)` becomes `numpy.min(a, axis=b)`. Give the module back the builtins it was written against.
    for name in ("min", "max", "sum", "round", "abs", "all", "any"):
        oort_module.__dict__[name] = getattr(builtins, name)
    recording = RecordingRandom()
    oort_module.np2 = types.SimpleNamespace(random=recording)
    world = inputs()
    sizes, durations = world["sizes"], world["durations"]

    fs_args = types.SimpleNamespace(**OORT_ARGS, filter_less=0, filter_more=10 ** 9, local_steps=100,
                                    batch_size=10, device_avail_file=None, num_participants=K, overcommitment=OC,
                                    rounds=10 ** 6, eval_interval=10 ** 6, decay_round=10 ** 6, learning_rate=0.1,
                                    decay_factor=1.0, min_learning_rate=0.0, gradient_policy="fed-avg")
    manager = ClientManager("oort", fs_args)
    for cid in range(N):
        manager.register_client(0, cid, size=sizes[cid], speed={"computation": 1.0, "communication": 1.0},
                                duration=durations[cid])
    selector = manager.ucb_sampler
    round_index = {"r": -1}
    manager.getFeasibleClients = lambda cur_time: list(world["available"][min(round_index["r"] + 1, ROUNDS - 1)])

    class StubAggregator:
        select_participants = Aggregator.select_participants
        round_completion_handler = Aggregator.round_completion_handler
        client_completion_handler = Aggregator.client_completion_handler
        update_default_task_config = Aggregator.update_default_task_config

        def __init__(self):
            self.args, self.client_manager = fs_args, manager
            self.round, self.global_virtual_clock, self.round_duration = 0, 0.0, 0.0
            self.stats_util_accumulator, self.loss_accumulator, self.client_training_results = [], [], []
            self.round_stragglers, self.virtual_client_clock, self.sampled_participants = [], {}, []
            self.experiment_mode, self.individual_client_events = commons.SIMULATION_MODE, {}
            self.resource_manager = types.SimpleNamespace(register_tasks=lambda clients: None)
            self.update_lock, self.model_in_update = threading.Lock(), 0

        def tictak_client_tasks(self, sampled, num_to_run):
            """The cohort's fastest ``num_to_run`` report; the others straggle (the fixed inputs)."""
            order = sorted(sampled, key=lambda c: durations[c])
            clock = {c: {"computation": durations[c], "communication": 0.0} for c in sampled}
            return order[:num_to_run], order[num_to_run:], clock, durations[order[num_to_run - 1]], []

        def log_train_result(self, avg_loss):
            pass

        def broadcast_aggregator_events(self, event):
            pass

        def update_weight_aggregation(self, results):
            pass

    agg = StubAggregator()
    cases = []
    for r in range(ROUNDS):
        recording.calls = []
        agg.round_completion_handler()  # stragglers of round r-1 get this round's mean; then select round r
        launched = [int(c) for c in agg.sampled_participants]
        reporters = sorted(int(c) for c in launched if c not in agg.round_stragglers)
        case = {
            "round": r, "available": world["available"][r], "launched": launched, "reporters": reporters,
            "oort_called": bool(manager.count > 1), "choice_calls": list(recording.calls),
            "exploit_clients": [int(c) for c in selector.exploitClients],
            "explore_clients": [int(c) for c in selector.exploreClients],
            "exploration": float(selector.exploration), "round_threshold": float(selector.round_threshold),
            "prefer_duration": float(selector.round_prefer_duration), "training_round": int(selector.training_round),
            "exploit_util_history": [float(u) for u in selector.exploitUtilHistory],
            "arms_at_selection": arms_of(selector),
        }
        for c in reporters:  # FedScale: each report registers its utility and this round's stamp
            loss = world["losses"][r][c]
            agg.client_completion_handler({"client_id": c, "utility": float(sizes[c] * loss), "moving_loss": loss,
                                           "update_weight": None})
        round_index["r"] = r
        cases.append(case)
    recording.calls = []
    agg.round_completion_handler()  # registers the last round's stragglers (and selects a round not recorded)
    final = arms_of(selector)
    write_record(args.out, mechanism="oort", repo="SymbioticLab/FedScale", commit=commit_of(args.checkout),
                 source="thirdparty/oort/oort.py: _training_selector; fedscale/cloud/client_manager.py: ClientManager;"
                        " fedscale/cloud/aggregation/aggregator.py: Aggregator.round_completion_handler, "
                        "client_completion_handler, select_participants",
                 cases=[{"inputs": world, "oort_args": OORT_ARGS, "K": K, "overcommitment": OC,
                         "init_reward_cap": fs_args.local_steps * fs_args.batch_size,
                         "rounds": cases, "final_arms": final}])


if __name__ == "__main__":
    main()
