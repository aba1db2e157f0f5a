"""The Ray executor's ``partial_sums``: reports stay on the actors, each sends one weighted sum per chunk.

Only the sum's float order changes, so the stated tolerance (docs/cluster.md) is the one the vectorized
executor keeps against sequential: every float of every row and the final model within rtol 1e-5,
atol 1e-6, and everything that is not a float (cohorts, counts, bytes) equal. Where a component reads
each report, the option is off, the run says why, and the numbers are bitwise sequential's.
"""

import copy
import dataclasses

import numpy as np
import pytest
import torch
from test_executor_equivalence import assert_close, assert_identical, config, reference, run_with

from turnout.algorithms.base import Algorithm
from turnout.algorithms.fedavg import FedAvg, FedAvgConfig
from turnout.core.records import ClientBatch, HeldReports, Reports
from turnout.executors.parallel import WorkerError
from turnout.executors.ray_actors import RayExecutor, RayExecutorConfig, RayHeldReports
from turnout.executors.sequential import SequentialExecutor
from turnout.sim.catalogue import registries
from turnout.sim.engine import Simulation

ray = pytest.importorskip("ray")

#: a world where sums matter: 40 clients, 12 a round, 6 rounds, so every actor holds several chunks' rows
RAW = {**config("fedavg"), "rounds": 6, "data": {"name": "synthetic", "num_clients": 40, "min_samples": 3},
       "selector": {"name": "uniform", "clients_per_round": 12}}


def raw_with(**blocks):
    raw = copy.deepcopy(RAW)
    raw.update(copy.deepcopy(blocks))
    return raw


@pytest.fixture(scope="module")
def summing_executor(local_ray):
    """Two actors, three chunks each a round, summing where they trained."""
    ex = RayExecutor(RayExecutorConfig(actors=2, chunks_per_actor=3, partial_sums=True))
    yield ex
    ex.close()


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "fedyogi"])
def test_partial_sums_are_within_the_stated_tolerance_of_sequential(algorithm, simulate, build_simulation,
                                                                    summing_executor):
    raw = raw_with(algorithm={"name": algorithm, "server_momentum": 0.5} if algorithm == "fedavg"
                   else {"name": algorithm})
    summed, exact = run_with(build_simulation, raw, summing_executor), reference(simulate, raw)
    assert summed.summary["partial_sums"] is True and "partial_sums_off_because" not in summed.summary
    assert_close(summed, exact, rtol=1e-5, atol=1e-6)


def test_partial_sums_are_deterministic_and_a_lost_holder_changes_nothing(build_simulation, summing_executor,
                                                                           monkeypatch):
    first = run_with(build_simulation, RAW, summing_executor)
    real = RayHeldReports.weighted_sum
    killed = []

    def lose_a_holder_first(self, rows, weights):
        if not killed:  # the actor holding chunk 0's reports dies after training, before it sums them
            slot, actor = self.holders[0]
            ray.kill(actor, no_restart=True)
            killed.append(slot)
        return real(self, rows, weights)

    monkeypatch.setattr(RayHeldReports, "weighted_sum", lose_a_holder_first)
    lost_before = summing_executor._lost
    again = run_with(build_simulation, RAW, summing_executor)
    assert killed and summing_executor._lost == lost_before + 1
    assert_identical(again, first)  # chunk 0 trained again on a live actor: the same sums, bitwise


def test_a_run_with_partial_sums_resumes_bit_for_bit(build_simulation, summing_executor):
    """Nothing held outlives its round, and the sums' order is the chunks': a checkpoint between rounds resumes
    to the same bits (late reports in flight, read back exactly, go through the checkpoint)."""
    raw = raw_with(round_mode={"name": "deadline", "deadline_s": 0.1})
    full = run_with(build_simulation, raw, summing_executor)
    first = build_simulation(raw, components={"executor": summing_executor})
    head = first.advance(until=3)
    state = first.state_dict()
    second = build_simulation(raw, components={"executor": summing_executor})
    second.load_state_dict(state)
    tail = second.advance()
    second.finish()
    assert_identical(second.result(head + tail), full)


