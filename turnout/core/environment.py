"""What the numbers of a run depend on besides the code, config and seed: package versions and the CPU kernels.

A run folder records :func:`versions` in ``config.yaml``; ``turnout resume`` compares them with the running
process (:func:`version_changes`) and says so in one line, since a resumed half computed by another numpy or
torch can differ from an uninterrupted run in its last digits. :func:`fingerprint` adds the kernels that pick
the arithmetic's order: their names (OpenBLAS's core type, torch's CPU capability) and, since names miss what
decides the bits (MKL and oneDNN pick their code path by CPU vendor and model, so an Intel and an AMD machine
with the same names add in different orders), a *measured* :func:`float_fingerprint`. The golden checks demand
byte-identical tables only where the whole fingerprint is the recorded one (``docs/determinism.md``).
"""

from __future__ import annotations

import hashlib
import math
import platform
import re
from functools import lru_cache
from importlib import metadata

from . import __version__

#: How far a float of a run's tables may move on another CPU (relative; absolute near zero): the second level of
#: docs/determinism.md, which states for how many rounds it holds and the measured drift that justifies it. The
#: golden and results-page checks compare floats within it where the float fingerprint is not the recorded one.
CROSS_CPU_RTOL = 1e-4
CROSS_CPU_ATOL = 1e-12

#: How close a float must stay to the native run's for a recorded check's horizon: a tenth of the tolerance, so a
#: check cut at its horizon holds across CPUs with a factor 10 of margin (docs/determinism.md).
HORIZON_RTOL = CROSS_CPU_RTOL / 10


def agree_across_cpus(recorded: object, now: object, rtol: float = CROSS_CPU_RTOL) -> bool:
    """Whether ``now`` is what another CPU may give for ``recorded``: integers, strings, flags and ``None``
    exactly, NaN equal to NaN, other floats within relative ``rtol`` (absolute :data:`CROSS_CPU_ATOL` near 0).

    The one comparator of the golden checks, the results pages' slices and the horizons measured for both.
    """
    if recorded is None or now is None:
        return recorded is now
    if isinstance(recorded, bool) or isinstance(now, bool) or isinstance(recorded, str) or isinstance(now, str):
        return recorded == now
    if isinstance(recorded, int) or isinstance(now, int):  # bytes, counts, rounds, ids: exact on every CPU, and
        return type(recorded) is type(now) and recorded == now  # an integer written as a float is a change
    a, b = float(recorded), float(now)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rtol, abs_tol=CROSS_CPU_ATOL)


def parse_cell(text: str) -> object:
    """A CSV cell as the value it holds: ``int`` for an integer, ``float`` for a number, else the text itself
    (an empty cell stays ``""``, so it equals only an empty cell)."""
    if _INTEGER.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


_INTEGER = re.compile(r"^-?[0-9]+$")

#: Distributions whose release can change a number turnout reports (the ones constraints.txt pins for that).
NUMERIC_PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "pandas")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """turnout's, Python's and the numeric packages' versions (what ``config.yaml`` records under ``turnout``)."""
    return {"turnout": __version__, "python": platform.python_version(),
            **{dist: _version(dist) for dist in NUMERIC_PACKAGES}}


def recorded_environment() -> dict[str, str]:
    """What a run folder's ``config.yaml`` records under ``turnout``: :func:`versions` and :func:`float_fingerprint`."""
    return {**versions(), "floats": float_fingerprint()}


def version_changes(recorded: dict) -> list[str]:
    """``"numpy 2.4.5 → 2.4.6"`` for every recorded version (and the float fingerprint, ``floats``, where recorded)
    that differs from this process's (empty: same)."""
    now = {**versions(), **({"floats": float_fingerprint()} if "floats" in recorded else {})}
    return [f"{k} {recorded[k]} → {now[k]}" for k in now if k in recorded and str(recorded[k]) != now[k]]


def blas_kernel() -> str:
    """The OpenBLAS core type numpy runs on here (``SkylakeX``, ``Haswell``, ``Zen`` …), as threadpoolctl reads it."""
    import numpy  # noqa: F401  (loads the BLAS library threadpoolctl inspects)
    from threadpoolctl import threadpool_info  # imported here: only the golden checks and reports need it

    for lib in threadpool_info():
        if lib.get("user_api") == "blas" and "numpy" in str(lib.get("filepath", "")):
            return f"{lib.get('internal_api')}/{lib.get('architecture')}"
    return "unknown"


