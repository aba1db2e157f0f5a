"""The server step: how a rule's aggregated direction becomes the next global model, in one place.

A server rule (:meth:`~turnout.algorithms.base.Algorithm.server_direction`) says where the model should move,
a pseudo-gradient pointing downhill (FedAvg's weighted mean of deltas, MIFA's memory mean, SAFA's cache target
minus the model, ...). The step applies it, as Reddi et al. (ICLR 2021, "Adaptive federated optimization",
Algorithm 2) frame every server optimiser:

    sgd       x ← x + η_g(t) · d            (momentum β: b ← β b + d, step b; Nesterov: step d + β b)
    adam      m ← β₁ m + (1 − β₁) d,  v ← β₂ v + (1 − β₂) d²
    yogi      m as adam,              v ← v − (1 − β₂) d² · sign(v − d²)
    adagrad   m as adam,              v ← v + d²
              x ← x + η_g(t) · m / (√v + τ)            (no bias correction)

``η_g(t) = max(lr · decay^⌊t / every⌋, lr_min)`` once one decay has happened. ``init``: ``reddi`` starts
from ``m = 0, v = τ²``; ``fedscale`` (FedScale / REFL's YoGi class) lets the first direction set ``m = d``,
``v = d²`` and applies ``d`` unchanged. A round whose rule proposes nothing (``None``: no report arrived)
moves neither the model nor the step's state.

Every rule with a ``server_step`` option takes every step; a rule that sets the model outright (FedAsync's
mixing) has no such option, and FedSUM, whose FedSUM-CR clients invert ``x ← x − γ_t y``, takes plain SGD only.

Differential privacy (or any other change of the aggregate before it is applied) plugs in as a *transform*:
``ServerStep(cfg, transforms=[clip_and_noise])`` calls each ``transform(round, direction)`` in order, on the
direction the rule proposed, before the optimiser sees it (noise on the aggregate, then Adam on the noisy one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Optional, Sequence

import torch
from pydantic import Field, model_serializer, model_validator

from ..config.base import StrictModel
from ..config.limits import MAX_ROUNDS, MAX_SCALE, MAX_SERVER_LR
from ..core.state import Stateful

#: the steps with moments (m, v): Reddi et al.'s adaptive federated optimisers
ADAPTIVE = ("adam", "yogi", "adagrad")
#: options only the adaptive steps read, and those only SGD reads (refused with the other kind)
_ADAPTIVE_KEYS = ("beta1", "beta2", "tau", "init")
_SGD_KEYS = ("momentum", "nesterov")


class ServerStepConfig(StrictModel):
    """``server_step: {name: sgd | adam | yogi | adagrad, lr, lr_decay, ..., momentum, nesterov, beta1, ...}``."""

    name: Literal["sgd", "adam", "yogi", "adagrad"] = Field(
        "sgd", description="sgd: x ← x + η_g·d (with momentum / Nesterov); adam, yogi, adagrad: Reddi et al.'s "
                           "adaptive server optimisers on d")
    lr: Optional[float] = Field(None, gt=0.0, le=MAX_SERVER_LR,
                                description=f"η_g (at most {MAX_SERVER_LR:g}); default 1 for sgd, 1e-2 for adam / "
                                            "yogi / adagrad")
    lr_decay: float = Field(1.0, gt=0.0, le=1.0, description="multiply η_g by this every lr_decay_every rounds")
    lr_decay_every: int = Field(1, ge=1, le=MAX_ROUNDS, description="rounds between two decays of η_g")
    lr_min: float = Field(0.0, ge=0.0, le=MAX_SERVER_LR, description="floor of the decayed η_g")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="sgd: β of the server momentum (FedAvgM; 0 = none)")
    nesterov: bool = Field(False, description="sgd: Nesterov momentum (step d + β·b instead of b)")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="adam / yogi / adagrad: decay of the first moment m")
    beta2: float = Field(0.99, ge=0.0, lt=1.0, description="adam / yogi: decay of the second moment v")
    tau: float = Field(1e-3, gt=0.0, le=MAX_SCALE, description="adam / yogi / adagrad: τ in m / (√v + τ)")
    init: Literal["reddi", "fedscale"] = Field(
        "reddi", description="reddi: m = 0, v = τ²; fedscale: the first direction sets m = d, v = d² and is "
                             "applied as is (REFL's YoGi)")

    @model_validator(mode="after")
    def _keys_of_the_step(self):
        fields = type(self).model_fields
        given = [k for k in self.model_fields_set if getattr(self, k) != fields[k].default]  # a resolved config
        if self.name == "sgd":                                                               # repeats defaults
            wrong = [k for k in _ADAPTIVE_KEYS if k in given]
            if wrong:
                raise ValueError(f"{wrong[0]} is an option of the adaptive steps (adam, yogi, adagrad); with name: "
                                 "sgd leave it out")
        else:
            wrong = [k for k in _SGD_KEYS if k in given]
            if wrong:
                raise ValueError(f"{wrong[0]} is an option of name: sgd; {self.name} keeps its own moments")
        if self.nesterov and self.momentum == 0.0:
            raise ValueError("nesterov needs a momentum: set momentum (e.g. 0.9) or leave nesterov false")
        return self

    @property
    def base_lr(self) -> float:
        return self.lr if self.lr is not None else (1.0 if self.name == "sgd" else 1e-2)

    def lr_at(self, round: int) -> float:
        """η_g used to apply round ``round``'s direction."""
        decays = max(0, int(round)) // self.lr_decay_every
        if self.lr_decay == 1.0 or decays == 0:
            return self.base_lr
        return max(self.base_lr * self.lr_decay ** decays, self.lr_min)

    @property
    def plain(self) -> bool:
        """SGD without momentum: the step a rule that inverts its own recursion (FedSUM-CR) can take."""
        return self.name == "sgd" and self.momentum == 0.0


