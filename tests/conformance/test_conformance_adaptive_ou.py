"""Adaptive-OU (turnout.algorithms.adaptive_ou, .ou_estimator) against the authors' TensorFlow code.

The record (scripts/conformance/adaptive_ou.py) drove ``mriberodiaz/selection_ou_weights``'s client rule
(``threshold_weights_global_norm``) and server step (``server_update`` of ``fed_avg_schedule_{ou,zero,ignore}``:
the model step, the ``mean − std`` threshold, the OU sums, the fitted ``A``, ``B`` and the predicted delta) for
6–10 rounds from its own initial state, with 6–8 of 12 clients a round and fixed model deltas. Here turnout's
``AdaptiveOU`` replays the same rounds in the engine's order (``begin_round``, ``client_update`` per client,
``aggregate``) with the code's options (``threshold_weighting: n_samples``, weights ``n_k`` as the uniform
selector's ``weighting: n_samples`` gives them, ``min_pairs: 2``), carrying its own state from round to round.

Compared exactly: who transmits and who NACKs each round. Compared with a tolerance: thresholds, the norms a NACK
carries, the global model, the OU sums, ``a``, ``b`` and ``Δ̂`` (the substitute and the next prediction).

Tolerances. The code computes everything in float32 (unit roundoff u = 2⁻²⁴ ≈ 6e-8); turnout's model and
uploads are float32 too, but it takes the threshold's mean and std and the OU sums in float64, and sums the
reports in another order. Floats are compared norm-wise (largest error / largest value of the code's vector):

* threshold, NACK norms: ≤ 8 float32 terms and a square root: 2e-6 (≈ 32 u), of m̄ + s for γ = m̄ − s (its
  error scales with the two terms, however much they cancel);
* global model and OU sums: a float32 weighted mean of ≤ 8 rows per round, ≤ 10 rounds in a row: 1e-5;
* ``a``, ``b``: the code's float32 ``n·S_xx − S_x²`` cancels by κ = n·S_xx / (n·S_xx − S_x²) ≤ 32 on these
  inputs (checked below): u·κ·(≈10 rounds summed) ≈ 2e-5;
* ``Δ̂ = a·x + b − x`` cancels once more (its terms are up to 75× |Δ̂| late in a run): 5e-5.

The largest errors seen are 6–12× below these (thresholds 2e-7, model 8e-7, ``a``/``b`` 3.4e-6, ``Δ̂`` 8.3e-6),
and a changed rule (another threshold, another fit) moves the values by percents. No norm lies within 1e-3 of
its threshold (the recorder checks), so float32 against float64 cannot flip a decision.

The ``ignore`` variant of the code weights the threshold's variance by the senders only (``client_weight`` is
``n_k · transmitted`` there) about a mean over every client; turnout takes both over every report, as the ``ou``
and ``zero`` variants and the paper do. Its test checks that this is the one difference (docs/conformance.md).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import turnout.algorithms.adaptive_ou  # noqa: F401  (registers components)
from turnout.algorithms.adaptive_ou import AdaptiveOU, AdaptiveOUConfig, is_nack
from turnout.algorithms.base import AlgorithmContext
from turnout.core.records import Reports

RTOL_THRESHOLD = 2e-6
RTOL_MODEL = 1e-5
RTOL_FIT = 2e-5
RTOL_PREDICTION = 5e-5
KAPPA_MAX = 32.0  # the cancellation in n·S_xx − S_x² that RTOL_FIT allows for


def _close(ours, theirs, rtol: float, what: str, scale: float | None = None) -> None:
    """``ours`` within ``rtol × scale`` of ``theirs``; ``scale``: the code's largest magnitude unless given."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    scale = float(np.abs(theirs).max()) if scale is None else scale
    err = float(np.abs(ours - theirs).max())
    assert err <= rtol * scale, f"{what}: largest error {err:.3g} > {rtol:g} × {scale:.3g}"


def _cases(load_record, variant: str) -> list[dict]:
    rec = load_record("adaptive_ou")
    assert rec["repo"] == "mriberodiaz/selection_ou_weights"
    cases = [c for c in rec["cases"] if c["variant"] == variant]
    assert cases, f"the record has no {variant} case"
    return cases


