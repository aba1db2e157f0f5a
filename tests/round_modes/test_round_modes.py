"""Round modes on hand-built finish / dropout arrays: over-commitment, deadline, wait-all, invariants."""

import math

import numpy as np
import pytest
from pydantic import ValidationError

from turnout.config.base import NoOptions
from turnout.core.registry import describe
from turnout.round_modes import ROUND_MODES
from turnout.round_modes.deadline import Deadline, DeadlineConfig
from turnout.round_modes.over_commit import OverCommit, OverCommitConfig
from turnout.round_modes.wait_all import WaitAll

INF = np.inf


def oc(**kw):
    return OverCommit(OverCommitConfig(**kw))


def dl(**kw):
    return Deadline(DeadlineConfig(**kw))


def close(mode, finish, dropped=None, target=None):
    finish = np.asarray(finish, dtype=float)
    dropped = np.full(len(finish), INF) if dropped is None else np.asarray(dropped, dtype=float)
    return mode.close(finish, dropped, len(finish) if target is None else target)


# --------------------------------------------------------------------------------------------- registry
def test_registered_with_one_line_descriptions():
    for name in ("over_commit", "deadline", "wait_all"):
        cls = ROUND_MODES.get(name)
        assert describe(cls) and "\n" not in describe(cls)
    assert ROUND_MODES.get("over_commit") is OverCommit and ROUND_MODES.get("deadline") is Deadline


@pytest.mark.parametrize("bad", [{"oc": 0.99}, {"oc": float("inf")}, {"oc": float("nan")}, {"rounding": "floor"},
                                 {"keep_stragglers": "maybe"}, {"unknown": 1}])
def test_over_commit_rejects_bad_options(bad):
    with pytest.raises(ValidationError):
        OverCommitConfig(**bad)


@pytest.mark.parametrize("bad", [{"deadline_s": 0}, {"deadline_s": -1}, {"deadline_s": float("inf")},
                                 {"keep_late": "maybe"}, {"max_reports": "some"}, {"advance": "never"},
                                 {"min_reports": -1}, {"min_reports": 1.5}, {"deadline": 5}, {"oc": 0.9},
                                 {"oc": float("nan")}])
def test_deadline_rejects_bad_options(bad):
    with pytest.raises(ValidationError):
        DeadlineConfig(**bad)


def test_defaults():
    c = OverCommitConfig()
    assert (c.oc, c.rounding, c.keep_stragglers) == (1.3, "ceil", False)
    d = DeadlineConfig()
    assert (d.deadline_s, d.keep_late, d.max_reports, d.advance, d.min_reports, d.oc) == (
        100.0, True, "all", "deadline", 0, 1.0)


# --------------------------------------------------------------------------------------------- over-commit
@pytest.mark.parametrize("k,expected", [(10, 13), (1, 2), (3, 4), (5, 7), (100, 130), (0, 0)])
def test_launch_count_ceil(k, expected):
    assert oc(oc=1.3).launch_count(k) == expected


def test_launch_count_is_exact_for_decimal_factors():
    # 1.1·10 and 1.3·10 are 11.000000000000002 / 13.000000000000002 in floats: a naive ceil gives 12 / 14.
    assert oc(oc=1.1).launch_count(10) == 11 and oc(oc=1.3).launch_count(10) == 13
    assert oc(oc=1.0).launch_count(7) == 7
    assert oc(oc=2.5).launch_count(3) == math.ceil(7.5) == 8


def test_launch_count_round_is_fedscales_python_round():
    m = oc(oc=1.3, rounding="round")
    assert m.launch_count(10) == 13
    assert m.launch_count(5) == round(6.5) == 6  # half to even, like FedScale's round(K·oc)
    assert m.launch_count(3) == 4  # 3.9 → 4
    assert oc(oc=1.1, rounding="round").launch_count(4) == 4  # 4.4 → 4, never below K


def test_over_commit_aggregates_the_k_fastest_and_closes_at_the_kth():
    m = oc(oc=1.3)
    assert m.launch_count(10) == 13
    finish = np.array([5.0, 1.0, 12.0, 3.0, 9.0, 2.0, 11.0, 4.0, 13.0, 6.0, 8.0, 7.0, 10.0])
    out = close(m, finish, target=10)
    assert out.aggregated.sum() == 10
    assert set(np.flatnonzero(out.aggregated)) == set(np.flatnonzero(finish <= 10.0))
    assert out.duration_s == 10.0 == np.sort(finish)[9]
    assert not out.late.any()
    # aggregated clients worked to their finish; the 3 discarded ones were cut at the close
    np.testing.assert_array_equal(out.busy_s[out.aggregated], finish[out.aggregated])
    np.testing.assert_array_equal(out.busy_s[~out.aggregated], [10.0, 10.0, 10.0])
    wasted = out.busy_s[~out.aggregated & ~out.late].sum()
    assert wasted == 30.0