class ServerStepOption(StrictModel):
    """The ``server_step`` option of a rule's config (absent = the rule's own keys decide, as before).

    Left out of the resolved config when not given, so that configs written before it existed keep their
    hash (the results pages compare them).
    """

    server_step: Optional[ServerStepConfig] = Field(
        None, description="the server step applied to the rule's direction: {name: sgd | adam | yogi | adagrad, lr, "
                          "lr_decay, lr_decay_every, lr_min, momentum, nesterov, beta1, beta2, tau, init}; "
                          "absent: the rule's server_lr* keys (and server_momentum / server_optimizer) decide")

    #: the keys that spelled the step before ``server_step`` existed (refused next to it)
    legacy_step_keys: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_absent_step(self, handler: Any) -> dict:
        out = handler(self)
        if isinstance(out, dict) and out.get("server_step", 0) is None:
            out.pop("server_step")
        return out

    @model_validator(mode="after")
    def _one_place(self):
        if self.server_step is not None:
            for key in self.legacy_step_keys:
                field = type(self).model_fields[key]
                if getattr(self, key) != field.get_default(call_default_factory=True):
                    raise ValueError(f"{key} and server_step both set the server step: give it once, in "
                                     f"server_step (e.g. server_step: {{name: sgd, lr: ...}})")
        return self

    def step_config(self) -> ServerStepConfig:
        """The server step these options ask for (``server_step``, or the rule's own keys)."""
        return self.server_step if self.server_step is not None else self.legacy_step()

    def legacy_step(self) -> ServerStepConfig:
        return ServerStepConfig()


class ServerLRSchedule(StrictModel):
    """The server learning rate η_g and its step decay, the old spelling of ``server_step``'s schedule.

    ``η_g(t) = max(server_lr · decay^⌊t / every⌋, server_lr_min)`` once at least one decay has
    happened (``t`` is the 0-based round), so the first ``every`` rounds use ``server_lr`` itself.
    GlueFL's ``lr ← max(0.98·lr, 5e−5)`` every 10 rounds (GlueFL §5.1, as coded) is ``server_lr_decay: 0.98,
    server_lr_decay_every: 10, server_lr_min: 5e-5``. The default (decay 1) keeps η_g constant.
    """

    server_lr: float = Field(1.0, gt=0.0, le=MAX_SERVER_LR,
                             description=f"η_g: x ← x + η_g · update (at most {MAX_SERVER_LR:g})")
    server_lr_decay: float = Field(1.0, gt=0.0, le=1.0,
                                   description="multiply η_g by this every server_lr_decay_every rounds (1 = constant)")
    server_lr_decay_every: int = Field(1, ge=1, le=MAX_ROUNDS, description="rounds between two decays of η_g")
    server_lr_min: float = Field(0.0, ge=0.0, le=MAX_SERVER_LR, description="floor of the decayed η_g")

    def schedule(self) -> dict[str, float]:
        """These keys as ``server_step``'s."""
        return {"lr": self.server_lr, "lr_decay": self.server_lr_decay,
                "lr_decay_every": self.server_lr_decay_every, "lr_min": self.server_lr_min}