def test_late_reports_are_read_back_exactly_and_parked(simulate, build_simulation, summing_executor):
    raw = raw_with(round_mode={"name": "deadline", "deadline_s": 0.1})
    summed, exact = run_with(build_simulation, raw, summing_executor), reference(simulate, raw)
    assert sum(r["n_late"] for r in exact.rounds) > 0  # reports were parked, so rows were read back
    assert summed.summary["partial_sums"] is True
    assert_close(summed, exact, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("blocks,because", [
    ({"algorithm": {"name": "scaffold"}}, "algorithm scaffold reads each report, not only their weighted sum"),
    ({"compressor": {"name": "topk"}}, "compressor topk encodes each upload"),
    ({"selector": {"name": "fedgs", "clients_per_round": 12, "graph": "update_cosine"}},
     "selector fedgs reads each upload"),
])
def test_where_a_component_reads_each_report_the_sums_are_off_and_say_why(blocks, because, simulate,
                                                                          build_simulation, summing_executor):
    raw = raw_with(**blocks)
    result = run_with(build_simulation, raw, summing_executor)
    assert result.summary["partial_sums"] is False
    assert result.summary["partial_sums_off_because"] == because
    assert_identical(result, reference(simulate, raw))


def test_a_client_whose_report_is_not_finite_is_rejected_where_it_is_held(build_simulation, summing_executor):
    """Client 3's rows hold a NaN: its report is NaN on the actor, which says so, and it never enters a sum."""
    built = build_simulation(RAW)
    exp, data = built.exp, built.data  # the session's dataset stays as it is; this test trains on a poisoned copy
    x = data.x_train.copy()
    x[data.train_offsets[3]:data.train_offsets[4]] = np.nan
    poisoned = dataclasses.replace(data, x_train=x)

    def results(executor):
        sim = Simulation(exp, poisoned, 0, components={"executor": executor})
        rows = sim.advance()
        sim.finish()
        return sim.result(rows)

    summed, exact = results(summing_executor), results(SequentialExecutor(SequentialExecutor.Config()))
    assert summed.summary["partial_sums"] is True
    assert sum(r["n_rejected"] for r in exact.rounds) > 0
    assert_close(summed, exact, rtol=1e-5, atol=1e-6)  # n_rejected and every other count equal, floats close
    assert torch.isfinite(summed.final_params).all()


def test_reports_asked_for_after_their_round_are_one_line_not_a_wrong_sum(build_simulation, summing_executor):
    sim = build_simulation(RAW, components={"executor": summing_executor})
    clients = np.arange(6)

    def batch(r):
        return ClientBatch(r, clients, np.full(6, 2), 0.05, sim.params, sim.buffers, 0, hold_reports=True)

    first = summing_executor.run(batch(0), sim.algorithm, sim.trainer, sim.data).updates
    assert isinstance(first, RayHeldReports) and first.finite().all()
    exact = first.rows(np.ones(6, bool))
    torch.testing.assert_close(first.weighted_sum(clients, np.full(6, 0.5, np.float32)), 0.5 * exact.sum(0))
    summing_executor.run(batch(1), sim.algorithm, sim.trainer, sim.data)  # the actors move on to round 1
    with pytest.raises(WorkerError, match=r"^executor.ray: the actor holding round 0's reports of clients \[.*\] "
                                          r"failed to send them \(weighted_sum\): RuntimeError: actor holds the "
                                          r"reports of round \(\d+, 1\), was asked for rows \[.*\] of round "
                                          r"\(\d+, 0\)$"):
        first.weighted_sum(clients, np.ones(6, np.float32))


class DoubledDelta(FedAvg):
    """Reads only the weighted mean (as FedAvg declares) but makes its reports itself: the actors cannot make them."""

    def client_update(self, client, start, end, grad_sum=None):
        return 2 * (end - start)


def test_a_rule_that_makes_its_own_reports_keeps_them_whatever_it_declares(build_simulation, summing_executor):
    def results(executor):
        sim = build_simulation(RAW, components={"executor": executor, "algorithm": lambda ctx: DoubledDelta(
            FedAvgConfig(), ctx.algorithm_context)})
        rows = sim.advance()
        sim.finish()
        return sim.result(rows)

    summed, exact = results(summing_executor), results(SequentialExecutor(SequentialExecutor.Config()))
    assert summed.summary["partial_sums"] is False
    assert summed.summary["partial_sums_off_because"] == ("algorithm fedavg makes or prices its reports itself "
                                                          "(client_update, upload_bytes)")
    assert_identical(summed, exact)


def test_every_rule_that_reads_only_the_mean_keeps_the_default_hooks():
    """What the actors make of each client (end − start) is the rule's own report only with the default hooks."""
    declared = {name for name in registries()["algorithm"].names()
                if not registries()["algorithm"].get(name).reads_each_report}
    assert declared == {"fedavg", "fedprox", "fedadam", "fedyogi"}
    for name in declared:
        cls = registries()["algorithm"].get(name)
        assert cls.client_update is Algorithm.client_update and cls.upload_bytes is Algorithm.upload_bytes, name


def test_a_resume_to_or_from_partial_sums_is_not_called_bitwise():
    """``turnout resume --set executor...`` warns when the numbers may move (the resume's executor check)."""
    assert RayExecutor.bitwise_with({"name": "ray", "actors": 2})
    assert not RayExecutor.bitwise_with({"name": "ray", "actors": 2, "partial_sums": True})
    assert SequentialExecutor.bitwise_with({"name": "sequential"})


def test_by_default_reports_come_back_and_nothing_is_said(build_simulation, local_ray):
    ex = RayExecutor(RayExecutorConfig(actors=2))
    try:
        result = run_with(build_simulation, RAW, ex)
    finally:
        ex.close()
    assert "partial_sums" not in result.summary


class ListedRows(HeldReports):
    """Held reports that are a tensor here, summed row by row in order: the engine's contract, without Ray."""

    def __init__(self, updates: torch.Tensor):
        super().__init__(updates.shape[0], updates.shape[1], updates.dtype)
        self.updates = updates

    def finite(self):
        return torch.isfinite(self.updates).all(1).numpy()

    def rows(self, mask):
        return self.updates[torch.from_numpy(mask)]

    def weighted_sum(self, rows, weights):
        total = torch.zeros(self.dim)
        for row, w in zip(rows, weights.tolist()):
            total.add_(self.updates[row], alpha=w)
        return total


@pytest.mark.parametrize("normalize", [True, False])
def test_a_weighted_mean_over_held_and_dense_reports_is_the_dense_one(normalize):
    g = torch.Generator().manual_seed(3)
    held, stale = torch.randn(5, 7, generator=g), torch.randn(2, 7, generator=g)
    taken = np.array([0, 2, 3])
    weights = np.array([1.0, 2.0, 0.5, 3.0, 1.5])
    kwargs = dict(clients=np.arange(5), weights=weights, normalize=normalize, n_samples=np.ones(5),
                  losses=np.zeros(5), staleness=np.array([0, 0, 0, 2, 1]))
    dense = Reports(updates=torch.cat([held[taken], stale]), **kwargs).weighted_mean()
    mixed = Reports(updates=stale, held=(ListedRows(held), taken), **kwargs).weighted_mean()
    torch.testing.assert_close(mixed, dense, rtol=1e-6, atol=1e-7)
    expected = (weights / (weights.sum() if normalize else 1.0)) @ torch.cat([held[taken], stale]).double().numpy()
    np.testing.assert_allclose(mixed.numpy(), expected, rtol=1e-5, atol=1e-6)
