"""What only the simulator can run is refused in one line naming the alternative, from the components' own
declarations (``needs_simulator``), never from their names."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from turnout.config.loader import Component, ResolvedExperiment
from turnout.core.capabilities import WorldNeed
from turnout.core.errors import ConfigError
from turnout.flower import check_deployable, require_flower
from turnout.sim.catalogue import registries
from turnout.sim.composition import expand

ROOT = Path(__file__).resolve().parents[2]
BASE = {"rounds": 2, "data": {"name": "digits", "num_clients": 10}, "selector": {"name": "uniform"}}


def refusal(**blocks) -> str:
    raw = copy.deepcopy(BASE)
    raw.update(blocks)
    with pytest.raises(ConfigError) as exc:
        check_deployable(expand(raw)[0])
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_refl_oracle_predictor_is_refused_history_runs():
    msg = refusal(selector={"name": "refl_ips", "predictor": "oracle"})
    assert msg.startswith("selector.predictor = 'oracle': reads future availability")
    assert msg.endswith("use selector.predictor: history (forecasts from each client's observed history)")
    check_deployable(expand({**BASE, "selector": {"name": "refl_ips", "predictor": "history"}})[0])


def test_fedgs_oracle_graph_is_refused_learned_graphs_run():
    assert "use selector.graph: update_cosine" in refusal(selector={"name": "fedgs", "graph": "oracle"})
    for graph in ("update_cosine", "functional"):
        check_deployable(expand({**BASE, "selector": {"name": "fedgs", "graph": graph}})[0])


@pytest.mark.parametrize("opts, key", [({"variant": "cho", "estimate": "full"}, "estimate"),
                                       ({"variant": "cho", "estimate": "cpow"}, "estimate"),
                                       ({"variant": "fedgs"}, "variant"),
                                       ({"variant": "adaptive_ou", "rank_by": "probe"}, "rank_by")])
def test_loss_probes_on_server_side_client_data_are_refused(opts, key):
    msg = refusal(selector={"name": "power_of_choice", **opts})
    assert msg.startswith(f"selector.{key} = ") and "evaluating the clients' training data on the server" in msg
    assert "train_loss" in msg or "rpow" in msg


def test_power_of_choice_without_probes_runs():
    for opts in ({"variant": "cho", "estimate": "rpow"}, {"variant": "adaptive_ou", "rank_by": "train_loss"}):
        check_deployable(expand({**BASE, "selector": {"name": "power_of_choice", **opts}})[0])


def test_server_derived_uploads_cannot_be_compressed_on_devices():
    msg = refusal(algorithm={"name": "fedsum"}, compressor={"name": "topk"})
    assert msg.startswith("compressor.name = 'topk'") and msg.endswith("use compressor.name: none")
    check_deployable(expand({**BASE, "algorithm": {"name": "fedsum"}})[0])


def test_adaptive_ou_and_per_client_evaluation_are_refused():
    assert refusal(algorithm={"name": "adaptive_ou"}).startswith("algorithm.name = 'adaptive_ou'")
    assert refusal(eval={"per_client": True}).startswith("eval.per_client = True")


def test_every_registered_component_answers_for_its_defaults():
    for seam in ("selector", "algorithm", "compressor", "round_mode"):
        for name, cls in registries()[seam]:
            need = cls.needs_simulator(cls.Config())
            assert need is None or isinstance(need, WorldNeed), (seam, name)


def test_a_new_component_declares_its_need_and_is_refused_without_being_named():
    exp = expand(copy.deepcopy(BASE))[0]
    base = exp["selector"]

    class PeeksAtLabels(base.cls):
        @classmethod
        def needs_simulator(cls, cfg):
            return WorldNeed("name", "peeker", "reads every client's labels", "selector.name: uniform")

    comps = dict(exp.components, selector=Component("peeker", PeeksAtLabels, base.cfg))
    with pytest.raises(ConfigError, match=r"^selector.name = 'peeker': reads every client's labels"):
        check_deployable(ResolvedExperiment(exp.variant, exp.config, exp.train, comps))


def test_the_example_refuses_an_oracle_in_one_line_with_exit_code_2():
    out = subprocess.run([sys.executable, str(ROOT / "examples/flower/run.py"), "--variants", "FedAvg",
                          "--set", "selector.name=refl_ips", "--set", "selector.predictor=oracle"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("turnout: error: variants[FedAvg].selector.predictor = 'oracle'")


def test_missing_flower_is_one_line_saying_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "flwr", None)  # import flwr now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install -c constraints.txt 'turnout\[flower\]'"):
        require_flower()
    from turnout.flower import client_app
    with pytest.raises(ConfigError, match="not installed"):
        client_app(lambda context: None)