class AdaptiveOptions(ServerLRSchedule):
    """Adam / Yogi options spelled flat (FedAdam, FedYogi, FedBuff's and REFL's ``server_optimizer``)."""

    server_lr: float = Field(1e-2, gt=0.0, le=MAX_SERVER_LR,
                             description=f"η_g of the adaptive server step (at most {MAX_SERVER_LR:g})")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="β₁: decay of the first moment m")
    beta2: float = Field(0.99, ge=0.0, lt=1.0, description="β₂: decay of the second moment v")
    tau: float = Field(1e-3, gt=0.0, le=MAX_SCALE, description="τ: adaptivity floor in m / (√v + τ)")
    init: Literal["reddi", "fedscale"] = Field(
        "reddi",
        description="reddi: m = 0, v = τ²; fedscale: the first round's Δ sets m = Δ, v = Δ² and is applied as is")

    def adaptive(self, name: str) -> ServerStepConfig:
        """These options as the ``name`` (adam / yogi) server step."""
        return ServerStepConfig(name=name, beta1=self.beta1, beta2=self.beta2, tau=self.tau, init=self.init,
                                **self.schedule())


class ServerOptimizer(AdaptiveOptions):
    """``server_optimizer: {name: none | adam | yogi, server_lr, beta1, beta2, tau, init}`` (FedBuff, REFL's
    stale-aware rule): the old spelling of ``server_step: {name: adam | yogi, ...}``; ``none``: the rule's SGD."""

    name: Literal["none", "adam", "yogi"] = Field(
        "none", description="none: x ← x + η_g·aggregate; yogi / adam: the FedYogi / FedAdam server step on the "
                            "aggregate (REFL: yogi with init fedscale, server_lr 3e-3, tau 1e-8, beta2 0.99)")


class ServerOptimizerOption(StrictModel):
    """Mixin of a rule's config that kept its ``server_optimizer`` key: with an optimiser named, the rule's own
    SGD keys (``server_lr``, ``server_lr_decay``, ``server_momentum``, ...) must stay at their defaults."""

    server_optimizer: ServerOptimizer = Field(
        default_factory=ServerOptimizer,
        description="adaptive server step on the aggregate: {name: none | yogi | adam, server_lr, beta1, beta2, tau, "
                    "init}; default none (the old spelling of server_step)")

    @model_validator(mode="after")
    def _one_step_size(self):
        if self.server_optimizer.name != "none":
            fields = type(self).model_fields
            for key in self.legacy_step_keys:
                if key != "server_optimizer" and getattr(self, key) != fields[key].get_default():
                    raise ValueError(f"with a server_optimizer the step size is server_optimizer.server_lr; leave "
                                     f"{key} at {fields[key].get_default()!r}")
        return self

    def legacy_step(self) -> ServerStepConfig:
        opt = self.server_optimizer
        return opt.adaptive(opt.name) if opt.name != "none" else super().legacy_step()


class ServerLRConfig(ServerStepOption, ServerLRSchedule):
    """A rule's config with the server step: ``server_step``, or the old ``server_lr*`` keys (plain SGD)."""

    legacy_step_keys: ClassVar[tuple[str, ...]] = ("server_lr", "server_lr_decay", "server_lr_decay_every",
                                                   "server_lr_min")

    def server_lr_at(self, round: int) -> float:
        """η_g of round ``round`` (the step's schedule: :meth:`ServerStepConfig.lr_at`)."""
        return self.step_config().lr_at(round)

    def legacy_step(self) -> ServerStepConfig:
        return ServerStepConfig(name="sgd", **self.schedule())


class AdaptiveServerConfig(ServerStepOption, AdaptiveOptions):
    """A rule's config whose step is adaptive by default (FedAdam, FedYogi): the flat options, or ``server_step``."""

    legacy_step_keys: ClassVar[tuple[str, ...]] = (*ServerLRConfig.legacy_step_keys, *_ADAPTIVE_KEYS)


