"""Record Adaptive-OU's client threshold rule and server OU estimate from the authors' code.

Authors' code: ``mriberodiaz/selection_ou_weights`` (TensorFlow Federated), ``optimization/shared/``:
``estimation_utils.py`` (the client's send-or-NACK rule) and ``fed_avg_schedule_{ou,zero,ignore}.py``
(``server_update``: the server step, the rolling OU sums, the fit and the prediction; the threshold
``mean − std`` of the round's norms; ``build_server_init_fn``: the initial server state).

Run it with TensorFlow 2.15 (Keras 2, whose legacy SGD has the ``variables()`` method the code calls)
in a venv of its own, never turnout's::

    python3.11 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.15.1 attrs
    /tmp/tfvenv/bin/python scripts/conformance/adaptive_ou.py --checkout /path/to/selection_ou_weights

TensorFlow Federated is not installed (the code needs TFF ≈0.17, which no longer installs); the
recorder stubs only its plumbing and calls the authors' TensorFlow functions themselves, eagerly
(``tf.config.run_functions_eagerly``), in float32 as the code runs them. Stubbed:

* ``tff.learning.ModelWeights`` (a ``(trainable, non_trainable)`` pair), ``tff.utils.assign``
  (variable ← value over a structure), ``tff.utils.update_state`` (``attr.evolve``),
  ``tff.tf_computation`` (the identity: ``build_server_init_fn``'s body runs as plain Python);
* ``tensor_utils.zero_all_if_any_non_finite``: returns its input; it raises if any value is
  non-finite, so the records never depend on the stub (the code's element-wise NaN/Inf zeroing of
  ``A`` in ``calc_A`` is the authors' and is exercised by a coordinate that never moves). The stub
  also keeps a copy of what it is given: ``server_update`` passes it the fitted ``A`` and ``B``,
  which is how they are recorded;
* the model: a two-tensor linear layer (kernel 3×4, bias 4) holding ``tf.Variable``s;
* ``run_one_round`` (a ``tff.federated_computation``): its intrinsics are replaced by the loop in
  :func:`run_round` — each client's update goes through the authors' ``threshold_weights_global_norm``
  (``..._without_dec`` for ``ignore``), ``tff.federated_mean(v, weight=w)`` is the float32
  ``Σ w·v / Σ w``, the per-client variance term is the authors' ``client_center_square_grad``, and
  the server step is ``server_update_fn``'s body (a fresh Keras SGD at the server lr,
  ``_initialize_optimizer_vars``, ``server_update``). Which weight each mean takes follows each
  variant's ``run_one_round`` line by line (see :data:`WEIGHTS`).

Local training is not driven: each client's model delta is a recorded input (the engine's training
produces it in turnout). The deltas pull the model towards a fixed point, so the OU fit has a real
mean-reverting path to fit, and vary in size between clients, so the threshold makes NACKs.
"""

from __future__ import annotations

import collections
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"  # plain Eigen kernels: the same float32 rounding on every CPU

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit_of, parse_args, write_record  # noqa: E402

MECHANISM = "adaptive_ou"
REPO = "mriberodiaz/selection_ou_weights"
SOURCE = ("optimization/shared/estimation_utils.py: threshold_weights_global_norm, "
          "threshold_weights_global_norm_without_dec; "
          "optimization/shared/fed_avg_schedule_{ou,zero,ignore}.py: server_update, build_server_init_fn, "
          "_initialize_optimizer_vars, client_center_square_grad (run_one_round's weights)")

KERNEL, BIAS = (3, 4), (4,)
DIM = 3 * 4 + 4
FROZEN = DIM - 1  # the last bias entry: never moves (exercises the code's 0/0 → A = 0 path)
NUM_CLIENTS = 12
N_SAMPLES = np.array([12, 40, 25, 7, 60, 33, 18, 50, 9, 28, 44, 15])

# (mean of the norms, their variance, the model delta): which weight each tff.federated_mean takes in
# each variant's run_one_round. real = n_k (examples processed); client = the variant's client_weight.
WEIGHTS = {"ou": ("real", "real", "client"),  # client_weight = n_k there (finite updates)
           "zero": ("client", "client", "client"),  # client_weight = n_k
           "ignore": ("real", "client", "client")}  # client_weight = n_k · transmitted

CAPTURED: list = []  # what zero_all_if_any_non_finite was handed, in call order


