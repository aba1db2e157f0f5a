"""Run golden cases with one real defect planted each, and say whether the golden check catches it.

Run by ``tests/test_sharp_checks.py`` in a process whose CPU kernels are emulated as another machine's
(``ATEN_CPU_CAPABILITY`` / ``MKL_ENABLE_INSTRUCTIONS``), so the comparison takes its cross-CPU path (exact
discrete cells, floats within the tolerance). Prints one JSON object: defect → (verdict, problems).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("golden_hashes", ROOT / "scripts" / "golden_hashes.py")
golden = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(golden)


def _wrap(cls, name, make):
    """Patch ``cls.name`` with ``make(original)`` for the duration of the block."""
    @contextlib.contextmanager
    def patched():
        original = getattr(cls, name)
        setattr(cls, name, make(original))
        try:
            yield
        finally:
            setattr(cls, name, original)
    return patched


def defects():
    from turnout.algorithms.fedavg import FedAvg
    from turnout.config.train import LRSchedule
    from turnout.selectors.uniform import UniformSelector
    from turnout.world.wire import WirePricer

    def uniform_weights(select):
        def f(self, ctx):
            c = select(self, ctx)
            return dataclasses.replace(c, weights=np.ones(len(c.clients)))
        return f

    def drop_one(select):
        def f(self, ctx):
            c = select(self, ctx)
            return dataclasses.replace(c, clients=c.clients[:-1], weights=c.weights[:-1]) if len(c.clients) > 1 else c
        return f

    def off_by_one(download):
        def f(self, clients, round):
            return download(self, clients, round) + 1
        return f

    def lr_off(lr):
        def f(self, base, round, total_rounds):
            return lr(self, base, round, total_rounds) * 1.01
        return f

    def no_momentum(aggregate):
        def f(self, round, global_params, reports):
            self.server_step.m = None  # the buffer forgets: the momentum is ignored
            return aggregate(self, round, global_params, reports)
        return f

    return {
        "none (control)": contextlib.nullcontext,
        "FedAvg weights uniform instead of by samples": _wrap(UniformSelector, "select", uniform_weights),
        "one client dropped from each cohort": _wrap(UniformSelector, "select", drop_one),
        "bytes down off by one": _wrap(WirePricer, "download", off_by_one),
        "learning rate 1 % off": _wrap(LRSchedule, "lr", lr_off),
        "server momentum ignored": _wrap(FedAvg, "aggregate", no_momentum),
    }


def main(cases: list[str]) -> int:
    recorded, tables = json.loads(golden.GOLDEN.read_text()), golden.recorded_tables()
    out = {}
    with tempfile.TemporaryDirectory(prefix="turnout-defects-") as tmp:
        for i, (defect, plant) in enumerate(defects().items()):
            for j, case in enumerate(cases):
                source, overrides = golden.cases()[case]
                with plant():
                    got = golden.run_case_tables(source, overrides, Path(tmp) / f"{i}-{j}")
                verdict, problems = golden.compare(case, got, recorded, tables, same_environment=False)
                out[f"{defect} | {case}"] = [verdict, problems[:2]]
    print(json.dumps({"fingerprint": golden.environment(), "results": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