def test_over_commit_dropouts_are_never_aggregated():
    m = oc()
    finish = np.arange(1.0, 14.0)  # 1..13
    dropped = np.full(13, INF)
    dropped[[0, 4]] = [0.5, 3.0]  # two of the fastest drop out before delivering
    out = close(m, finish, dropped, target=10)
    assert not out.aggregated[[0, 4]].any()
    assert out.aggregated.sum() == 10
    # survivors are 2,3,4,6,...,13 → the 10th fastest survivor finishes at 12
    assert out.duration_s == 12.0
    assert out.busy_s[0] == 0.5 and out.busy_s[4] == 3.0  # dropped clients spent time until they vanished
    assert out.busy_s[12] == 12.0  # the one discarded survivor was cut at the close
    assert not out.aggregated[12]


def test_over_commit_dropout_after_the_close_is_cut_at_the_close():
    out = close(oc(), [1.0, 2.0, 3.0, 10.0], [INF, INF, INF, 8.0], target=3)
    assert out.duration_s == 3.0 and out.busy_s[3] == 3.0 and not out.aggregated[3]


def test_over_commit_fewer_than_k_survivors_aggregates_all_and_waits_for_the_dropouts():
    finish = np.array([1.0, 2.0, 30.0, 4.0, 50.0])
    dropped = np.array([INF, INF, 20.0, INF, 6.0])  # clients 2 and 4 drop out at 20 s and 6 s
    out = close(oc(), finish, dropped, target=4)
    np.testing.assert_array_equal(out.aggregated, [True, True, False, True, False])
    # the server only learns of the dropout at 20 s, after the last survivor (4 s): it waits until then
    assert out.duration_s == 20.0
    np.testing.assert_array_equal(out.busy_s, [1.0, 2.0, 20.0, 4.0, 6.0])
    # with only early dropouts the round ends at the last survivor
    out = close(oc(), [1.0, 2.0, 9.0], [INF, INF, 0.5], target=3)
    assert out.duration_s == 2.0 and out.aggregated.tolist() == [True, True, False]
    # nobody survives: nothing aggregated, the round lasts until the last one is known to be gone
    out = close(oc(), [5.0, 6.0], [1.0, 2.0], target=2)
    assert not out.aggregated.any() and out.duration_s == 2.0


def test_over_commit_ties_go_to_the_lower_index():
    finish = np.array([3.0, 1.0, 2.0, 2.0, 2.0, 5.0])
    out = close(oc(), finish, target=3)
    np.testing.assert_array_equal(out.aggregated, [False, True, True, True, False, False])
    assert out.duration_s == 2.0
    assert out.busy_s[4] == 2.0  # tied but discarded: its work up to the close is wasted
    again = close(oc(), finish, target=3)
    np.testing.assert_array_equal(again.aggregated, out.aggregated)


def test_over_commit_keep_stragglers_marks_surviving_stragglers_late():
    finish = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    dropped = np.array([INF, INF, INF, INF, 4.5])
    out = close(oc(keep_stragglers=True), finish, dropped, target=3)
    np.testing.assert_array_equal(out.aggregated, [True, True, True, False, False])
    np.testing.assert_array_equal(out.late, [False, False, False, True, False])
    assert out.duration_s == 3.0
    # the late one trains to the end; the doomed one works until it goes offline
    np.testing.assert_array_equal(out.busy_s, [1.0, 2.0, 3.0, 4.0, 4.5])


def test_over_commit_empty_cohort():
    out = close(oc(), [], target=0)
    assert out.duration_s == 0.0 and len(out.aggregated) == len(out.busy_s) == 0


# --------------------------------------------------------------------------------------------- deadline
def test_deadline_aggregates_on_time_flags_late_and_lasts_d():
    finish = np.array([10.0, 150.0, 50.0, 100.0, 300.0])
    out = close(dl(deadline_s=100.0), finish, target=5)
    np.testing.assert_array_equal(out.aggregated, [True, False, True, True, False])  # ≤ d is on time
    np.testing.assert_array_equal(out.late, [False, True, False, False, True])
    assert out.duration_s == 100.0
    np.testing.assert_array_equal(out.busy_s, finish)  # late clients keep working to their finish