def install_tff_stubs():
    """Put a minimal ``tensorflow_federated`` in ``sys.modules`` (see the module docstring)."""
    import attr
    import tensorflow as tf

    class ModelWeights(collections.namedtuple("ModelWeights", ["trainable", "non_trainable"])):
        @classmethod
        def from_model(cls, model):
            return model.weights

    def assign(target, source):
        tf.nest.map_structure(lambda t, s: t.assign(s), target, source)

    def tf_computation(*args):
        if len(args) == 1 and callable(args[0]):
            return args[0]
        return lambda fn: fn

    def zero_all_if_any_non_finite(structure):
        flat = tf.nest.flatten(structure)
        if not all(bool(tf.reduce_all(tf.math.is_finite(t))) for t in flat):
            raise RuntimeError("a non-finite value reached zero_all_if_any_non_finite: change the inputs")
        CAPTURED.append(np.concatenate([np.asarray(t).reshape(-1) for t in flat]))
        return structure, tf.constant(0)

    tff = types.ModuleType("tensorflow_federated")
    tff.learning = types.SimpleNamespace(Model=object, ModelWeights=ModelWeights)
    tff.templates = types.SimpleNamespace(IterativeProcess=object)
    tff.utils = types.SimpleNamespace(assign=assign, update_state=lambda state, **kw: attr.evolve(state, **kw))
    tff.tf_computation = tf_computation
    python = types.ModuleType("tensorflow_federated.python")
    libs = types.ModuleType("tensorflow_federated.python.tensorflow_libs")
    tensor_utils = types.ModuleType("tensorflow_federated.python.tensorflow_libs.tensor_utils")
    tensor_utils.zero_all_if_any_non_finite = zero_all_if_any_non_finite
    common_libs = types.ModuleType("tensorflow_federated.python.common_libs")
    common_libs.py_typecheck = types.ModuleType("tensorflow_federated.python.common_libs.py_typecheck")
    tff.python, python.tensorflow_libs, python.common_libs = python, libs, common_libs
    libs.tensor_utils = tensor_utils
    sys.modules.update({
        "tensorflow_federated": tff, "tensorflow_federated.python": python,
        "tensorflow_federated.python.tensorflow_libs": libs,
        "tensorflow_federated.python.tensorflow_libs.tensor_utils": tensor_utils,
        "tensorflow_federated.python.common_libs": common_libs,
        "tensorflow_federated.python.common_libs.py_typecheck": common_libs.py_typecheck})
    return tff


def flat(structure) -> np.ndarray:
    """A kernel/bias structure as one float32 vector (kernel row-major, then bias), as turnout flattens."""
    import tensorflow as tf
    return np.concatenate([np.asarray(t, np.float32).reshape(-1) for t in tf.nest.flatten(structure)])


def unflat(v: np.ndarray):
    import tensorflow as tf
    v = np.asarray(v, np.float32)
    return [tf.constant(v[:12].reshape(KERNEL)), tf.constant(v[12:].reshape(BIAS))]


def snapshot(state):
    """The state with every variable read into a constant (the code's state is a value, not variables)."""
    import attr
    import tensorflow as tf
    read = {f.name: tf.nest.map_structure(lambda v: tf.constant(np.array(v)), getattr(state, f.name))
            for f in attr.fields(type(state)) if f.name != "round_num"}
    return attr.evolve(state, **read)


class LinearModel:
    """Stands in for the ``tff.learning.Model``: ``server_update`` only reads and writes its weights."""

    def __init__(self, x0: np.ndarray, tff):
        import tensorflow as tf
        self._mw = tff.learning.ModelWeights([tf.Variable(t) for t in unflat(x0)], [])

    @property
    def weights(self):
        return self._mw


