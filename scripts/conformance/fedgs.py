"""Record FedGS's (and its MD-sampling baseline's) outputs from the authors' code (``WwZzz/FedGS``).

Drives, round after round with the state carried over, the servers of ``algorithm/oracle_fedgs.py``,
``update_fedgs.py``, ``logit_fedgs.py`` and ``mdsample.py`` on small fixed populations, under the
availability modes of ``utils/systemic_simulator.py``, exactly as their ``BasicServer.run`` loop calls
them (``current_round = t``; ``iterate(t)``): FedGS builds its 3DG in round 0 and then samples with
Gurobi each round; MD sampling draws with replacement ∝ data size from the active clients. Recorded
per case: the clients' inputs (label lists, data sizes, local optima or local models), the 3DG
(normalised similarity, edges, shortest-path matrix), and per round the activity rates, the uniforms
each client's ``is_active`` drew, the active set, the selected clients, the Gurobi objective, the
best objective of any *other* set (a MIPGap-0 re-solve with the chosen set cut off, to show the
optimum is unique) and the sampling counts; for MD sampling the uniforms ``np.random.choice`` used.

Only framework objects are stubbed: the model (a one-layer ``FModule``), the calculator (a test-set
loader), ``communicate`` (returns preset local models, still wrapped by the simulator's
``with_incomplete_update`` so the seed sequence advances as in a real run), and the clients
(``BasicClient`` instances with data lists set directly). Spies (which call the original) record the
simulator's uniforms, the log-normal rates, the logit noise and the Gurobi model.

The authors' code needs ``gurobipy`` (its pip wheel carries a size-limited licence, enough here) and
``ujson``, which turnout's venv lacks; install them in a separate venv that also sees turnout's packages
(torch, numpy, networkx). Wheels before 13 no longer start (their licences have expired) and 13 dropped
the ``addConstr(lhs=, sense=, rhs=)`` form the authors use, so the recorder's Gurobi model maps that one
call to ``addLConstr`` (the same linear constraint)::

    python3.11 -m venv /tmp/fedgs-venv
    /tmp/fedgs-venv/bin/pip install gurobipy==13.0.3 ujson
    echo <turnout venv>/lib/python3.11/site-packages > /tmp/fedgs-venv/lib/python3.11/site-packages/turnout-venv.pth
    /tmp/fedgs-venv/bin/python scripts/conformance/fedgs.py --checkout /path/to/FedGS

It writes ``tests/conformance/records/fedgs.json`` and ``tests/conformance/records/mdsample.json`` (about
90 s; the same bytes on every run; recorded with gurobipy 13.0.3, torch 2.13, numpy 2.4).
"""

from __future__ import annotations

import copy
import sys
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit_of, parse_args, write_record  # noqa: E402

REPO = "WwZzz/FedGS"
NUM_CLASSES = 10


# ------------------------------------------------------------------------------------------------
# inputs
def label_population(seed: int, n: int, conc: float = 0.5):
    """Data sizes ~ lognormal, label mixes ~ Dirichlet(conc): each client's list of training labels."""
    g = np.random.default_rng(seed)
    sizes = np.maximum(g.lognormal(np.log(60.0), 0.8, n).astype(np.int64), 8)
    labels = []
    for k in sizes:
        mix = g.dirichlet(np.full(NUM_CLASSES, conc))
        labels.append([int(y) for y in g.choice(NUM_CLASSES, size=int(k), p=mix)])
    return labels


def label_counts(labels):
    """The record keeps each client's label histogram (row order of the labels never matters to the code)."""
    return [np.bincount(lb, minlength=NUM_CLASSES) for lb in labels]


class LabelledList(list):
    """A client's ``train_data``: a list of ``(x, y)`` rows; ``optimal_model`` for the synthetic task."""

    optimal_model = None


def make_data(labels, optimal=None):
    data = LabelledList([(0.0, y) for y in labels])
    if optimal is not None:
        data.optimal_model = optimal
    return data