def test_deadline_without_keep_late_cuts_at_the_deadline():
    finish = np.array([10.0, 150.0, 50.0, 300.0])
    out = close(dl(deadline_s=100.0, keep_late=False), finish, target=4)
    assert not out.late.any()
    np.testing.assert_array_equal(out.aggregated, [True, False, True, False])
    np.testing.assert_array_equal(out.busy_s, [10.0, 100.0, 50.0, 100.0])


def test_deadline_dropouts():
    finish = np.array([10.0, 50.0, 150.0, 200.0])
    dropped = np.array([INF, 20.0, 120.0, 80.0])
    out = close(dl(deadline_s=100.0), finish, dropped)
    np.testing.assert_array_equal(out.aggregated, [True, False, False, False])
    assert not out.late.any()  # nobody that drops out is kept
    np.testing.assert_array_equal(out.busy_s, [10.0, 20.0, 120.0, 80.0])
    cut = close(dl(deadline_s=100.0, keep_late=False), finish, dropped)
    np.testing.assert_array_equal(cut.busy_s, [10.0, 20.0, 100.0, 80.0])


def test_deadline_slow_clients_are_never_aggregated():
    finish = np.array([101.0, 1e6, 100.5])
    for advance in ("deadline", "last_arrival"):
        for keep in (True, False):
            out = close(dl(deadline_s=100.0, advance=advance, keep_late=keep), finish)
            assert not out.aggregated.any() and out.duration_s == 100.0
            assert out.late.all() == keep


def test_deadline_last_arrival_closes_early():
    m = dl(deadline_s=100.0, advance="last_arrival")
    out = close(m, [10.0, 30.0, 20.0])
    assert out.aggregated.all() and out.duration_s == 30.0
    # a dropout the server learns of at 60 s keeps it waiting until then
    out = close(m, [10.0, 30.0, 200.0], [INF, INF, 60.0])
    assert out.aggregated.tolist() == [True, True, False] and out.duration_s == 60.0
    # a late client keeps it waiting until the deadline
    out = close(m, [10.0, 30.0, 200.0])
    assert out.duration_s == 100.0 and out.late.tolist() == [False, False, True]


def test_deadline_max_reports_target_caps_in_completion_order():
    finish = np.array([40.0, 10.0, 30.0, 20.0, 150.0, 20.0])
    out = close(dl(deadline_s=100.0, max_reports="target"), finish, target=3)
    np.testing.assert_array_equal(out.aggregated, [False, True, False, True, False, True])  # 10, 20, 20 (tie → index)
    # on-time reports over the cap are treated like late ones
    np.testing.assert_array_equal(out.late, [True, False, True, False, True, False])
    assert out.duration_s == 100.0
    early = close(dl(deadline_s=100.0, max_reports="target", advance="last_arrival", keep_late=False),
                  finish, target=3)
    assert early.duration_s == 20.0  # K reports in: nothing more will be aggregated
    np.testing.assert_array_equal(early.busy_s, [20.0, 10.0, 20.0, 20.0, 20.0, 20.0])
    everything = close(dl(deadline_s=100.0), finish, target=3)
    assert everything.aggregated.sum() == 5  # max_reports=all ignores K


def test_deadline_over_commitment_launches_more_and_closes_at_the_target():
    """REFL's Fig. 7 setting: 100 pre-selected for an 80 % target (K = 80, oc = 1.25) under a deadline; the
    default launches exactly K (REFL's DL)."""
    assert dl().launch(80, 0) == 80 and dl(oc=1.25).launch(80, 0) == 100 and dl(oc=1.3).launch(10, 0) == 13
    m = dl(deadline_s=100.0, oc=1.25, max_reports="target", advance="last_arrival")
    finish = np.array([50.0, 10.0, 40.0, 20.0, 120.0])  # 5 launched for K = 4
    out = close(m, finish, target=4)
    np.testing.assert_array_equal(out.aggregated, [True, True, True, True, False])
    assert out.duration_s == 50.0 and out.late.tolist() == [False] * 4 + [True]  # 4th report in at 50 s
    # fewer than K by the deadline: the round lasts d and takes what arrived
    out = close(m, np.array([10.0, 150.0, 40.0, 120.0, 130.0]), target=4)
    assert out.duration_s == 100.0 and out.aggregated.tolist() == [True, False, True, False, False]


