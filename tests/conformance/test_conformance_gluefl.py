"""GlueFL conformance: turnout's ``sticky`` selector and ``gluefl`` compressor against the authors' code.

The record (``scripts/conformance/gluefl.py`` on a TCtower/GlueFL checkout) holds what the code did round
after round: who was online, the group, its draws, who ran, the weights, every client's gradient, upload and
residual, the server's step and the next shared mask. Here the same rounds go through turnout's components
in the engine's order — round mode launch count, ``select`` (fed the code's draws), compressor
``begin_round`` / ``encode_uploads``, ``settle_weights``, the reports' weighted sum, ``server_update``,
``observe`` — carrying their state over, and the outputs are compared: discrete ones exactly, floats within
the tolerances below. Paper and notes: ``docs/algorithms/gluefl.md``.

turnout gets the code's gradient (old − new) where it expects a model delta (new − old): top-k, the
masks and error compensation are sign-symmetric and linear, so both send the same values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from turnout.compressors.gluefl import GlueFLMaskShifting
from turnout.compressors.sparse import DictStore
from turnout.core.records import Reports, RoundFeedback, SelectionContext
from turnout.round_modes.over_commit import OverCommit
from turnout.selectors import sticky as sticky_module
from turnout.selectors.sticky import StickySelector
from turnout.world.context import WorldContext

# Floats: the code and turnout both compute in float32 (client: g + h̃/a, top-k, h̃ ← a·(g − sent); server: the
# weighted sum of ≤ 6 reports). They differ in where the scale is applied (the code stores a·h with a = N·ν,
# turnout ν·h) and in the order of the server's sum, so each value differs by a few float32 ulps per operation
# and per round the residual is carried (≤ 12): 12 rounds × ~4 ops × 6e-8 ≈ 3e-6 relative; rtol 1e-5. The absolute
# floor covers values that come out of a cancellation (g + h̃/a near 0): a few ulps of the O(10) terms.
RTOL, ATOL = 1e-5, 1e-5
# Weights: both float64, the same formula in another operation order.
WRTOL = 1e-12


def ints(line: str | None) -> np.ndarray:
    return np.array([int(v) for v in (line or "").split()], dtype=np.int64)


def vec(line: str) -> torch.Tensor:
    return torch.tensor([float(v) for v in line.split()], dtype=torch.float32)


def case(record: dict, name: str) -> dict:
    return next(c for c in record["cases"] if c["name"] == name)


class AuthorsDraw:
    """Stands in for a random stream: hands turnout the clients the authors' code drew, after checking that turnout
    draws as many, from the same pool (``None``: the code drew from a subset of turnout's pool)."""

    def __init__(self, draws):
        self.draws = list(draws)

    def choice(self, pool, size, replace=True):
        assert self.draws, "turnout drew more often than the authors' code"
        expected_pool, picked = self.draws.pop(0)
        pool = np.asarray(pool)
        assert not replace and size == len(picked), (size, picked)
        if expected_pool is not None:
            assert sorted(pool.tolist()) == sorted(np.asarray(expected_pool).tolist())
        assert set(picked.tolist()) <= set(pool.tolist())
        return np.asarray(picked, dtype=np.int64)

    def done(self):
        assert not self.draws, f"turnout skipped draws the authors' code made: {self.draws}"


def replay_selection(rec: dict, monkeypatch, weights: str):
    """Every round of ``rec`` through turnout's sticky selector; yields (row, cohort, settled weights, aggregated).

    Asserts on the way what is exact: the launch count, the candidate split, the pools and the draws, the
    launched clients and their sticky flags, the group before and after each round.
    """
    p = rec["params"]
    n, k = p["N"], p["K"]
    world = WorldContext(num_clients=n, n_train=np.full(n, 100), label_hist=np.zeros((n, 2)), seed=0,
                         rounds=p["rounds"])
    sel = StickySelector(StickySelector.Config(
        clients_per_round=k, sticky_size=p["S"], sticky_per_round=k - p["change"], weights=weights,
        overcommit_weight=p["w_oc"] if p["w_oc"] >= 0 else None, rebalance="code", fill=False), world)
    mode = OverCommit(OverCommit.Config(oc=p["oc"], rounding="round"))
    for row in rec["rounds"]:
        r = row["round"] - 1  # the code counts rounds from 1
        online, before = ints(row["online"]), ints(row["group_before"])
        sticky_drawn, changed_drawn = ints(row["sticky_drawn"]), ints(row["changed_drawn"])
        assert sel.group.tolist() == sorted(before.tolist()), f"round {r}: sticky group"
        launch = mode.launch(sel.target(), 0)
        assert launch == row["n_tot"], f"round {r}: launch count"
        if len(before) == 0:  # initialisation: the code's group, in its shuffled order; the first ones launch
            draws = AuthorsDraw([(None, ints(row["group_order"]))])
        else:
            assert sel.candidate_counts(launch) == (launch - row["n_ch"], row["n_ch"]), f"round {r}: split"
            grouped = np.isin(online, before)
            draws = AuthorsDraw([(online[grouped], sticky_drawn), (online[~grouped], changed_drawn)])
        cohort = sel.select(SelectionContext(round=r, time_s=0.0, available=online, launch=launch, rng=draws,
                                             world=world, availability=None, probe_loss=None))
        draws.done()
        assert cohort.clients.tolist() == sorted(np.concatenate([sticky_drawn, changed_drawn]).tolist())
        assert cohort.tag("sticky").tolist() == np.isin(cohort.clients, sticky_drawn).tolist()
        aggregated = np.isin(cohort.clients, ints(row["aggregated"]))
        m = len(cohort.clients)
        fb = RoundFeedback(r, cohort.clients, aggregated, np.zeros(m, bool), np.ones(m), np.full(m, 20),
                           np.ones(m), np.ones(m), torch.zeros(m, 1), 1.0)
        settled = np.asarray(sel.settle_weights(cohort, fb), dtype=np.float64)
        removal = AuthorsDraw([(before, ints(row["removed"]))] if len(row["removed"]) else [])
        with monkeypatch.context() as mp:
            mp.setattr(sticky_module.rngmod, "stream", lambda *a, _draw=removal, **kw: _draw)
            sel.observe(fb)
        removal.done()
        assert sel.group.tolist() == ints(row["group_after"]).tolist(), f"round {r}: group after rebalancing"
        yield row, cohort, settled, aggregated


def by_client(cohort, values: np.ndarray, row: dict, key: str):
    """(turnout's values, the code's) for the round's aggregated clients, in the code's order."""
    pos = {int(c): i for i, c in enumerate(cohort.clients)}
    return (np.array([values[pos[c]] for c in row["clients"]]), np.asarray(row[key], dtype=np.float64))


# ---- (a) sticky sampling and the aggregation weights ---------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["masks", "overcommit"])
def test_conformance_gluefl_sticky_sampling_and_code_weights(load_record, monkeypatch, scenario):
    """Picks, sticky flags, group rebalancing and ``weights: code`` equal the code's, over every round."""
    rec = case(load_record("gluefl"), scenario)
    n, k = rec["params"]["N"], rec["params"]["K"]
    rounds = 0
    for row, cohort, settled, _agg in replay_selection(rec, monkeypatch, "code"):
        ours, code = by_client(cohort, settled, row, "weights")
        np.testing.assert_allclose(ours, code, rtol=WRTOL)
        if len(row["clients"]) == k:  # the client-side scale a_i = N·ν_i (fixed at selection in turnout, see below)
            ours, code = by_client(cohort, np.asarray(cohort.weights) * n, row, "scales")
            np.testing.assert_allclose(ours, code, rtol=WRTOL)
        rounds += 1
    assert rounds == rec["params"]["rounds"]


def test_conformance_gluefl_paper_weights_part_from_the_code_only_when_non_sticky_reports_are_lost(
        load_record, monkeypatch):
    """``weights: paper`` (default) = the code's while K − C non-sticky clients report; in the round where only one
    of the two did they part: turnout ν_s = (S/C_act)/N, ν_r = ((N − S)/R_act)/N (the actual counts), the code
    ν_s = (S/(K_run − (K − C)))/N, ν_r = ((N − S)/(K − C))/N."""
    rec = case(load_record("gluefl"), "overcommit")
    p = rec["params"]
    n, s, k, ch = p["N"], p["S"], p["K"], p["change"]
    parted = []
    for row, cohort, settled, _agg in replay_selection(rec, monkeypatch, "paper"):
        ours, code = by_client(cohort, settled, row, "weights")
        sticky = np.array(row["sticky"])
        c_act, r_act = int(sticky.sum()), int((~sticky).sum())
        if row["round"] == 1 or r_act == ch:
            np.testing.assert_allclose(ours, code, rtol=WRTOL)
            continue
        parted.append(row["round"])
        k_run = c_act + r_act
        np.testing.assert_allclose(ours[sticky], s / c_act / n, rtol=WRTOL)
        np.testing.assert_allclose(code[sticky], s / (k_run - ch) / n, rtol=WRTOL)
        np.testing.assert_allclose(ours[~sticky], (n - s) / r_act / n, rtol=WRTOL)
        np.testing.assert_allclose(code[~sticky], (n - s) / ch / n, rtol=WRTOL)
        # error compensation: turnout's compressor gets the weights fixed at selection (S/C), the code's client the
        # simulation's foreknowledge of who finishes (S/(K_run − (K − C)))
        planned, scale = by_client(cohort, np.asarray(cohort.weights) * n, row, "scales")
        np.testing.assert_allclose(planned[sticky], s / (k - ch), rtol=WRTOL)
        np.testing.assert_allclose(scale[sticky], s / (k_run - ch), rtol=WRTOL)
    assert parted == [4]  # the record's round 4 lost two of the three non-sticky candidates


@pytest.mark.parametrize("scenario", ["masks", "overcommit"])
def test_conformance_gluefl_equal_weights(load_record, monkeypatch, scenario):
    """``weights: equal`` (the paper's "GlueFL (Equal)") = the code's 1/tasks_round, every round."""
    rec = case(load_record("gluefl"), scenario)
    for row, _cohort, settled, agg in replay_selection(rec, monkeypatch, "equal"):
        np.testing.assert_allclose(settled[agg], row["equal_weight"], rtol=WRTOL)
        assert agg.sum() == len(row["clients"])


def test_conformance_gluefl_candidate_counts(load_record):
    """Launch count (round mode ``over_commit``, ``rounding: round``) and the sticky / non-sticky split for GlueFL's
    configurations; w_oc = −1 (unset) takes round((K − C)·n_tot/K), the code round((K − C)·oc): they part when K·oc
    is not a whole number (K = 6, oc = 1.25: 3 against 2)."""
    counts = case(load_record("gluefl"), "counts")["counts"]
    parted = []
    for c in counts:
        k, ch, oc, w = c["K"], c["change"], c["oc"], c["w_oc"]
        n_tot = OverCommit(OverCommit.Config(oc=oc, rounding="round")).launch_count(k)
        assert n_tot == c["n_tot"]
        n = 4 * k + 40
        world = WorldContext(num_clients=n, n_train=np.full(n, 100), label_hist=np.zeros((n, 2)))
        sel = StickySelector(StickySelector.Config(clients_per_round=k, sticky_per_round=k - ch, sticky_size=4 * k,
                                                   overcommit_weight=None if w < 0 else w), world)
        code = (c["n_sticky_drawn"], c["n_changed_drawn"])  # what the code drew (everyone online)
        assert code[1] == c["n_ch"]
        if sel.candidate_counts(n_tot) != code:
            parted.append((k, ch, oc, w, sel.candidate_counts(n_tot)[1], code[1]))
    assert parted == [(6, 2, 1.25, -1, 3, 2)]


# ---- (b) mask shifting and (c) re-scaled error compensation ---------------------------------------------------------
def replay_masks(rec: dict, monkeypatch):
    """The "masks" rounds through the selector and the compressor, in the engine's order; yields per round the
    code's row and turnout's (shared mask in, uploads, residuals, step, shared mask out, ν)."""
    p = rec["params"]
    layout = case_layout(rec)
    dim = sum(layout)
    store = DictStore(dim)
    comp = GlueFLMaskShifting(GlueFLMaskShifting.Config(ratio=p["q"], shared_ratio=p["q_shr"],
                                                         regenerate_every=p["I"]), dim, 0, store, layout=layout)
    for row, cohort, settled, agg in replay_selection(rec, monkeypatch, "paper"):
        r = row["round"] - 1
        assert agg.all()  # no over-commitment in this scenario: every launched client runs, as in the code
        assert comp.regenerates(r) == (row["round"] % p["I"] == 1)  # the code's "round % regenerate_epoch == 1"
        mask_in = comp.shared_mask.clone()
        pos = [int(np.flatnonzero(cohort.clients == c)[0]) for c in row["clients"]]
        updates = torch.zeros(len(cohort.clients), dim)
        updates[pos] = torch.stack([vec(u) for u in row["updates"]])
        comp.begin_round(r, cohort)
        decoded, _ = comp.encode_uploads(r, cohort.clients, updates)
        reports = Reports(clients=cohort.clients[agg], updates=decoded[torch.from_numpy(agg)], weights=settled[agg],
                          normalize=cohort.normalize, n_samples=np.full(agg.sum(), 20), losses=np.ones(agg.sum()),
                          staleness=np.zeros(agg.sum(), np.int64))
        step = comp.server_update(r, reports.weighted_mean()).sent
        residual = store.get(comp.residual_name, cohort.clients) * p["N"]  # turnout keeps ν·h, the code a·h = N·ν·h
        yield row, dict(mask_in=mask_in, uploads=decoded[pos], residuals=residual[pos], step=step,
                        mask_out=comp.shared_mask.clone(), nu=np.asarray(cohort.weights)[pos])


def case_layout(rec) -> list[int]:
    """The model's tensor sizes in state_dict order (per-tensor top-k needs them)."""
    return [size for _, size in rec["params"]["layout"]]


@pytest.fixture
def masks_case(load_record):
    return case(load_record("gluefl"), "masks")


def positions(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask).flatten().tolist()


def assert_same(ours: torch.Tensor, code: torch.Tensor, what: str) -> None:
    """Sent on the same positions (exactly), with the same values (within RTOL / ATOL)."""
    assert positions((ours != 0) ^ (code != 0)) == [], f"{what}: positions sent by one side only"
    np.testing.assert_allclose(ours.numpy(), code.numpy(), rtol=RTOL, atol=ATOL, err_msg=what)


def test_conformance_gluefl_mask_shifting_and_rescaled_error_compensation(masks_case, monkeypatch):
    """11 rounds (regeneration in the code's rounds 1, 6, 11): shared mask, every upload, residual, server step and
    next mask equal the code's; sticky clients reload residuals rescaled from 15 or 25/3 to 5 and back."""
    rec = masks_case
    rounds, reloads = 0, 0
    seen = set()
    for row, ours in replay_masks(rec, monkeypatch):
        if row["round"] == rec["params"]["tie_round"]:
            break  # the forced-mask tie: next test
        r = row["round"] - 1
        assert positions(ours["mask_in"]) == ints(row["mask_in"]).tolist(), f"round {r}: shared mask in"
        for i, c in enumerate(row["clients"]):
            assert_same(ours["uploads"][i], vec(row["uploads"][i]), f"round {r} client {c} upload")
            assert_same(ours["residuals"][i], vec(row["residuals"][i]), f"round {r} client {c} residual")
            reloads += bool(row["sticky"][i] and c in seen)
            seen.add(c)
        assert_same(ours["step"], vec(row["step"]), f"round {r}: server step")
        assert positions(ours["mask_out"]) == ints(row["mask_out"]).tolist(), f"round {r}: next shared mask"
        rounds += 1
    assert rounds == rec["params"]["tie_round"] - 1 and reloads >= 10  # the residual is carried, many times


def test_conformance_gluefl_forced_mask_tie_drops_a_shared_coordinate_in_the_code(masks_case, monkeypatch):
    """The code forces M by setting its positions to max|g| before top-q: where a tensor's k equals |M ∩ tensor|
    (head.bias: k = max(1, ⌊0.3·4⌋) = 1 = |M|) and max|g| lies outside M, |M| + 1 values tie and torch.topk drops
    one, here the shared coordinate. turnout sends M (the paper's rule). The record's last round has this once."""
    rec = masks_case
    *_, (row, ours) = replay_masks(rec, monkeypatch)
    assert row["round"] == rec["params"]["tie_round"]
    head_bias = sum(case_layout(rec)[:3])  # the 4-value tensor's offset; M there is {head_bias}
    shared, argmax = head_bias, head_bias + 1
    assert ints(row["mask_in"])[-1] == shared and ours["mask_in"][shared]
    tie = row["clients"].index(row["tie_client"])
    for i, c in enumerate(row["clients"]):
        if i != tie:
            assert_same(ours["uploads"][i], vec(row["uploads"][i]), f"client {c} upload")
            assert_same(ours["residuals"][i], vec(row["residuals"][i]), f"client {c} residual")
    up_ours, up_code = ours["uploads"][tie], vec(row["uploads"][tie])
    assert positions((up_ours != 0) ^ (up_code != 0)) == [shared, argmax]
    assert up_ours[shared] != 0 and up_ours[argmax] == 0  # turnout: the shared coordinate
    assert up_code[shared] == 0 and up_code[argmax] != 0  # the code: the tie's other value instead
    keep = torch.ones_like(up_ours, dtype=torch.bool)
    keep[[shared, argmax]] = False
    assert_same(up_ours[keep], up_code[keep], "the tie client's other positions")
    # its residual keeps what it did not send: the code the shared value, turnout the other one
    res_ours, res_code = ours["residuals"][tie], vec(row["residuals"][tie])
    assert res_ours[shared] == 0 and res_code[argmax] == 0
    np.testing.assert_allclose(res_code[shared].item(), ours["nu"][tie] * rec["params"]["N"] * up_ours[shared].item(),
                               rtol=RTOL)
    assert_same(res_ours[keep], res_code[keep], "the tie client's other residuals")
    # the server's step differs on exactly the shared coordinate, by that client's share ν·g
    step_ours, step_code = ours["step"], vec(row["step"])
    assert positions((step_ours != 0) ^ (step_code != 0)) == []
    assert positions((step_ours - step_code).abs() > ATOL + RTOL * step_code.abs()) == [shared]
    np.testing.assert_allclose((step_ours - step_code)[shared].item(), ours["nu"][tie] * up_ours[shared].item(),
                               rtol=1e-4)  # a difference of two O(20) float32 sums: ~1e-6 absolute on O(2)
    assert positions(ours["mask_out"]) == ints(row["mask_out"]).tolist()