# ------------------------------------------------------------------------------------------------
# framework stubs
def install_stubs(fmodule):
    class Tiny(fmodule.FModule):
        """The stub model: one linear layer 4 → 3 (parameters: weight (3, 4), then bias (3,))."""

        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)

    class Calculator:
        """``TaskCalculator`` stub: only the test-set loader the logit features read."""

        def __init__(self, device, optimizer_name="SGD"):
            self.device = device

        def get_data_loader(self, data, batch_size=64):
            return iter([(data.x[i:i + batch_size], data.y[i:i + batch_size]) for i in range(0, len(data), batch_size)])

    fmodule.TaskCalculator = Calculator
    fmodule.Model = Tiny
    return Tiny


def tiny_from_flat(Tiny, flat):
    m = Tiny()
    with torch.no_grad():
        m.fc.weight.copy_(torch.as_tensor(flat[:12], dtype=torch.float32).view(3, 4))
        m.fc.bias.copy_(torch.as_tensor(flat[12:15], dtype=torch.float32))
    return m


def option_for(algorithm, task, mode, seed, proportion, rounds, alpha=None):
    return {"task": task, "algorithm": algorithm, "eval_interval": 1, "num_threads": 1, "optimizer": "SGD",
            "num_rounds": rounds, "learning_rate_decay": 0.998, "proportion": proportion, "lr_scheduler": -1,
            "learning_rate": 0.1, "sample": "md", "due_active": -1, "due_response": -1, "aggregate": "uniform",
            "algo_para": None if alpha is None else [alpha], "seed": seed, "network_config": mode,
            "computing_config": "ideal"}


def make_clients(fedbase, datas, valid=None):
    clients = []
    for i, d in enumerate(datas):
        c = fedbase.BasicClient.__new__(fedbase.BasicClient)
        c.name, c.train_data, c.valid_data, c.datavol = f"c{i}", d, [] if valid is None else valid[i], len(d)
        c.num_steps = 1
        clients.append(c)
    return clients