def _pattern(shape: tuple[int, ...], salt: int):
    """Fixed values in [−0.5, 0.5) made by integer arithmetic: the same bits on every CPU (no RNG kernel involved)."""
    import numpy as np

    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return (((i * 2654435761 + salt * 97) % 10007) / 10007.0 - 0.5).reshape(shape)


def _float_probes() -> dict[str, list]:
    """The float results of a fixed small computation through each kind of kernel turnout's numbers go through."""
    import numpy as np
    import torch  # imported here: `import turnout` stays light
    import torch.nn.functional as F

    def t(shape, salt, grad=False):
        return torch.from_numpy(np.ascontiguousarray(_pattern(shape, salt), dtype=np.float32)).requires_grad_(grad)

    y = torch.from_numpy(np.arange(100, dtype=np.int64) % 10)
    x, cw, lw, lb = t((64, 3, 16, 16), 1), t((8, 3, 3, 3), 2, True), t((10, 8 * 14 * 14), 3, True), t((10,), 4, True)
    out = F.conv2d(x, cw).relu().flatten(1) @ lw.T + lb  # conv (oneDNN / ATen), matmul (MKL)
    loss = F.cross_entropy(out, y[:64])
    loss.backward()
    a, w1, w2 = t((100, 784), 5), t((200, 784), 6, True), t((10, 200), 7, True)  # an MLP's linear layers
    o = F.linear(F.linear(a, w1).relu(), w2)
    F.cross_entropy(o, y).backward()
    lstm = torch.nn.LSTM(8, 16, batch_first=True)  # a recurrent model (oneDNN's RNN kernels)
    with torch.no_grad():
        for k, p in enumerate(lstm.parameters()):
            p.copy_(t(tuple(p.shape), 10 + k))
    seq, _ = lstm(t((4, 12, 8), 9))
    seq.sum().backward()
    # the optimiser's step (ATen's vectorised loops), three times, written as the trainer writes it
    # (turnout.training.local_sgd): torch.optim's first use imports torch._dynamo, 1.5 s of every run's start
    p, velocity = t((1000,), 20), torch.zeros(1000)
    for _ in range(3):
        q = p.detach().requires_grad_(True)
        (g,) = torch.autograd.grad((q.sin() * q).sum(), q)
        g = g + 1e-4 * p
        velocity = 0.9 * velocity + g
        p = p - 0.1 * velocity
    v = t((50, 5000), 21)  # reductions and the weighted sum of reports
    an = _pattern((64, 64), 23)  # numpy through OpenBLAS
    return {"conv": [out, loss, cw.grad, lw.grad, lb.grad], "mlp": [o, w1.grad, w2.grad],
            "lstm": [seq, *[q.grad for q in lstm.parameters()]], "sgd": [p],
            "reduce": [v.sum(0), v.sum(), v.norm(dim=1), t((50,), 22) @ v, v.double().sum(0)],
            "numpy": [an @ an.T, an.sum(0), np.array(an.ravel() @ an.ravel())]}


@lru_cache(maxsize=1)
def float_fingerprint() -> str:
    """A hash of the bits of :func:`_float_probes`: what this process's kernels actually compute.

    Two processes with the same versions and the same hash add in the same order in every kernel probed (a
    convolution, an MLP's and an LSTM's forward and backward pass, the optimiser's step, reductions, numpy's
    matrix product); another CPU vendor or model, ``ATEN_CPU_CAPABILITY``, ``OPENBLAS_CORETYPE``,
    ``MKL_ENABLE_INSTRUCTIONS`` or ``ONEDNN_MAX_CPU_ISA`` changes it (``tests/test_portability.py``).
    """
    import numpy as np
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as runs train (runtime.torch_threads); a reduction's split depends on it
    try:
        with torch.random.fork_rng(devices=[]):  # the LSTM's construction draws from the global generator
            probes = _float_probes()
    finally:
        torch.set_num_threads(threads)
    h = hashlib.sha256()
    for name, values in sorted(probes.items()):
        h.update(name.encode())
        for v in values:
            arr = v.detach().contiguous().numpy() if isinstance(v, torch.Tensor) else np.ascontiguousarray(v)
            h.update(arr.tobytes())
    return h.hexdigest()[:16]


def fingerprint() -> dict[str, str]:
    """:func:`versions`, the machine, the kernels' names and :func:`float_fingerprint` (what decides the bits)."""
    import torch  # imported here: `import turnout` stays light

    return {**versions(), "machine": platform.machine(), "numpy_blas": blas_kernel(),
            "torch_cpu": str(torch.backends.cpu.get_cpu_capability()), "floats": float_fingerprint()}