def test_deadline_min_reports_failure_rule():
    finish = np.array([10.0, 50.0, 150.0, 300.0])
    ok = close(dl(deadline_s=100.0, min_reports=2), finish)
    assert ok.aggregated.sum() == 2
    failed = close(dl(deadline_s=100.0, min_reports=3), finish)
    assert not failed.aggregated.any()
    # the on-time work is wasted (neither aggregated nor late); late clients are still kept
    np.testing.assert_array_equal(failed.late, [False, False, True, True])
    np.testing.assert_array_equal(failed.busy_s, finish)
    assert failed.duration_s == 100.0
    wasted = failed.busy_s[~failed.aggregated & ~failed.late].sum()
    assert wasted == 60.0
    cut = close(dl(deadline_s=100.0, min_reports=3, keep_late=False), finish)
    assert not cut.aggregated.any() and not cut.late.any()
    np.testing.assert_array_equal(cut.busy_s, [10.0, 50.0, 100.0, 100.0])


def test_deadline_empty_cohort():
    out = close(dl(), [], target=0)
    assert out.duration_s == 0.0 and len(out.aggregated) == 0


# --------------------------------------------------------------------------------------------- wait-all
def test_wait_all_unchanged():
    m = WaitAll(NoOptions())
    assert m.launch_count(10) == 10
    out = close(m, [1.0, 5.0, 3.0, 9.0], [INF, INF, 2.0, 7.0])
    np.testing.assert_array_equal(out.aggregated, [True, True, False, False])
    assert not out.late.any()
    np.testing.assert_array_equal(out.busy_s, [1.0, 5.0, 2.0, 7.0])
    assert out.duration_s == 7.0


# --------------------------------------------------------------------------------------------- invariants
MODES = [
    ("wait_all", lambda: WaitAll(NoOptions())),
    ("oc", lambda: oc()),
    ("oc-round", lambda: oc(oc=1.7, rounding="round")),
    ("oc-keep", lambda: oc(keep_stragglers=True)),
    ("dl", lambda: dl(deadline_s=5.0)),
    ("dl-cut", lambda: dl(deadline_s=5.0, keep_late=False)),
    ("dl-target-early", lambda: dl(deadline_s=5.0, max_reports="target", advance="last_arrival")),
    ("dl-target-early-cut", lambda: dl(deadline_s=5.0, max_reports="target", advance="last_arrival",
                                       keep_late=False)),
    ("dl-fail", lambda: dl(deadline_s=5.0, min_reports=3)),
]


@pytest.mark.parametrize("name,make", MODES, ids=[m[0] for m in MODES])
def test_invariants_on_random_rounds(name, make):
    mode = make()
    rng = np.random.default_rng(1234)
    for case in range(300):
        target = int(rng.integers(1, 12))
        n = mode.launch_count(target) if rng.random() < 0.8 else int(rng.integers(0, 16))
        # coarse times so ties happen often
        finish = np.round(rng.exponential(4.0, n), 0 if case % 3 == 0 else 3)
        dropped = np.where(rng.random(n) < 0.3, rng.uniform(0, 12, n), INF)
        out = mode.close(finish, dropped, target)
        agg, late, busy = out.aggregated, out.late, out.busy_s
        assert agg.dtype == bool and late.dtype == bool and agg.shape == late.shape == busy.shape == (n,)
        assert not (agg & late).any()
        assert (finish[agg] <= dropped[agg]).all()
        assert (finish[late] <= dropped[late]).all()  # only clients that will deliver are kept
        assert (busy >= 0).all() and (busy <= np.maximum(finish, dropped)).all()
        assert (busy <= np.minimum(finish, dropped) + 1e-12).all()  # nobody works past finish or dropout
        np.testing.assert_array_equal(busy[agg], finish[agg])  # aggregated clients did their whole work
        assert out.duration_s >= 0 and np.isfinite(out.duration_s)
        if agg.any():
            assert out.duration_s >= finish[agg].max()
        # anything not kept (wasted) was stopped by the close at the latest
        wasted = ~agg & ~late
        if name not in ("oc-keep", "dl", "dl-target-early", "dl-fail"):  # modes that cut at the close
            assert (busy[wasted] <= out.duration_s + 1e-12).all()
        if name.startswith("oc"):
            survivors = finish <= dropped
            assert agg.sum() == min(target, survivors.sum())
            # the aggregated ones are the fastest survivors
            if agg.any() and (survivors & ~agg).any():
                assert finish[agg].max() <= finish[survivors & ~agg].min()
        if name.startswith("dl"):
            assert (finish[agg] <= 5.0).all()
            if "target" in name:
                assert agg.sum() <= target
            if name == "dl-fail":
                assert agg.sum() == 0 or agg.sum() >= 3
            if "early" not in name:
                assert out.duration_s == (5.0 if n else 0.0)
            else:
                assert out.duration_s <= 5.0
        if name == "wait_all":
            np.testing.assert_array_equal(agg, finish <= dropped)
