"""Which torch device local training runs on: ``runtime.device: cpu | cuda | cuda:N | mps | auto``.

Local training is where a simulation spends its time, so that is what moves: the clients' rows go
to the device once per simulation (:mod:`turnout.training.resident`), an executor trains there, and
evaluation runs there. The cohort's reports stay on the device and are summed there when every
component that reads them declares it can (:func:`turnout.sim.work.report_device`); the client-state
store, the byte ledger and the world stay on the CPU. Minibatch indices come from the same keyed
streams on every device; results on a GPU agree with the CPU's up to float32 reassociation in its
kernels.
"""

from __future__ import annotations

import torch

from .errors import ConfigError


def resolve_device(name: str, key: str = "runtime.device") -> torch.device:
    """The torch device for a config value; an unavailable one is a one-line error naming the fix."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(key, name, "choose cpu, cuda, cuda:N, mps or auto") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(key, name, "no CUDA device is visible to this torch build; use cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(key, name, f"this machine has {torch.cuda.device_count()} CUDA device(s); "
                                         f"use cuda:0 … cuda:{torch.cuda.device_count() - 1}")
    elif device.type == "mps" and not _mps_available():
        raise ConfigError(key, name, "MPS (Apple GPU) is not available here; use cpu or auto")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(key, name, "choose cpu, cuda, cuda:N, mps or auto")
    return device


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())