def _replay(case: dict) -> list[dict]:
    """Run turnout's AdaptiveOU through the recorded rounds in the engine's order; what it did each round.

    Each round's ``ou`` is turnout's estimator once it holds the pair ``(x_t, x_{t+1})``, i.e. what the
    code's ``server_update`` of round ``t`` fitted: turnout adds that pair at the start of the next
    ``aggregate``, so it is taken from a copy here (the same ``update`` call, on the same two models).
    """
    n_train = np.asarray(case["n_samples"])
    rounds = case["rounds"]
    ctx = AlgorithmContext(num_clients=case["num_clients"], dim=len(case["x0"]), n_train=n_train, seed=0,
                           rounds=len(rounds))
    cfg = AdaptiveOUConfig(strategy=case["variant"], server_lr=case["server_lr"], rule="adaptive", threshold=0.0,
                           threshold_weighting="n_samples", min_pairs=2)  # the code's readings (also the defaults)
    alg = AdaptiveOU(cfg, ctx)
    x = torch.tensor(case["x0"], dtype=torch.float32)
    seen = []
    for t, row in enumerate(rounds):
        clients = np.asarray(row["clients"])
        k = len(clients)
        threshold = alg.threshold
        alg.begin_round(t, clients, np.ones(k, np.int64), 0.1)
        deltas = torch.tensor(row["deltas"], dtype=torch.float32)
        ups = torch.stack([alg.client_update(int(c), x, x + d) for c, d in zip(clients, deltas)])
        nack = is_nack(ups)
        n = n_train[clients]
        reports = Reports(clients, ups, n.astype(np.float64), True, n, np.zeros(k), np.zeros(k, np.int64))
        new = alg.aggregate(t, x, reports)
        ou = copy.deepcopy(alg.ou)
        ou.update(alg.prev_params, new)
        seen.append({"threshold": threshold, "transmitted": (~nack).astype(int).tolist(),
                     "nack_norms": ups[torch.from_numpy(nack), 0].numpy(), "substitute": alg.predicted.numpy(),
                     "n_full_uploads": alg.round_metrics()["n_full_uploads"], "model_after": new.numpy(),
                     "threshold_after": alg.threshold, "ou": ou,
                     "predicted_after": ou.predict_delta(new).numpy() if ou.n >= 2 else np.zeros(len(new))})
        x = new
    return seen


def _terms(row: dict) -> float:
    """m̄ + s of a round: the size of the two terms whose difference is γ (its errors scale with them)."""
    return row["norm_mean"] + np.sqrt(row["norm_var"])


def _check_rule_and_step(case: dict, seen: list[dict], thresholds: bool = True) -> None:
    rounds = case["rounds"]
    for t, (row, ours) in enumerate(zip(rounds, seen)):
        where = f"{case['variant']} seed {case['seed']} round {t}"
        if thresholds:  # γ_0 = 0 on both sides; then γ_t is round t−1's γ_(t+1)
            _close([ours["threshold"]], [row["threshold"]], RTOL_THRESHOLD, f"{where}: threshold γ_t",
                   scale=_terms(rounds[t - 1]) if t else 0.0)
        assert ours["transmitted"] == row["transmitted"], f"{where}: who transmits"
        assert ours["n_full_uploads"] == row["num_participants"], f"{where}: full uploads"
        nacked = np.asarray(row["transmitted"]) == 0
        if nacked.any():
            _close(ours["nack_norms"], np.asarray(row["norms"])[nacked], RTOL_THRESHOLD, f"{where}: NACK norms")
        _close(ours["model_after"], row["model_after"], RTOL_MODEL, f"{where}: global model x_(t+1)")
        if thresholds:
            _close([ours["threshold_after"]], [row["threshold_after"]], RTOL_THRESHOLD, f"{where}: threshold γ_(t+1)",
                   scale=_terms(row))


def test_conformance_adaptive_ou_thresholds_nacks_and_model_match_the_code(load_record):
    cases = _cases(load_record, "ou")
    nacks = 0
    for case in cases:
        _check_rule_and_step(case, _replay(case))
        nacks += sum(r["transmitted"].count(0) for r in case["rounds"])
    assert nacks >= 10  # the record exercises the threshold, not only γ_0 = 0


