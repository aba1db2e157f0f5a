"""What the server tells a device each round, and what the device reports back.

An :class:`Instruction` carries everything turnout's client rule needs that the device does not
hold itself: the coordinates of the global model its copy lacks (exactly what the coordinate
ledger charges), the local objective the algorithm's server-held state decides (FedProx's μ,
SCAFFOLD's or FedSUM's correction vector), the number of steps and the learning rate, the
device's own aggregation weight and tags (what the compressor's encoding reads of the cohort; not
the other members), and the compressor's shipped state (a shared or frozen mask). A
:class:`Report` carries the encoded upload, what the compressor charged for it, the training loss,
the samples processed and the device's own timings.

Both are plain numpy arrays plus scalar dicts (:meth:`Instruction.to_parts`), so the transport
that puts them into Flower records (:mod:`turnout.flower.transport`) is the only module that knows
Flower's types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..training.local_sgd import LocalObjective
from . import codec

#: Flower message type of a round's instruction and of the start-up registration (``<category>.<action>``).
TRAIN_TYPE, REGISTER_TYPE = "train.turnout", "query.turnout"


def _tensor_parts(prefix: str, tensors: dict[str, torch.Tensor], arrays: dict, config: dict) -> None:
    """Named tensors into ``arrays``/``config``: bool tensors as coordinate sets, others dense.

    Empty lists are left out of ``config`` (Flower's ``ConfigRecord.count_bytes`` fails on them).
    """
    if tensors:
        config[f"{prefix}names"] = list(tensors)
    for name, t in tensors.items():
        a = t.detach().cpu().numpy()
        if a.dtype == bool:
            form, parts = codec.encode_mask(a)
            config[f"{prefix}{name}.form"] = form
            arrays.update({f"{prefix}{name}.{k}": v for k, v in parts.items()})
        else:
            arrays[f"{prefix}{name}"] = np.ascontiguousarray(a)


def _tensors_from_parts(prefix: str, arrays: dict, config: dict, dim: int) -> dict[str, torch.Tensor]:
    out = {}
    for name in config.get(f"{prefix}names", []):
        form = config.get(f"{prefix}{name}.form")
        if form is None:
            out[name] = torch.from_numpy(np.array(arrays[f"{prefix}{name}"]))
        else:
            sub = {k[len(f"{prefix}{name}."):]: v for k, v in arrays.items() if k.startswith(f"{prefix}{name}.")}
            out[name] = torch.from_numpy(codec.decode_mask(form, sub, dim))
    return out


def _sub(arrays: dict, prefix: str) -> dict[str, np.ndarray]:
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


@dataclass
class Instruction:
    """One device's work in one round (built by the server, read by :class:`turnout.flower.device.DeviceRule`)."""

    round: int
    client: int
    seed: int
    steps: int
    lr: float
    base_round: int  # the last round the device's model copy includes, as the server believes
    sync_form: str
    sync: dict[str, np.ndarray]  # the lacking coordinates of the global model (codec.encode_values)
    weight: float  # the device's aggregation weight, normalised over the cohort when weights are relative
    tags: dict[str, bool] = field(default_factory=dict)  # the device's cohort tags (GlueFL's "sticky")
    start: np.ndarray | None = None  # where training starts when the algorithm's start is not the global model
    objective: LocalObjective | None = None
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    compressor_state: dict[str, torch.Tensor] = field(default_factory=dict)
    send_end: bool = False  # report the trained parameters: the server derives the upload (client_update)

    def to_parts(self) -> tuple[dict[str, np.ndarray], dict]:
        arrays = {f"sync.{k}": v for k, v in self.sync.items()}
        config = {"round": self.round, "client": self.client, "seed": self.seed, "steps": self.steps, "lr": self.lr,
                  "base_round": self.base_round, "sync.form": self.sync_form, "weight": self.weight,
                  "send_end": self.send_end}
        if self.tags:
            config["tags"] = list(self.tags)
        config.update({f"tag.{k}": bool(v) for k, v in self.tags.items()})
        if self.start is not None:
            arrays["start"] = np.asarray(self.start, dtype=np.float32)
        obj = self.objective
        if obj is not None:
            config.update({"objective.scale": float(obj.scale), "objective.prox_mu": float(obj.prox_mu),
                           "objective.freeze": bool(obj.freeze)})
            if obj.offset is not None:
                arrays["objective.offset"] = obj.offset.detach().cpu().numpy().astype(np.float32)
        _tensor_parts("buffer.", self.buffers, arrays, config)
        _tensor_parts("compressor.", self.compressor_state, arrays, config)
        return arrays, config

    @classmethod
    def from_parts(cls, arrays: dict[str, np.ndarray], config: dict, dim: int) -> "Instruction":
        objective = None
        if "objective.scale" in config:
            offset = arrays.get("objective.offset")
            objective = LocalObjective(offset=None if offset is None else torch.from_numpy(np.array(offset)),
                                       scale=float(config["objective.scale"]),
                                       prox_mu=float(config["objective.prox_mu"]),
                                       freeze=bool(config["objective.freeze"]))
        start = arrays.get("start")
        return cls(round=int(config["round"]), client=int(config["client"]), seed=int(config["seed"]),
                   steps=int(config["steps"]), lr=float(config["lr"]), base_round=int(config["base_round"]),
                   sync_form=str(config["sync.form"]), sync=_sub(arrays, "sync."), weight=float(config["weight"]),
                   tags={k: bool(config[f"tag.{k}"]) for k in config.get("tags", [])},
                   start=None if start is None else np.array(start, dtype=np.float32), objective=objective,
                   buffers=_tensors_from_parts("buffer.", arrays, config, dim),
                   compressor_state=_tensors_from_parts("compressor.", arrays, config, dim),
                   send_end=bool(config.get("send_end", False)))

    def model_bytes(self) -> int:
        """Payload bytes of the model-sized arrays (sync, start, correction, buffers, compressor state)."""
        arrays, _ = self.to_parts()
        return codec.nbytes(arrays)


@dataclass
class Report:
    """What one device sends back for one instruction."""

    round: int
    client: int
    form: str = codec.EMPTY  # the upload (codec.encode_values), or the trained parameters when asked for them
    upload: dict[str, np.ndarray] = field(default_factory=dict)
    grad_sum: np.ndarray | None = None  # Σ of the minibatch gradients at the start point (frozen objectives)
    upload_bytes: int = 0  # what the compressor charged for the upload
    mean_loss: float = float("nan")
    samples: int = 0
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    train_s: float = 0.0  # the device's seconds of local training and encoding
    started_at: float = 0.0  # the device's wall clock when it began (after applying the model sync)
    resync: bool = False  # the device's model copy is not the one the server assumed: nothing was trained

    def to_parts(self) -> tuple[dict[str, np.ndarray], dict, dict]:
        arrays = {f"upload.{k}": v for k, v in self.upload.items()}
        if self.grad_sum is not None:
            arrays["grad_sum"] = np.asarray(self.grad_sum, dtype=np.float32)
        config = {"round": self.round, "client": self.client, "form": self.form, "resync": self.resync}
        _tensor_parts("buffer.", self.buffers, arrays, config)
        metrics = {"upload_bytes": int(self.upload_bytes), "mean_loss": float(self.mean_loss),
                   "samples": int(self.samples), "train_s": float(self.train_s), "started_at": float(self.started_at)}
        return arrays, config, metrics

    @classmethod
    def from_parts(cls, arrays: dict[str, np.ndarray], config: dict, metrics: dict, dim: int) -> "Report":
        grad_sum = arrays.get("grad_sum")
        return cls(round=int(config["round"]), client=int(config["client"]), form=str(config["form"]),
                   upload=_sub(arrays, "upload."), grad_sum=None if grad_sum is None else np.array(grad_sum),
                   upload_bytes=int(metrics["upload_bytes"]), mean_loss=float(metrics["mean_loss"]),
                   samples=int(metrics["samples"]), buffers=_tensors_from_parts("buffer.", arrays, config, dim),
                   train_s=float(metrics["train_s"]), started_at=float(metrics["started_at"]),
                   resync=bool(config["resync"]))

    def vector(self, dim: int) -> torch.Tensor:
        """The upload (or trained parameters) as a dense float32 vector."""
        return torch.from_numpy(codec.sparse_vector(self.form, self.upload, dim))

    def model_bytes(self) -> int:
        arrays, _, _ = self.to_parts()
        return codec.nbytes(arrays)


__all__ = ["Instruction", "REGISTER_TYPE", "Report", "TRAIN_TYPE"]
