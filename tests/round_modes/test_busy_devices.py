"""A device never runs two tasks at once, and no client's resource seconds exceed the time it was online.

The invariant is checked in every round mode (wait_all, deadline, over-commitment, async), with clients that go
offline in the middle of a task: a client still computing a task that will end with it going offline is busy
until that moment (docs/algorithms/asynchronous.md, "Lost clients"). Checked on small random worlds (hypothesis)
and on one hand-worked schedule per mode.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnout.availability.base import Availability
from turnout.config.base import NoOptions
from turnout.devices.base import DeviceModel
from turnout.runs.experiment import prepare
from turnout.selectors.base import Cohort, Selector
from turnout.sim.composition import expand
from turnout.sim.engine import Simulation
from turnout.sim.work import TrainedWork
from turnout.world.population import DeviceProfiles

EPS = 1e-9


class Sessions(Availability):
    """Client i is online during ``sessions[i]``, a list of ``[start, end)`` intervals in simulated seconds."""

    Config = NoOptions

    def __init__(self, sessions, world):
        super().__init__(None, world)
        self.sessions = sessions

    def _session(self, client: int, t: float):
        return next(((s, e) for s, e in self.sessions[client] if s <= t < e), None)

    def available(self, round, time_s):
        return np.array([self._session(c, time_s) is not None for c in range(self.num_clients)])

    def online_until(self, clients, round, time_s):
        return np.array([(self._session(int(c), time_s) or (time_s, time_s))[1] for c in clients], np.float64)

    def online_s(self, client: int) -> float:
        return float(sum(e - s for s, e in self.sessions[client]))


class Seconds(DeviceModel):
    """Client i computes a sample in ``per_sample[i]`` seconds; links so fast that bytes cost next to nothing."""

    def __init__(self, per_sample):
        self.per_sample = np.asarray(per_sample, np.float64)

    def profiles(self, num_clients, seed):
        return DeviceProfiles(self.per_sample[:num_clients], np.full(num_clients, 1e15), np.full(num_clients, 1e15))


class LowestFirst(Selector):
    """The lowest-numbered available clients, equal weights: a schedule that can be worked out by hand."""

    Config = NoOptions
    fills_free_slots = True

    def __init__(self, c, world):
        super().__init__(None, world)
        self.c = c

    def target(self):
        return self.c

    def select(self, ctx):
        clients = np.sort(ctx.available)[:ctx.launch]
        return Cohort(clients, np.ones(len(clients)), normalize=True, target=min(self.c, len(clients)))


class Tasks(TrainedWork):
    """The simulation, recording every task: (client, start, end) in simulated seconds."""

    def __init__(self):
        self.tasks: list[tuple[int, float, float]] = []

    def settled(self, sim, opened, trained, settled):
        t0 = opened.train_start_s
        self.tasks += [(int(c), t0, t0 + float(b)) for c, b in zip(opened.clients, settled.verdict.busy_s)]
        more = settled.refilled.launched  # launched between the open and the close (refill: arrival)
        self.tasks += [(int(c), float(s), float(s) + float(b)) for c, s, b in zip(more.clients, more.start_s,
                                                                                 more.busy_s)]


_DATA: dict[tuple[int, int], object] = {}  # the synthetic population of (n clients, seed), built once


def run_world(round_mode: dict, sessions, per_sample, *, c: int, rounds: int, algorithm="fedavg", executor=None,
              lowest_first=False, seed=0):
    n = len(sessions)
    raw = {"name": "busy", "seeds": [seed], "rounds": rounds,
           "data": {"name": "synthetic", "num_clients": n, "alpha": 0.5, "beta": 0.5},
           "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 1, "lr": 0.05},
           "selector": {"name": "uniform", "clients_per_round": c}, "round_mode": round_mode,
           "algorithm": algorithm if isinstance(algorithm, dict) else {"name": algorithm},
           "eval": {"every": rounds}, "output": {"progress": False, "plots": False},
           **({"executor": executor} if executor else {})}
    exp = expand(copy.deepcopy(raw))[0]
    if (n, seed) not in _DATA:
        _DATA[n, seed] = prepare([exp]).dataset_for(exp, seed)
    parts = {"devices": Seconds(per_sample), "availability": lambda ctx: Sessions(sessions, ctx.world)}
    if lowest_first:
        parts["selector"] = lambda ctx: LowestFirst(c, ctx.world)
    work = Tasks()
    sim = Simulation(exp, _DATA[n, seed], seed, components=parts, work=work)
    with sim:
        rows = sim.advance()
    return sim, rows, work.tasks


def violations(sim, tasks, sessions) -> list[str]:
    """Every breach of the invariant: overlapping tasks of one device, a task outside an online session,
    resource seconds above the time online."""
    out = []
    for client in range(len(sessions)):
        mine = sorted((s, e) for c, s, e in tasks if c == client)
        out += [f"client {client}: task [{s0}, {e0}) overlaps [{s1}, {e1})"
                for (s0, e0), (s1, e1) in zip(mine, mine[1:]) if s1 < e0 - EPS]
        out += [f"client {client}: task [{s}, {e}) outside its sessions {sessions[client]}" for s, e in mine
                if not any(a <= s + EPS and e <= b + EPS for a, b in sessions[client])]
        online = sim.availability.online_s(client)
        if sim.population.resource_s[client] > online + 1e-6:
            out.append(f"client {client}: resource_s {sim.population.resource_s[client]} > online {online}")
    return out


# ---- random worlds ---------------------------------------------------------------------------------------------
@st.composite
def worlds(draw, mode: str):
    """2–5 clients with tasks of 1–6 s and one to three online sessions each, most ending on a half second (so
    tasks are cut by a client going offline), and the round mode's own options."""
    n = draw(st.integers(2, 5))
    per_sample = [draw(st.integers(1, 6)) / 10 for _ in range(n)]  # 10 samples a task: 1 to 6 s
    sessions = []
    for _ in range(n):
        t, spans = float(draw(st.sampled_from([0.0, 0.0, 1.5]))), []
        for _ in range(draw(st.integers(1, 3))):
            on = draw(st.integers(1, 12)) + draw(st.sampled_from([0.5, 0.5, 0.0]))
            spans.append((t, t + on))
            t += on + draw(st.integers(1, 6))
        sessions.append(spans)
    c = draw(st.integers(1, n))
    rm = {"wait_all": lambda: {"name": "wait_all"},
          "deadline": lambda: {"name": "deadline", "deadline_s": draw(st.sampled_from([1.5, 2.0, 3.0])),
                               "keep_late": draw(st.booleans())},
          "over_commit": lambda: {"name": "over_commit", "oc": 2.0, "keep_stragglers": draw(st.booleans())},
          "async": lambda: {"name": "async", "buffer": draw(st.integers(1, c))},
          "async_arrival": lambda: {"name": "async", "buffer": draw(st.integers(1, c)), "refill": "arrival"}}[mode]()
    return rm, sessions, per_sample, c