def test_conformance_adaptive_ou_ou_estimate_matches_the_code(load_record):
    substituted = 0
    for case in _cases(load_record, "ou"):
        seen = _replay(case)
        for t, (row, ours) in enumerate(zip(case["rounds"], seen)):
            where = f"ou seed {case['seed']} round {t}"
            ou = ours["ou"]
            assert ou.n == t + 1
            sums = {"Sx": ou.s_x, "Sxx": ou.s_xx, "Sy": ou.s_y, "Syy": ou.s_yy, "Sxy": ou.s_xy}
            for name, ours_sum in sums.items():
                _close(ours_sum.numpy(), row["sums_after"][name], RTOL_MODEL, f"{where}: {name}")
            # the substitute a NACK got this round: the code's broadcast predicted_delta (0 before 2 pairs)
            _close(ours["substitute"], row["replacement"], RTOL_PREDICTION, f"{where}: substitute Δ̂_t")
            if np.any(row["replacement"]) and row["transmitted"].count(0):
                substituted += 1
            if row["a"] is None:  # round 0: one pair, the code keeps Δ̂ = 0
                assert not np.any(row["predicted_after"]) and not np.any(ours["predicted_after"])
                continue
            sxx, sx = np.asarray(row["sums_after"]["Sxx"]), np.asarray(row["sums_after"]["Sx"])
            den = ou.n * sxx - sx * sx
            moving = den != 0
            assert (ou.n * sxx[moving] / np.abs(den[moving])).max() <= KAPPA_MAX  # RTOL_FIT's premise
            a, b = (v.numpy() for v in ou.coefficients())
            _close(a, row["a"], RTOL_FIT, f"{where}: a")
            _close(b, row["b"], RTOL_FIT, f"{where}: b")
            frozen = ~moving  # a coordinate that never moved: the code's 0/0 → A = 0, B = its value, Δ̂ = 0
            assert frozen.any() and not np.any(np.asarray(row["a"])[frozen]) and not np.any(a[frozen])
            _close(ours["predicted_after"], row["predicted_after"], RTOL_PREDICTION, f"{where}: Δ̂_(t+1)")
    assert substituted >= 5  # rounds where NACKed clients got a non-zero OU substitute


def test_conformance_adaptive_ou_zero_strategy_matches_the_code(load_record):
    for case in _cases(load_record, "zero"):
        seen = _replay(case)
        _check_rule_and_step(case, seen)
        assert all(not np.any(s["substitute"]) for s in seen)
        assert any(r["transmitted"].count(0) for r in case["rounds"])


def test_conformance_adaptive_ou_ignore_strategy_differs_only_in_the_code_s_sender_only_variance(load_record):
    for case in _cases(load_record, "ignore"):
        seen = _replay(case)
        _check_rule_and_step(case, seen, thresholds=False)  # who transmits and the model agree on this record
        differ = 0
        for t, (row, ours) in enumerate(zip(case["rounds"], seen)):
            where = f"ignore seed {case['seed']} round {t}"
            m, w = np.asarray(row["norms"], np.float64), np.asarray(case["n_samples"])[row["clients"]]
            sent = np.asarray(row["transmitted"]) == 1
            mean = np.average(m, weights=w)
            # the code: the mean over every client, the variance over the senders only
            std_code = np.sqrt(np.average((m[sent] - mean) ** 2, weights=w[sent]))
            _close([row["threshold_after"]], [mean - std_code], RTOL_THRESHOLD, f"{where}: the code's γ_(t+1)",
                   scale=mean + std_code)
            # turnout: both over every report (the ou and zero variants' and the paper's rule)
            std = np.sqrt(np.average((m - mean) ** 2, weights=w))
            _close([ours["threshold_after"]], [mean - std], RTOL_THRESHOLD, f"{where}: turnout's γ_(t+1)",
                   scale=mean + std)
            if sent.all():  # everyone sent: the two readings coincide
                _close([ours["threshold_after"]], [row["threshold_after"]], RTOL_THRESHOLD, f"{where}: γ_(t+1)",
                       scale=_terms(row))
            else:
                differ += 1
        assert differ >= 2