def test_set(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(200, 4, generator=g) * 1.5 + 0.3
    y = torch.arange(200) % NUM_CLASSES
    return x, y


class LabelTestData:
    """What the simulator reads from ``server.test_data``: rows whose last entry is the label; the logit
    feature reads it through the calculator's loader as ``(x, y)``."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return (self.x[i], int(self.y[i]))


# ------------------------------------------------------------------------------------------------
class Spies:
    """Record what the authors' code drew and solved, calling the originals."""

    def __init__(self, ss, fedbase, grb):
        self.ss, self.fedbase, self.grb = ss, fedbase, grb
        self.uniforms: list[list[float]] = []  # per is_active sweep
        self.lognormal: list[tuple] = []
        self.models: list = []
        self.noise: list = []
        orig_active = fedbase.BasicClient.is_active
        spies = self

        class Rand:
            def __init__(self, rs):
                self.rs = rs

            def rand(self):
                u = self.rs.rand()
                spies._current.append(float(u))
                return u

        def is_active(client, random_module=np.random):
            if client is client.server.clients[0]:
                spies._current = []
                spies.uniforms.append(spies._current)
            return orig_active(client, Rand(random_module))

        self._patches = [(fedbase.BasicClient, "is_active", is_active)]
        orig_lognormal = np.random.lognormal

        def lognormal(mean=0.0, sigma=1.0, size=None):
            v = orig_lognormal(mean, sigma, size)
            spies.lognormal.append((float(mean), float(sigma), float(v)))
            return v

        self._patches.append((np.random, "lognormal", lognormal))
        class CompatModel(grb.Model):
            """gurobipy ≥ 12 dropped ``addConstr(lhs=, sense=, rhs=)``, which the authors call (and the
            licences of older wheels have expired): route that call to ``addLConstr``, the same constraint."""

            def addConstr(self, constr=None, name="", *, lhs=None, sense=None, rhs=None):  # noqa: N802
                if lhs is not None:
                    return self.addLConstr(lhs, sense, rhs, name)
                return super().addConstr(constr, name)

        def model(*a, **k):
            m = CompatModel(*a, **k)
            spies.models.append(m)
            return m

        self._patches.append((grb, "Model", model))
        orig_normal = torch.normal

        def normal(*a, **k):
            out = orig_normal(*a, **k)
            spies.noise.append({"mean": float(k["mean"]), "std": float(k["std"]), "noise": out.clone()})
            return out

        self._patches.append((torch, "normal", normal))
        self._saved = [(obj, name, getattr(obj, name)) for obj, name, _ in self._patches]

    def __enter__(self):
        for obj, name, f in self._patches:
            setattr(obj, name, f)
        return self

    def __exit__(self, *exc):
        for obj, name, f in self._saved:
            setattr(obj, name, f)


def reset_simulator(ss):
    """``init_network_mode`` only reassigns ``update_activity`` for SLN and YC: reset the module's no-op
    between cases so one case's schedule does not leak into the next (one process drives them all)."""
    ss.update_activity = ss.update_activity_noop


def gurobi_round(spies, grb, before, m_size):
    """The Gurobi model(s) of one ``sample`` call: objective, status, gap, and the best other set."""
    new = spies.models[before:]
    if not new:
        return {"solved": False}
    m = new[-1]
    xs = [v.X for v in m.getVars()]
    out = {"solved": True, "objective": m.ObjVal, "status": m.Status, "mip_gap": m.MIPGap,
           "fractionality": max(abs(x - round(x)) for x in xs)}  # the code keeps int(x): 0.9999 would drop a client
    chosen = [v for v, x in zip(m.getVars(), xs) if x > 0.5]
    if len(xs) > m_size:
        m.addConstr(grb.quicksum(chosen) <= m_size - 1)
        m.Params.MIPGap = 0.0
        m.optimize()
        out["second_objective"] = m.ObjVal if m.Status == grb.GRB.OPTIMAL else None
    return out


def run_fedgs(mods, name, variant, mode, alpha, seed, rounds, task="cifar10_cnum20", conc=0.5, n=20, proportion=0.2):
    ss, fedbase, fmodule, flw, grb, Tiny = (mods[k] for k in ("ss", "fedbase", "fmodule", "flw", "grb", "Tiny"))
    server_cls = mods[variant].Server
    flw.setup_seed(seed)
    reset_simulator(ss)
    labels = label_population(1000 + seed, n, conc)
    g = np.random.default_rng(2000 + seed)
    optimal = None
    if task.startswith("synthetic_regression"):
        # local optima (W_k, b_k) of a 6×10 + 10 linear model: a shared mean per client → cosines of both signs
        optimal = g.normal(g.normal(0, 0.5, n)[:, None], 1.0, (n, 70)).astype(np.float64)
    datas = [make_data(lb, None if optimal is None else optimal[i].reshape(7, 10).tolist())
             for i, lb in enumerate(labels)]
    clients = make_clients(fedbase, datas)
    tx, ty = test_set(seed)
    global_flat = torch.randn(15, generator=torch.Generator().manual_seed(3000 + seed))
    # local models after round 0: 4 groups around different directions plus noise
    centres = torch.randn(4, 15, generator=torch.Generator().manual_seed(4000 + seed))
    noise = torch.randn(n, 15, generator=torch.Generator().manual_seed(5000 + seed))
    local_flat = global_flat[None, :] + centres[torch.arange(n) % 4] + 0.35 * noise
    model = tiny_from_flat(Tiny, global_flat)
    local_models = [tiny_from_flat(Tiny, local_flat[i]) for i in range(n)]
    opt = option_for(variant, task, mode, seed, proportion, rounds, alpha)
    with Spies(ss, fedbase, grb) as spies:
        server = server_cls(opt, model, clients, test_data=LabelTestData(tx, ty))
        built = {}
        create_graph = server.create_graph_from_features

        def spy_graph(features, fsim=None):  # record the features the 3DG is built from
            built["features"] = [np.asarray(f, dtype=np.float64) for f in features]
            return create_graph(features, fsim)

        server.create_graph_from_features = spy_graph

        def communicate(self, selected):
            return {"model": [copy.deepcopy(local_models[c]) if self.current_round == 0 else copy.deepcopy(self.model)
                              for c in selected]}

        server.communicate = types.MethodType(ss.with_incomplete_update(communicate), server)
        ss.init_systemic_config(server, opt)
        rates_init = [float(getattr(c, "_qk", c.network_active_rate)) for c in clients]
        per_round = []
        for t in range(rounds + 1):
            server.current_round = t
            before_u, before_m = len(spies.uniforms), len(spies.models)
            server.iterate(t)
            if t == 0:
                continue
            sweeps = spies.uniforms[before_u:]
            active = [int(c) for c in server.active_clients]
            m_size = min(len(active), server.clients_per_round)
            per_round.append({
                "round": t, "rates": [float(c.network_active_rate) for c in clients],
                "uniforms": sweeps, "active": active,
                "selected": [int(c) for c in server.selected_clients],
                "counts": list(server.sample_frequency), "m": m_size,
                "gurobi": gurobi_round(spies, grb, before_m, m_size)})
        graph = np.array(server.graph, dtype=np.float64)
        np.fill_diagonal(graph, 0.0)
        adj = np.array(server.adj, dtype=np.float64)
        case = {
            "name": name, "variant": variant, "ftr": server.ftr, "mode": mode, "alpha": server.alpha,
            "seed": seed, "label_concentration": conc, "num_clients": n,
            "clients_per_round": server.clients_per_round, "rounds": rounds,
            "label_hist": label_counts(labels),
            "n_train": [len(d) for d in datas], "num_classes": NUM_CLASSES,
            "optimal": optimal, "rates_init": rates_init,
            "lognormal": [list(x) for x in spies.lognormal],
            "features": built["features"],
            "similarity": graph, "edges": np.isfinite(adj) & ~np.eye(n, dtype=bool),
            "distances": np.array(server.shortest_dist, dtype=np.float64), "per_round": per_round,
        }
        if variant != "oracle_fedgs":  # the round-0 local models the learned features come from
            case.update(global_params=global_flat, local_params=local_flat)
        if spies.noise:
            case["test_x"] = tx
            case["noise"] = {"mean": spies.noise[-1]["mean"], "std": spies.noise[-1]["std"],
                             "values": spies.noise[-1]["noise"]}
    return case


def run_md(mods, name, mode, seed, rounds, n=20, proportion=0.25):
    ss, fedbase, flw, grb, Tiny = (mods[k] for k in ("ss", "fedbase", "flw", "grb", "Tiny"))
    flw.setup_seed(seed)
    reset_simulator(ss)
    labels = label_population(1000 + seed, n)
    datas = [make_data(lb) for lb in labels]
    clients = make_clients(fedbase, datas)
    tx, ty = test_set(seed)
    model = tiny_from_flat(Tiny, torch.zeros(15))
    opt = option_for("mdsample", "cifar10_cnum20", mode, seed, proportion, rounds)
    with Spies(ss, fedbase, grb) as spies:
        server = mods["mdsample"].Server(opt, model, clients, test_data=LabelTestData(tx, ty))

        def communicate(self, selected):
            return {"model": [copy.deepcopy(self.model) for _ in selected]}

        server.communicate = types.MethodType(ss.with_incomplete_update(communicate), server)
        ss.init_systemic_config(server, opt)
        per_round = []
        for t in range(rounds + 1):
            server.current_round = t
            before_u = len(spies.uniforms)
            state = np.random.get_state()
            server.iterate(t)
            # np.random.choice(a, K, replace=True, p) reads K uniforms: replay them from a copy of the state,
            # and check the global generator advanced by exactly those K
            replay = np.random.RandomState()
            replay.set_state(state)
            u = replay.random_sample(server.clients_per_round)
            after, now = replay.get_state(), np.random.get_state()
            assert (after[1] == now[1]).all() and after[2:] == now[2:], "np.random.choice drew other than K uniforms"
            per_round.append({"round": t, "rates": [float(c.network_active_rate) for c in clients],
                              "uniforms": spies.uniforms[before_u:], "active": [int(c) for c in server.active_clients],
                              "choice_uniforms": u, "selected": [int(c) for c in server.selected_clients]})
    return {"name": name, "mode": mode, "seed": seed, "num_clients": n, "clients_per_round": server.clients_per_round,
            "rounds": rounds, "label_hist": label_counts(labels),
            "n_train": [len(d) for d in datas], "num_classes": NUM_CLASSES,
            "lognormal": [list(x) for x in spies.lognormal], "per_round": per_round}


def load(checkout: Path) -> dict:
    sys.path.insert(0, str(checkout))
    import algorithm.fedbase as fedbase
    import algorithm.logit_fedgs as logit_fedgs
    import algorithm.mdsample as mdsample
    import algorithm.oracle_fedgs as oracle_fedgs
    import algorithm.update_fedgs as update_fedgs
    import gurobipy as grb
    import utils.fflow as flw
    import utils.fmodule as fmodule
    import utils.systemic_simulator as ss
    ss.update_activity_noop = ss.update_activity
    Tiny = install_stubs(fmodule)
    return {"ss": ss, "fedbase": fedbase, "fmodule": fmodule, "flw": flw, "grb": grb, "Tiny": Tiny,
            "oracle_fedgs": oracle_fedgs, "update_fedgs": update_fedgs, "logit_fedgs": logit_fedgs,
            "mdsample": mdsample}


FEDGS_CASES = [
    # name, variant, availability mode, alpha, seed, rounds, task[, Dirichlet concentration of the label mixes]
    ("oracle_idl", "oracle_fedgs", "ideal", 1.0, 0, 12, "cifar10_cnum20"),
    ("oracle_sparse", "oracle_fedgs", "MoreDataFirst-0.7", 1.0, 14, 15, "cifar10_cnum20", 0.05),
    ("oracle_mdf", "oracle_fedgs", "MoreDataFirst-0.7", 0.5, 1, 15, "cifar10_cnum20"),
    ("oracle_ldf", "oracle_fedgs", "LessDataFirst-0.7", 2.0, 2, 15, "cifar10_cnum20"),
    ("oracle_ymf", "oracle_fedgs", "YMaxFirst-0.9", 1.0, 3, 15, "cifar10_cnum20"),
    ("oracle_yc", "oracle_fedgs", "YCycle-0.9", 5.0, 4, 30, "cifar10_cnum20"),
    ("oracle_ln", "oracle_fedgs", "LogNormal-0.5", 1.0, 5, 15, "cifar10_cnum20"),
    ("oracle_sln", "oracle_fedgs", "SinLogNormal-0.5", 1.0, 6, 26, "cifar10_cnum20"),
    ("oracle_alpha0", "oracle_fedgs", "MoreDataFirst-0.7", 0.0, 7, 12, "cifar10_cnum20"),
    ("oracle_synthetic", "oracle_fedgs", "LessDataFirst-0.7", 1.0, 8, 12, "synthetic_regression_cnum20"),
    ("update", "update_fedgs", "LogNormal-0.5", 1.0, 9, 12, "cifar10_cnum20"),
    ("logit", "logit_fedgs", "YMaxFirst-0.9", 1.0, 10, 12, "cifar10_cnum20"),
]
MD_CASES = [("md_ldf", "LessDataFirst-0.7", 11, 10), ("md_sln", "SinLogNormal-0.5", 12, 10),
            ("md_yc", "YCycle-0.9", 13, 12)]


def main(argv=None) -> None:
    args = parse_args("fedgs", REPO, argv)
    mods = load(args.checkout)
    commit = commit_of(args.checkout)
    cases = [run_fedgs(mods, *c) for c in FEDGS_CASES]
    write_record(args.out, mechanism="fedgs", repo=REPO, commit=commit, cases=cases,
                 source="algorithm/oracle_fedgs.py, update_fedgs.py, logit_fedgs.py: Server (iterate, sample, "
                        "get_client_feature, create_graph_from_features, create_adj_from_graph, floyd); "
                        "utils/systemic_simulator.py: init_network_mode, with_inactivity; "
                        "algorithm/fedbase.py: BasicClient.is_active")
    md_cases = [run_md(mods, *c) for c in MD_CASES]
    write_record(args.out.with_name("mdsample.json"), mechanism="mdsample", repo=REPO, commit=commit,
                 cases=md_cases, source="algorithm/mdsample.py: Server.sample; utils/systemic_simulator.py: "
                                        "init_network_mode, with_inactivity; algorithm/fedbase.py: BasicServer.iterate")


if __name__ == "__main__":
    main()
