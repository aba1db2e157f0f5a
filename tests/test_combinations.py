"""Every component combines with every other: the seam matrix on a tiny problem.

Components are enumerated from the registries, so a newly registered component joins the matrix
automatically (give it options below if its defaults do not suit a 24-client population). The
default suite covers every (availability × selector) pair and, with a greedy covering array, every
pair of values among (round mode, selector, compressor, algorithm); the full cross product is marked
slow. Compressor × algorithm pairs that config validation refuses (a compressor that would break the
algorithm's upload) are checked to be refused instead of run.
"""

import itertools
import math

import numpy as np
import pytest

from turnout.sim.catalogue import registries
from turnout.sim.timing import timing_for

N, K = 24, 4
#: options for components whose defaults do not fit a 24-client, 4-per-round world
OPTIONS = {
    "availability": {"p1_uniform": {"m": 8}, "cyclic": {"m": 6}, "reshuffled_cyclic": {"m": 6},
                     "trace": {}},
    "selector": {"sticky": {"sticky_size": 8, "sticky_per_round": 3}},
    "round_mode": {"deadline": {"deadline_s": 0.5}},
}
BASE = {"name": "matrix", "rounds": 3, "data": {"name": "synthetic", "num_clients": N}, "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 1, "lr": 0.05}, "eval": {"every": 3},
        "output": {"progress": False}}


def names(seam):
    return registries()[seam].names()


def block(seam, name):
    extra = OPTIONS.get(seam, {}).get(name, {})
    if seam == "selector":
        return {"name": name, "clients_per_round": K, **extra}
    return {"name": name, **extra}


@pytest.fixture
def run_combo(build_simulation, compute_speeds):
    return lambda **chosen: _run_combo(build_simulation, compute_speeds, **chosen)


def _run_combo(build_simulation, compute_speeds, **chosen):
    raw = dict(BASE)
    for seam, name in chosen.items():
        raw[seam] = block(seam, name)
    heterogeneous = compute_speeds(lambda c: 0.002 * (1 + np.arange(len(c)) % 5))
    sim = build_simulation(raw, components={"devices": heterogeneous})
    res = sim.run()
    last = res.rounds[-1]
    assert math.isfinite(last["loss"]), chosen
    for row in res.rounds:
        assert row["n_aggregated"] <= row["n_selected"] + row["n_stale"]
        assert row["sim_time_s"] >= 0 and row["bytes_down"] >= 0 and row["resource_s"] >= 0
    # waste is a part of what was spent, per client and in total
    pop = sim.population
    assert (pop.wasted_s <= pop.resource_s + 1e-9).all(), chosen
    assert sum(r["wasted_s"] for r in res.rounds) + res.summary["late_unused_s"] == pytest.approx(pop.wasted_s.sum())
    assert pop.times_aggregated.sum() <= pop.times_selected.sum()
    return res


def pairs_availability_selector():
    return list(itertools.product(names("availability"), names("selector")))


def compatible(compressor, algorithm):
    algo = registries()["algorithm"].get(algorithm)
    accepts = getattr(registries()["compressor"].get(compressor), "accepts", None)
    return accepts is None or algo.upload_kind(algo.Config()) in accepts


def async_refusal(round_mode, selector, algorithm):
    """The key validation refuses (round mode, selector, algorithm) under, or None: asynchronous rounds need a
    selector that refills free slots and a server rule that takes reports from earlier cohorts."""
    regs = registries()
    if not timing_for(regs["round_mode"].get(round_mode)).mixes_cohorts:
        return None
    sel = regs["selector"].get(selector)
    if sel.cannot_fill_slots(sel.Config(**{k: v for k, v in block("selector", selector).items() if k != "name"})):
        return "selector.name"
    return "algorithm.name" if regs["algorithm"].get(algorithm).cohort_bound else None


def runs(t):
    return compatible(t[2], t[3]) and async_refusal(t[0], t[1], t[3]) is None


def pairs_rest():
    """A covering array: every pair of values of any two of the four seams appears in some tuple."""
    seams = [names("round_mode"), names("selector"), names("compressor"), names("algorithm")]
    combos = [t for t in itertools.product(*seams) if runs(t)]
    uncovered = {(i, t[i], j, t[j]) for t in combos for i, j in itertools.combinations(range(4), 2)}

    def gain(t):
        return sum((i, t[i], j, t[j]) in uncovered for i, j in itertools.combinations(range(4), 2))

    out = []
    while uncovered:
        i, a, j, b = min(uncovered)
        best = max((t for t in combos if t[i] == a and t[j] == b), key=gain)
        out.append(best)
        uncovered -= {(p, best[p], q, best[q]) for p, q in itertools.combinations(range(4), 2)}
    return out


def incompatible_pairs():
    return [(c, a) for c, a in itertools.product(names("compressor"), names("algorithm")) if not compatible(c, a)]


@pytest.mark.parametrize("availability,selector", pairs_availability_selector())
def test_availability_with_selector(availability, selector, run_combo):
    run_combo(availability=availability, selector=selector)


@pytest.mark.parametrize("round_mode,selector,compressor,algorithm", pairs_rest())
def test_round_mode_selector_compressor_algorithm(round_mode, selector, compressor, algorithm, run_combo):
    run_combo(round_mode=round_mode, selector=selector, compressor=compressor, algorithm=algorithm)


@pytest.mark.parametrize("compressor,algorithm", incompatible_pairs())
def test_incompatible_compressor_is_refused(compressor, algorithm, run_combo):
    from turnout.core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        run_combo(compressor=compressor, algorithm=algorithm)
    assert e.value.key == "compressor.name"


def async_refused():
    return [(rm, sel, algo, key) for rm, sel, algo in itertools.product(names("round_mode"), names("selector"),
                                                                          names("algorithm"))
            if (key := async_refusal(rm, sel, algo)) is not None and (key == "algorithm.name" or algo == "fedavg")]


@pytest.mark.parametrize("round_mode,selector,algorithm,key", async_refused())
def test_combinations_that_cannot_run_asynchronously_are_refused(round_mode, selector, algorithm, key, run_combo):
    from turnout.core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        run_combo(round_mode=round_mode, selector=selector, algorithm=algorithm)
    assert e.value.key == key and "asynchronous rounds" in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("availability,selector,round_mode,compressor,algorithm", [
    t for t in itertools.product(names("availability"), names("selector"), names("round_mode"), names("compressor"),
                                 names("algorithm")) if runs((t[2], t[1], t[3], t[4]))])
def test_full_cross_product(availability, selector, round_mode, compressor, algorithm, run_combo):
    run_combo(availability=availability, selector=selector, round_mode=round_mode, compressor=compressor,
              algorithm=algorithm)
