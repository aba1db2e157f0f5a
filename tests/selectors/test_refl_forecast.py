"""REFL's availability forecaster at the paper's reported accuracy (REFL §5.5: MAE 0.028, MSE 0.01)."""

import numpy as np
import pytest

from turnout.availability.base import Availability
from turnout.core import rng as rngmod
from turnout.core.records import SelectionContext
from turnout.selectors.availability_predictor import (
    PREDICTORS,
    PROPHET_MAE,
    PROPHET_MSE,
    ForecastPredictor,
    miss_and_noise,
)
from turnout.selectors.refl import REFLSelector
from turnout.world.context import WorldContext


class _Window(Availability):
    """A model whose exact window answer is a fixed value per client (the forecaster's truth)."""

    def __init__(self, f):
        self.f = np.asarray(f, dtype=np.float64)

    @property
    def num_clients(self):
        return len(self.f)

    def window_fraction(self, clients, round, t0, t1):
        return self.f[clients]

    def available(self, round, time_s):
        return np.ones(len(self.f), bool)


def _ctx(av, r=0):
    n = av.num_clients
    w = WorldContext(num_clients=n, n_train=np.full(n, 50), label_hist=np.zeros((n, 2)), seed=0, rounds=10)
    return SelectionContext(round=r, time_s=0.0, available=np.arange(n), launch=1,
                            rng=rngmod.stream(0, "selection", r), world=w, availability=av, probe_loss=None)


def test_refl_forecast_calibration_solves_the_papers_mae_and_mse_by_hand():
    # (1 − 0.028)·b² − (1 − 0.01)/2·b + (0.028 − 0.01) = 0.972 b² − 0.495 b + 0.018 = 0
    # b = (0.495 − √(0.495² − 4·0.972·0.018)) / (2·0.972) = (0.495 − √0.175041) / 1.944 = 0.076621 / 1.944 = 0.039414
    # q = (0.01 − b²) / (1 − b²) = (0.01 − 0.0015535) / 0.9984465 = 0.0084597
    q, b = miss_and_noise(0.028, 0.01)
    assert b == pytest.approx(0.039414, abs=2e-6)
    assert q == pytest.approx(0.0084597, abs=2e-7)
    # the two ends: MSE = MAE is misses only (b = 0, q = MSE); MSE = 4·MAE² is noise only
    # (MAE = 0.05 → 0.95 b² − 0.495 b + 0.04 = 0 → b = (0.495 − √0.093025)/1.9 = (0.495 − 0.305)/1.9 = 0.1, q = 0)
    assert miss_and_noise(0.05, 0.05) == pytest.approx((0.05, 0.0), abs=1e-12)
    assert miss_and_noise(0.05, 0.01) == pytest.approx((0.0, 0.1), abs=1e-12)
    with pytest.raises(ValueError, match="forecast_mae = 0.01 and forecast_mse = 0.02"):
        miss_and_noise(0.01, 0.02)  # MSE above MAE: errors above 1 would be needed


def test_refl_forecast_error_on_a_binary_state_has_the_stated_mae_and_mse():
    n = 200_000
    truth = (np.arange(n) % 5 == 0).astype(float)  # 20 % of clients will be online in the window
    av = _Window(truth)
    pred = ForecastPredictor(0.028, 0.01)
    p = pred.predict(_ctx(av), np.arange(n), 10.0, 20.0)
    err = np.abs(p - truth)
    assert ((p >= 0) & (p <= 1)).all()
    assert err.mean() == pytest.approx(0.028, abs=6e-4)  # sd of the mean ≈ √(0.01/200000) = 2.2e-4
    assert (err ** 2).mean() == pytest.approx(0.01, abs=6e-4)
    assert (err > 0.5).mean() == pytest.approx(0.00846, abs=8e-4)  # the misses
    # deterministic given the round's stream; another round draws other errors
    np.testing.assert_array_equal(p, pred.predict(_ctx(av), np.arange(n), 10.0, 20.0))
    assert not np.array_equal(p, pred.predict(_ctx(av, r=1), np.arange(n), 10.0, 20.0))


def test_refl_forecast_is_a_selector_option_at_the_papers_accuracy_that_needs_the_simulator():
    cfg = REFLSelector.Config(predictor="forecast")
    assert (PROPHET_MAE, PROPHET_MSE) == (0.028, 0.01)
    pred = PREDICTORS["forecast"](cfg, None)
    assert (pred.miss, pred.noise) == pytest.approx((0.0084597, 0.039414), abs=2e-6)
    assert not pred.is_oracle  # no noisy-oracle thinning on top of the forecast error
    assert REFLSelector.needs_simulator(cfg) is not None
    assert REFLSelector.needs_simulator(REFLSelector.Config(predictor="history")) is None