def run_round(mod, variant: str, state, deltas: np.ndarray, n: np.ndarray, server_lr: float, tff) -> tuple:
    """One ``run_one_round`` of ``variant``: the clients' send-or-NACK, the weighted means, ``server_update_fn``."""
    import tensorflow as tf
    from optimization.shared import estimation_utils

    threshold = state.threshold
    send = (estimation_utils.threshold_weights_global_norm_without_dec if variant == "ignore"
            else estimation_utils.threshold_weights_global_norm)
    outs, sent, norms = [], [], []
    for d in deltas:
        out, transmitted, norm = send(structure=unflat(d), replace_structure=state.predicted_delta, thresh=threshold)
        outs.append(out)
        sent.append(int(transmitted))
        norms.append(norm)
    real = [tf.constant(float(k), tf.float32) for k in n]  # real_client_weight = num_examples
    client = [r * float(s) for r, s in zip(real, sent)] if variant == "ignore" else real
    pick = {"real": real, "client": client}
    w_mean, w_var, w_delta = (pick[k] for k in WEIGHTS[variant])

    def federated_mean(values, weights):  # tff.federated_mean(values, weight=weights), in float32
        total = tf.add_n(weights)
        return tf.nest.map_structure(lambda *vs: tf.add_n([w * v for w, v in zip(weights, vs)]) / total, *values)

    mean = federated_mean(norms, w_mean)
    var = federated_mean([mod.client_center_square_grad(m, mean) for m in norms], w_var)
    model_delta = federated_mean(outs, w_delta)
    replacement = flat(state.predicted_delta)

    # server_update_fn's body
    model = LinearModel(np.zeros(DIM, np.float32), tff)
    opt = tf.keras.optimizers.legacy.SGD(learning_rate=server_lr)
    mod._initialize_optimizer_vars(model, opt)
    CAPTURED.clear()
    new = snapshot(mod.server_update(model, opt, state, model_delta, sum(sent), mean, var))
    row = {"threshold": float(threshold), "replacement": replacement, "transmitted": sent,
           "norms": [float(m) for m in norms], "norm_mean": float(mean), "norm_var": float(var),
           "model_delta": flat(model_delta), "model_after": flat(new.model.trainable),
           "threshold_after": float(new.threshold), "num_participants": int(new.num_participants)}
    if variant == "ou":
        row.update(predicted_after=flat(new.predicted_delta),
                   sums_after={s: flat(getattr(new, s)) for s in ("Sx", "Sxx", "Sy", "Syy", "Sxy")},
                   a=CAPTURED[0] if len(CAPTURED) == 3 else None, b=CAPTURED[1] if len(CAPTURED) == 3 else None)
    return new, row


def case(mod, variant: str, seed: int, rounds: int, cohort: int, server_lr: float, tff) -> dict:
    """``rounds`` rounds of ``variant`` from the authors' initial state, each client's delta drawn from ``seed``."""
    import tensorflow as tf
    rs = np.random.default_rng(seed)
    x0 = rs.normal(0.0, 1.0, DIM).astype(np.float32)
    x0[FROZEN] = 0.5
    target = x0 + rs.choice([-1.0, 1.0], DIM) * rs.uniform(1.5, 2.5, DIM)  # far from x0 in every coordinate
    scale = rs.lognormal(0.0, 0.6, NUM_CLIENTS)  # per-client update size: what the threshold sorts on

    init = mod.build_server_init_fn(lambda: LinearModel(x0, tff),
                                    lambda: tf.keras.optimizers.legacy.SGD(learning_rate=server_lr))
    state = snapshot(init())
    out = []
    for _ in range(rounds):
        clients = np.sort(rs.choice(NUM_CLIENTS, size=cohort, replace=False))
        x = flat(state.model.trainable).astype(np.float64)
        noise = rs.normal(0.0, 0.3, (cohort, DIM))
        deltas = (scale[clients, None] * (0.4 * (target - x) + noise)).astype(np.float32)
        deltas[:, FROZEN] = 0.0
        state, row = run_round(mod, variant, state, deltas, N_SAMPLES[clients], server_lr, tff)
        margin = np.min(np.abs(np.array(row["norms"]) - row["threshold"]))
        assert margin > 1e-3 * max(row["threshold"], 1.0), f"seed {seed}: a norm within 1e-3 of the threshold"
        out.append({"clients": clients, "deltas": deltas, **row})
    return {"variant": variant, "seed": seed, "server_lr": server_lr, "num_clients": NUM_CLIENTS,
            "n_samples": N_SAMPLES, "x0": x0, "rounds": out}


def main(argv=None) -> None:
    args = parse_args(MECHANISM, REPO, argv)
    tff = install_tff_stubs()
    import tensorflow as tf
    tf.config.run_functions_eagerly(True)
    sys.path.insert(0, str(args.checkout.resolve()))
    from optimization.shared import fed_avg_schedule_ignore, fed_avg_schedule_ou, fed_avg_schedule_zero
    mods = {"ou": fed_avg_schedule_ou, "zero": fed_avg_schedule_zero, "ignore": fed_avg_schedule_ignore}
    cases = [case(mods["ou"], "ou", seed=1, rounds=10, cohort=8, server_lr=1.0, tff=tff),
             case(mods["ou"], "ou", seed=2, rounds=8, cohort=6, server_lr=0.7, tff=tff),
             case(mods["zero"], "zero", seed=3, rounds=6, cohort=8, server_lr=1.0, tff=tff),
             case(mods["ignore"], "ignore", seed=4, rounds=6, cohort=8, server_lr=1.0, tff=tff)]
    write_record(args.out, mechanism=MECHANISM, repo=REPO, commit=commit_of(args.checkout), source=SOURCE,
                 cases=cases)


if __name__ == "__main__":
    main()