#: the synchronous modes' share of the fix is held back until the REFL pages it moves are regenerated with it
#: (docs/algorithms/asynchronous.md, "Lost clients"): strict xfail, so the day the engine holds them busy these
#: tests fail as "unexpectedly passing" and are switched back on
MODES = ["wait_all", "deadline", "over_commit", "async", "async_arrival"]


@pytest.mark.parametrize("mode", MODES)
def test_no_device_runs_two_tasks_at_once_in_random_worlds(mode):
    """20 worlds a mode, 8 rounds each (FedBuff under async, FedAvg otherwise)."""

    @settings(max_examples=20, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(worlds(mode))
    def holds(world):
        rm, sessions, per_sample, c = world
        sim, _, tasks = run_world(rm, sessions, per_sample, c=c, rounds=8,
                                  algorithm="fedbuff" if mode.startswith("async") else "fedavg")
        assert violations(sim, tasks, sessions) == []

    holds()


def test_refilling_at_arrivals_keeps_devices_single_tasked_on_the_parallel_executor_in_random_worlds():
    """4 worlds, 8 rounds each: the parallel executor launches the same tasks as the sequential one, and none twice."""

    @settings(max_examples=4, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(worlds("async_arrival"))
    def holds(world):
        rm, sessions, per_sample, c = world
        sim, rows, tasks = run_world(rm, sessions, per_sample, c=c, rounds=8, algorithm="fedbuff",
                                     executor={"name": "parallel", "workers": 2})
        _, seq_rows, seq_tasks = run_world(rm, sessions, per_sample, c=c, rounds=8, algorithm="fedbuff")
        assert violations(sim, tasks, sessions) == [] and tasks == seq_tasks
        assert repr(rows) == repr(seq_rows)

    holds()


@pytest.mark.parametrize("round_mode", [
    {"name": "async", "buffer": 1}, {"name": "async", "buffer": 2, "refill": "arrival"},
    {"name": "deadline", "deadline_s": 2.5},
    {"name": "over_commit", "oc": 2.0, "keep_stragglers": True}])
def test_the_parallel_executor_keeps_devices_single_tasked(round_mode):
    algorithm = "fedbuff" if round_mode["name"] == "async" else "fedavg"
    sim, rows, tasks = run_world(round_mode, LOSE_ZERO, PER_SAMPLE, c=2, rounds=6, algorithm=algorithm,
                                 executor={"name": "parallel", "workers": 2})
    seq, seq_rows, seq_tasks = run_world(round_mode, LOSE_ZERO, PER_SAMPLE, c=2, rounds=6, algorithm=algorithm)
    assert violations(sim, tasks, LOSE_ZERO) == [] and tasks == seq_tasks
    assert [r["sim_time_s"] for r in rows] == [r["sim_time_s"] for r in seq_rows]


# ---- hand-worked schedules ---------------------------------------------------------------------------------------
# Three clients whose tasks take 5, 2 and 3 s (10 samples at 0.5, 0.2, 0.3 s); client 0 is online until 3.5 s, then
# offline until 100 s; clients 1 and 2 are always online (to 1000 s). Two clients at once, the lowest-numbered free
# ones. Client 0's first task (0 → 5 s) ends with it going offline at 3.5 s: it is busy, then lost, at 3.5 s.
PER_SAMPLE = [0.5, 0.2, 0.3]
LOSE_ZERO = [[(0.0, 3.5), (100.0, 1000.0)], [(0.0, 1000.0)], [(0.0, 1000.0)]]


def hand_run(round_mode, rounds, algorithm="fedavg"):
    sim, rows, tasks = run_world(round_mode, LOSE_ZERO, PER_SAMPLE, c=2, rounds=rounds, algorithm=algorithm,
                                 lowest_first=True)
    return sim, rows, sorted((c, round(s, 9), round(e, 9)) for c, s, e in tasks)  # links cost ~1e-13 s


def test_async_a_client_lost_mid_task_holds_its_slot_until_it_goes_offline():
    """FedBuff, K = 1, C = 2.
    t = 0: launch 0 (lost at 3.5) and 1 (arrives 2);  update at 2 (client 1, τ 0).
    t = 2: 0 is still computing: one slot free → launch 1 (arrives 4);  update at 4 (1, τ 0).
    t = 4: 0 went offline at 3.5: its slot is free, it is offline → launch 1 (→ 6) and 2 (→ 7);  update at 6 (1, τ 0).
    t = 6: launch 1 (→ 8);  update at 7 (2, τ 1).   t = 7: launch 2 (→ 10);  update at 8 (1, τ 1)."""
    sim, rows, tasks = hand_run({"name": "async", "buffer": 1}, 5, algorithm="fedbuff")
    assert [r["sim_time_s"] for r in rows] == pytest.approx([2.0, 4.0, 6.0, 7.0, 8.0])
    assert [r["staleness_max"] for r in rows] == [0, 0, 0, 1, 1]
    assert tasks == [(0, 0.0, 3.5), (1, 0.0, 2.0), (1, 2.0, 4.0), (1, 4.0, 6.0), (1, 6.0, 8.0),
                     (2, 4.0, 7.0), (2, 7.0, 10.0)]
    assert sim.population.times_selected.tolist() == [1, 4, 2]
    assert sim.population.resource_s.tolist() == pytest.approx([3.5, 8.0, 6.0])  # client 0: online 3.5 s of 3.5
    assert sim.population.wasted_s[0] == pytest.approx(3.5)
    assert violations(sim, tasks, LOSE_ZERO) == []


def test_deadline_a_late_lost_client_is_not_launched_again_while_it_computes():
    """Deadline 2.5 s, late reports kept (REFL's SAA), C = 2.
    t = 0: launch 0 (lost at 3.5) and 1 (on time at 2);  the round closes at 2.5.
    t = 2.5: 0 is busy until 3.5 → launch 1 (on time at 4.5) and 2 (3 s: late, arrives at 5.5);  closes at 5.
    t = 5: 0 is offline, 2 is busy (late) → launch 1 alone (on time at 7);  closes at 7.5 (2's late report in).
    t = 7.5: launch 1 (on time at 9.5) and 2 (late, 10.5);  closes at 10."""
    sim, rows, tasks = hand_run({"name": "deadline", "deadline_s": 2.5}, 4)
    assert [r["sim_time_s"] for r in rows] == pytest.approx([2.5, 5.0, 7.5, 10.0])
    assert tasks == [(0, 0.0, 3.5), (1, 0.0, 2.0), (1, 2.5, 4.5), (1, 5.0, 7.0), (1, 7.5, 9.5), (2, 2.5, 5.5),
                     (2, 7.5, 10.5)]
    assert sim.population.times_selected.tolist() == [1, 4, 2]
    assert sim.population.resource_s.tolist() == pytest.approx([3.5, 8.0, 6.0])
    assert violations(sim, tasks, LOSE_ZERO) == []


def test_over_commit_keeping_stragglers_a_lost_client_stays_busy_until_it_goes_offline():
    """Over-commitment ×1.5 of K = 2 → 3 launched, K = 2 aggregated, stragglers kept.
    t = 0: launch 0 (lost at 3.5), 1 (2 s) and 2 (3 s): the 2nd report (client 2) closes the round at 3.
    t = 3: 0 is busy until 3.5 → launch 1 and 2: the round closes at 6 (2's report).
    t = 6: 0 is offline → launch 1 and 2 again: closes at 9."""
    sim, rows, tasks = hand_run({"name": "over_commit", "oc": 1.5, "keep_stragglers": True}, 3)
    assert [r["sim_time_s"] for r in rows] == pytest.approx([3.0, 6.0, 9.0])
    assert tasks == [(0, 0.0, 3.5), (1, 0.0, 2.0), (1, 3.0, 5.0), (1, 6.0, 8.0),
                     (2, 0.0, 3.0), (2, 3.0, 6.0), (2, 6.0, 9.0)]
    assert sim.population.resource_s.tolist() == pytest.approx([3.5, 6.0, 9.0])
    assert violations(sim, tasks, LOSE_ZERO) == []


def test_wait_all_waits_for_the_lost_client_so_it_is_never_busy_twice():
    """Wait for all, C = 2. t = 0: launch 0 (lost at 3.5) and 1 (2 s): the server waits until it loses 0, at 3.5.
    t = 3.5: 0 is offline → 1 (→ 5.5) and 2 (→ 6.5): closes at 6.5.  t = 6.5: 1 and 2 again: closes at 9.5."""
    sim, rows, tasks = hand_run({"name": "wait_all"}, 3)
    assert [r["sim_time_s"] for r in rows] == pytest.approx([3.5, 6.5, 9.5])
    assert tasks == [(0, 0.0, 3.5), (1, 0.0, 2.0), (1, 3.5, 5.5), (1, 6.5, 8.5),
                     (2, 3.5, 6.5), (2, 6.5, 9.5)]
    assert sim.population.resource_s.tolist() == pytest.approx([3.5, 6.0, 6.0])
    assert violations(sim, tasks, LOSE_ZERO) == []