@dataclass(frozen=True)
class Direction:
    """What a server rule proposes: move ``base`` (default: the global model) along ``delta``.

    ``base``: FedAWE steps from its copies' mean, not from the global model. ``lr``: a step size the rule
    derived from the step's schedule (FedSUM's γ_t = η_g(t)·η_t·K, which FedSUM-CR's clients invert); plain
    SGD only.
    """

    delta: torch.Tensor
    base: torch.Tensor | None = None
    lr: float | None = None


#: a change of the direction before it is applied (clipping and noise for differential privacy)
Transform = Callable[[int, Direction], Direction]


class ServerStep(Stateful):
    """Applies a rule's :class:`Direction` with the configured optimiser; its moments are checkpointed."""

    state_attrs = ("m", "v")

    def __init__(self, cfg: ServerStepConfig, transforms: Sequence[Transform] = ()):
        self.cfg = cfg
        self.transforms = tuple(transforms)
        self.m: torch.Tensor | None = None  # SGD's momentum buffer, or the adaptive steps' first moment
        self.v: torch.Tensor | None = None  # the adaptive steps' second moment

    def lr_at(self, round: int) -> float:
        return self.cfg.lr_at(round)

    def apply(self, round: int, global_params: torch.Tensor,
              direction: Direction | torch.Tensor | None) -> torch.Tensor:
        """The next global model: ``base + increment(d)`` in the global model's dtype (``None``: unchanged)."""
        if direction is None:
            return global_params.clone()
        if not isinstance(direction, Direction):
            direction = Direction(direction)
        for transform in self.transforms:
            direction = transform(round, direction)
        base = global_params if direction.base is None else direction.base
        return (base + self.increment(round, direction)).to(global_params.dtype)

    def increment(self, round: int, direction: Direction) -> torch.Tensor:
        """What is added to the base: η_g·d (SGD, with momentum), or the adaptive step on d."""
        cfg, d = self.cfg, direction.delta
        if direction.lr is not None:
            if not cfg.plain:
                raise ValueError("a rule that sets its own step size takes plain SGD only")
            return direction.lr * d
        if cfg.name == "sgd":
            if cfg.momentum:
                self.m = d if self.m is None else cfg.momentum * self.m + d
                d = d + cfg.momentum * self.m if cfg.nesterov else self.m
            return cfg.lr_at(round) * d
        return self._adaptive(round, d)

    def _adaptive(self, round: int, delta: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        d2 = delta * delta
        if self.m is None:
            if cfg.init == "fedscale":
                self.m, self.v = delta.clone(), d2.clone()
                return delta
            self.m = torch.zeros_like(delta)
            self.v = torch.full_like(delta, cfg.tau * cfg.tau)
        self.m = cfg.beta1 * self.m + (1.0 - cfg.beta1) * delta
        if cfg.name == "adam":
            self.v = cfg.beta2 * self.v + (1.0 - cfg.beta2) * d2
        elif cfg.name == "yogi":
            self.v = self.v - (1.0 - cfg.beta2) * d2 * torch.sign(self.v - d2)
        else:  # adagrad
            self.v = self.v + d2
        return cfg.lr_at(round) * self.m / (torch.sqrt(self.v) + cfg.tau)


def moments_into_server_step(state: dict) -> dict:
    """A rule's checkpointed state from before the server step was one component, in today's layout: the moments
    the rule kept itself — ``momentum_buf`` (FedAvg's and FedBuff's server momentum) and ``opt`` (the Adam / Yogi
    moments of FedAdam, FedYogi, FedBuff and REFL's stale-aware rule) — become the step's ``m`` and ``v``, which
    follow the same recurrences; a rule that kept none gets a step without moments. So such a run resumes."""
    state = dict(state)
    buf, opt = state.pop("momentum_buf", None), state.pop("opt", None) or {}
    state["server_step"] = {"m": buf if buf is not None else opt.get("m"), "v": opt.get("v")}
    return state


__all__ = ["ADAPTIVE", "AdaptiveOptions", "AdaptiveServerConfig", "Direction", "ServerLRConfig", "ServerLRSchedule",
           "ServerOptimizer", "ServerOptimizerOption", "ServerStep", "ServerStepConfig", "ServerStepOption",
           "Transform", "moments_into_server_step"]
