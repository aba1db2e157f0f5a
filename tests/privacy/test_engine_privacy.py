"""DP and secure aggregation inside the round loop: where clipping and noise sit, the columns, the ε written,
and the one-line refusals of `turnout check`."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import yaml

from turnout.app.cli import main
from turnout.core.errors import ConfigError
from turnout.sim.composition import expand

pytest.importorskip("dp_accounting")

from turnout.privacy import accounting  # noqa: E402

DP = {"name": "gaussian", "clip_norm": 0.05, "noise_multiplier": 1.0}


def _with(tiny, **blocks):
    raw = copy.deepcopy(tiny)
    raw.update(blocks)
    return raw


def test_dp_run_clips_before_the_compressor_and_writes_each_clients_epsilon(tiny, simulate, spy):
    raw = _with(tiny, privacy=DP, compressor={"name": "none"})
    sim, result = simulate(raw, components={"compressor": spy("compressor", "encode_uploads",
                                                              lambda obj, res, r, c, u: u.clone())})
    for uploads in sim.compressor.calls:  # what the compressor was handed is already clipped to C
        assert float(torch.linalg.vector_norm(uploads, dim=1).max()) <= 0.05 * (1 + 1e-6)
    rows = result.rounds
    assert all(r["dp_clip_norm"] == 0.05 and r["dp_noise_std"] == pytest.approx(1.0 * 0.05 / 4) for r in rows)
    assert all(0.0 <= r["dp_clipped_frac"] <= 1.0 for r in rows)
    times = result.clients["times_aggregated"]
    np.testing.assert_allclose(result.clients["epsilon"], accounting.client_epsilons(times, 1.0, 1e-5))
    s = result.summary
    assert s["dp_epsilon"] == pytest.approx(accounting.standard_epsilon(4 / 20, 1.0, 3, 1e-5))
    # every client always available, uniform draws of 4 of 20: each client's amplified ε is the standard one
    np.testing.assert_allclose(result.clients["epsilon_amplified"], s["dp_epsilon"], rtol=1e-9)
    assert s["dp_epsilon_client_max"] == pytest.approx(float(result.clients["epsilon"].max()))


def test_dp_runs_are_deterministic(tiny, simulate):
    raw = _with(tiny, privacy=DP)
    a, b = simulate(raw)[1], simulate(raw)[1]
    assert [r["loss"] for r in a.rounds] == [r["loss"] for r in b.rounds]
    assert torch.equal(a.final_params, b.final_params)


def test_noise_reaches_the_model(tiny, simulate):
    plain = simulate(_with(tiny, privacy={**DP, "noise_multiplier": 0.0}))[1]
    noised = simulate(_with(tiny, privacy=DP))[1]
    assert not torch.equal(plain.final_params, noised.final_params)


def test_privacy_off_adds_no_column_and_no_config_key(tiny, simulate):
    _, result = simulate(tiny)
    assert not any(k.startswith(("dp_", "secagg_")) for k in result.rounds[0])
    assert "epsilon" not in result.clients
    resolved = expand(copy.deepcopy(tiny))[0].as_dict()
    assert "privacy" not in resolved and "secure_aggregation" not in resolved
    assert "privacy" in expand(_with(tiny, privacy=DP))[0].as_dict()


def test_secure_aggregation_prices_keys_and_fails_rounds_below_threshold(tiny, simulate, build_simulation):
    plain = simulate(tiny)[1]
    sa = simulate(_with(tiny, secure_aggregation={"name": "secagg"}))[1]
    # keys and shares on top of every round's bytes: 4 launched, k = 3 → (64 + 3·64) + 3·64 up per client
    extra_up = [s["bytes_up"] - p["bytes_up"] for s, p in zip(sa.rounds, plain.rounds)]
    assert extra_up == [4 * (64 + 3 * 64 + 3 * 64)] * 3
    assert all(s["round_duration_s"] > p["round_duration_s"] for s, p in zip(sa.rounds, plain.rounds))
    assert all(r["secagg_failed"] == 0 and r["n_aggregated"] == 4 for r in sa.rounds)
    # a deadline that no client meets: nobody submits, every round fails, the model never moves
    dead = simulate(_with(tiny, secure_aggregation={"name": "secagg"},
                          round_mode={"name": "deadline", "deadline_s": 1e-6}))[1]
    assert all(r["secagg_failed"] == 1 and r["n_aggregated"] == 0 for r in dead.rounds)
    assert torch.equal(dead.final_params, build_simulation(tiny).params)


def _check(tmp_path, capsys, raw) -> tuple[int, str]:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    rc = main(["check", str(path)])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("algorithm, needle", [("mifa", "latest raw update"), ("scaffold", "control variates"),
                                               ("adaptive_ou", "OU estimates"), ("fedbuff", "each report")])
def test_check_refuses_dp_for_a_rule_it_cannot_protect_in_one_line(tmp_path, capsys, tiny, algorithm, needle):
    rc, err = _check(tmp_path, capsys, _with(tiny, privacy=DP, algorithm={"name": algorithm}))
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "privacy.name" in err and needle in err and "fedavg" in err


def test_check_accepts_dp_for_averaging_rules(tmp_path, capsys, tiny):
    for algorithm in ("fedavg", "fedprox", "fedadam", "fedyogi"):
        rc, err = _check(tmp_path, capsys, _with(tiny, privacy=DP, algorithm={"name": algorithm}))
        assert rc == 0, err


def test_dp_without_the_extra_is_refused_in_one_line(tiny, monkeypatch):
    from turnout.sim import composition

    monkeypatch.setattr(composition, "_missing", lambda module: module == "dp_accounting")
    with pytest.raises(ConfigError) as exc:
        expand(_with(tiny, privacy=DP))
    assert exc.value.key == "privacy.name" and "turnout[privacy]" in str(exc.value) and "\n" not in str(exc.value)


def test_clients_csv_keeps_every_variant_when_only_some_have_epsilon(tmp_path, capsys, tiny):
    """A DP variant beside one without DP: clients.csv has every client of both, ε empty where DP was off."""
    raw = _with(tiny, rounds=2, variants=[{"name": "dp", "set": {"privacy": DP}}, {"name": "plain"}])
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--quiet", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    import csv

    rows = list(csv.DictReader(open(tmp_path / "run" / "clients.csv")))
    assert [r["variant"] for r in rows].count("dp") == 20 and [r["variant"] for r in rows].count("plain") == 20
    assert all(float(r["epsilon"]) >= 0 for r in rows if r["variant"] == "dp")
    assert all(r["epsilon"] in ("", "nan") for r in rows if r["variant"] == "plain")
