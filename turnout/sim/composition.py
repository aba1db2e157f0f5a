"""The composition root: the seams of an experiment, how each component is built, what is refused.

One table (:data:`SEAMS`) says, per seam, its config key, the package whose import registers its
components, the registry, and what a component's constructor receives. :data:`CATALOGUE` hands
the registries and the combination rules (:data:`RULES`) to the generic validator in
:mod:`turnout.config.loader`, which imports no component package itself. :func:`compose` builds
one simulation's components from a resolved experiment, letting a caller inject any of them
(a test's hand-written selector, a notebook's own algorithm). The catalogue also names the
top-level lists of components (``loggers``) and imports an experiment's plugins
(:mod:`turnout.sim.plugins`) before its blocks are validated.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..config.loader import Component, ResolvedExperiment
from ..config.loader import expand as _expand
from ..config.loader import load_experiment as _load
from ..core.errors import ConfigError
from ..core.registry import Registry
from ..models.registry import model_traits
from ..privacy.base import PrivacyContext
from . import plugins
from .catalogue import component_lists, registries
from .timing import timing_for


# ---- combination rules -----------------------------------------------------------------------
def compressor_accepts_upload(exp: ResolvedExperiment, prefix: str) -> None:
    """A compressor must be able to encode what the algorithm uploads (a NACK, a gradient difference)."""
    algo, comp = exp["algorithm"], exp["compressor"]
    kind = algo.cls.upload_kind(algo.cfg)
    if comp.cls.accepts is not None and kind not in comp.cls.accepts:
        ok = [name for name, cls in registries()["compressor"] if cls.accepts is None or kind in cls.accepts]
        own = algo.cls.traffic_for(algo.cfg).own_compression
        raise ConfigError(f"{prefix}compressor.name", comp.name,
                          f"cannot encode {algo.name}'s uploads ({kind}); use one of: {', '.join(ok)}"
                          + (f"; to compress them, set {own}" if own else ""))


def plain_sgd_for_inverting_rules(exp: ResolvedExperiment, prefix: str) -> None:
    """Rules that recover gradients from the SGD end point (SCAFFOLD option II, FedSUM) need plain SGD."""
    algo, train = exp["algorithm"], exp.train
    if algo.cls.requires_plain_sgd:
        for key, value, plain in (("momentum", train.momentum, 0.0), ("weight_decay", train.weight_decay, 0.0),
                                  ("grad_clip", train.grad_clip, None)):
            if value != plain:
                raise ConfigError(f"{prefix}train.{key}", value,
                                  f"{algo.name} recovers gradients from plain local SGD: set {key} to {plain}")


def executor_trains_model_exactly(exp: ResolvedExperiment, prefix: str) -> None:
    """An executor must train the model exactly as the sequential reference does (its declared capabilities)."""
    ex, model = exp["executor"], exp["model"]
    traits = model_traits(model.cls, model.cfg)
    if traits.running_stats and not ex.cls.trains_running_stats:
        ok = [name for name, cls in registries()["executor"] if cls.trains_running_stats]
        raise ConfigError(f"{prefix}executor.name", ex.name,
                          f"cannot keep {model.name}'s per-client BatchNorm running statistics exactly; "
                          f"use one of: {', '.join(ok)}")
    if traits.vmap_blocker is not None and ex.cls.needs_vmap:
        option, value, fix = traits.vmap_blocker
        raise ConfigError(f"{prefix}model.{option}", value, f"executor {ex.name} batches clients with "
                                                            f"torch.func.vmap, but {fix}")


#: Seams whose components may declare ``needs_training`` (why they cannot run without a trained model).
TRAINING_SEAMS = ("selector", "compressor", "algorithm")


def system_only_components(exp: ResolvedExperiment, prefix: str) -> None:
    """Without training, components that decide from losses or update values are refused, and a dataset
    of sample counts only (no features) is refused with training."""
    data = exp["data"]
    if not exp.config.no_train:
        if getattr(data.cls, "counts_only", False):
            raise ConfigError(f"{prefix}data.name", data.name, "holds per-client sample counts only (no features or "
                                                               "labels), so it runs only without training: add "
                                                               "--no-train (no_train: true)")
        return
    for seam in TRAINING_SEAMS:
        comp = exp[seam]
        why = comp.cls.needs_training
        if why:
            ok = [name for name, cls in registries()[seam] if not cls.needs_training]
            raise ConfigError(f"{prefix}{seam}.name", comp.name, f"{why}, so it needs a trained model; without "
                                                                 f"training (--no-train) use one of: {', '.join(ok)}")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return True


def extras_installed(exp: ResolvedExperiment, prefix: str) -> None:
    """A component whose optional package is missing (a logger's, the Ray executor's) is refused before any
    work, with the extra that installs it (``requires``: ``(module, extra)`` pairs on the class)."""
    chosen = [(f"{prefix}executor.name", exp["executor"])]
    chosen += [(f"{prefix}loggers[{i}].name", comp) for i, comp in enumerate(exp.loggers)]
    for key, comp in chosen:
        for module, extra in comp.cls.requires:
            if _missing(module):
                raise ConfigError(key, comp.name, f"needs {module}, which is not installed: "
                                                  f"pip install 'turnout[{extra}]'")


def asynchronous_rounds(exp: ResolvedExperiment, prefix: str) -> None:
    """Asynchronous rounds refill free slots a few clients at a time and deliver reports started in earlier rounds:
    a selector must choose a cohort of any size, a server rule must take reports from earlier cohorts, and the
    buffer must fit in the concurrency."""
    mode = exp["round_mode"]
    if not timing_for(mode.cls, f"{prefix}round_mode.name").mixes_cohorts:
        return
    sel, algo = exp["selector"], exp["algorithm"]
    why = sel.cls.cannot_fill_slots(sel.cfg)
    if why:
        ok = [name for name, cls in registries()["selector"] if cls.fills_free_slots]
        raise ConfigError(f"{prefix}selector.name", sel.name, f"{why}, but asynchronous rounds refill the slots "
                                                              f"freed by arrivals; use one of: {', '.join(ok)}")
    if algo.cls.cohort_bound:
        ok = [name for name, cls in registries()["algorithm"] if not cls.cohort_bound]
        raise ConfigError(f"{prefix}algorithm.name", algo.name,
                          f"{algo.cls.cohort_bound}, but asynchronous rounds aggregate reports started in earlier "
                          f"rounds; use one of: {', '.join(ok)}")
    concurrency = getattr(sel.cfg, "clients_per_round", None)
    if concurrency is not None and mode.cfg.buffer > concurrency:
        raise ConfigError(f"{prefix}round_mode.buffer", mode.cfg.buffer,
                          f"must be <= selector.clients_per_round ({concurrency}), the clients in flight at once: "
                          "a larger buffer never fills")
    scaled = sel.cls.weights_per_cohort(sel.cfg)
    if scaled is not None and mode.cfg.buffer != concurrency:
        # An update averages K = buffer reports, not C: every step would shrink by K/C. N·p_i/K would not be
        # unbiased either: busy devices cannot be chosen and fast clients arrive first
        # (docs/algorithms/asynchronous.md, "Selector weights").
        option, why = scaled
        raise ConfigError(f"{prefix}selector.{option}", getattr(sel.cfg, option),
                          f"{why}, but an asynchronous update averages round_mode.buffer = {mode.cfg.buffer} "
                          "(each step would shrink by buffer/clients_per_round); use relative weights "
                          "(n_samples or equal) or buffer = clients_per_round")
    if mode.cls(mode.cfg).refills():
        refilled_rounds(exp, prefix)


def refilled_rounds(exp: ResolvedExperiment, prefix: str) -> None:
    """A round that refills slots at arrivals (``round_mode.refill: arrival``) selects, trains and encodes several
    cohorts: a component that keeps one cohort or one selection a round is refused."""
    comp, priv = exp["compressor"], exp["privacy"]
    fix = "or round_mode.refill: update"
    if comp.cls.keeps_round_cohort():
        ok = [name for name, cls in registries()["compressor"] if not cls.keeps_round_cohort()]
        raise ConfigError(f"{prefix}compressor.name", comp.name,
                          "keeps the round's launched cohort (its weights, GlueFL's sticky flags), but "
                          f"round_mode.refill: arrival launches several cohorts a round; use one of: {', '.join(ok)} "
                          f"{fix}")
    if priv.name != "none":
        raise ConfigError(f"{prefix}privacy.name", priv.name,
                          "accounts for one selection a round, but round_mode.refill: arrival selects at each "
                          f"arrival; use privacy: none {fix}")


def privacy_protects_rule(exp: ResolvedExperiment, prefix: str) -> None:
    """Client-level DP noises the clipped sum, and secure aggregation shows the server only the sum: both are refused
    for a rule that reads each report (``Algorithm.reads_each_report``); DP needs ``dp-accounting`` (extra privacy)."""
    algo, priv, sa = exp["algorithm"], exp["privacy"], exp["secure_aggregation"]
    ok = [name for name, cls in registries()["algorithm"] if not cls.reads_each_report]
    for key, comp, what in ((f"{prefix}privacy.name", priv, "client-level DP"),
                            (f"{prefix}secure_aggregation.name", sa, "secure aggregation")):
        if comp.name == "none":
            continue
        if algo.cls.reads_each_report:
            raise ConfigError(key, comp.name, f"{what} cannot protect algorithm {algo.name}: it "
                                              f"{algo.cls.reads_each_report}; use one of: {', '.join(ok)}")
    if priv.name != "none":
        kind = algo.cls.upload_kind(algo.cfg)
        if str(kind) != "model_delta":
            raise ConfigError(f"{prefix}privacy.name", priv.name, f"clips model deltas, but {algo.name} uploads {kind}")
        if _missing("dp_accounting"):
            raise ConfigError(f"{prefix}privacy.name", priv.name, "needs dp_accounting, which is not installed: "
                                                                  "pip install 'turnout[privacy]'")
    if sa.name != "none":
        comp = exp["compressor"]
        if not comp.cls.passes_uploads_through:
            raise ConfigError(f"{prefix}secure_aggregation.name", sa.name,
                              f"masks every coordinate of a dense upload, so compressor {comp.name}'s message cannot "
                              "be summed under its masks; use compressor: none")
        if timing_for(exp["round_mode"].cls, f"{prefix}round_mode.name").mixes_cohorts:
            raise ConfigError(f"{prefix}secure_aggregation.name", sa.name, "sums one cohort's masked inputs per "
                                                                          "round; asynchronous rounds mix cohorts")


#: Combinations refused at validation because they would run but silently break an algorithm (or cannot run).
RULES: tuple[Callable[[ResolvedExperiment, str], None], ...] = (
    compressor_accepts_upload, plain_sgd_for_inverting_rules, executor_trains_model_exactly, system_only_components,
    extras_installed, asynchronous_rounds, privacy_protects_rule)


class _Catalogue:
    """What :mod:`turnout.config.loader` needs to validate an experiment: registries, rules, plugins."""

    def registries(self) -> Mapping[str, Registry]:
        return registries()

    def lists(self) -> Mapping[str, Registry]:
        return component_lists()

    def load_plugins(self, specs: Any) -> None:
        plugins.load(specs)

    def check(self, exp: ResolvedExperiment, prefix: str) -> None:
        for rule in RULES:
            rule(exp, prefix)


CATALOGUE = _Catalogue()


def expand(raw: dict[str, Any], overrides: dict[str, Any] | None = None) -> list[ResolvedExperiment]:
    """Validate an experiment dict (and its variants) against the registered components."""
    return _expand(raw, CATALOGUE, overrides)


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> list[ResolvedExperiment]:
    """Read, override (``KEY=VALUE`` strings) and validate an experiment file."""
    return _load(path, CATALOGUE, overrides)


# ---- building one simulation ---------------------------------------------------------------------
@dataclass(frozen=True)
class BuildContext:
    """What the components of one (variant, seed) simulation are built from."""

    exp: ResolvedExperiment
    seed: int
    num_clients: int
    world: Any  # WorldContext
    algorithm_context: Any  # AlgorithmContext
    dim: int
    layout: tuple[int, ...]
    store: Any  # ClientStateStore


@dataclass(frozen=True)
class Parts:
    """The built components of one simulation."""

    availability: Any
    devices: Any
    selector: Any
    round_mode: Any
    algorithm: Any
    compressor: Any
    executor: Any
    privacy: Any
    secure_aggregation: Any


#: How each simulation seam's configured component is built from a :class:`BuildContext`.
BUILDERS: dict[str, Callable[[Component, BuildContext], Any]] = {
    "availability": lambda c, ctx: c.build(ctx.world),
    "devices": lambda c, ctx: c.build(),
    "selector": lambda c, ctx: c.build(ctx.world),
    "round_mode": lambda c, ctx: c.build(),
    "algorithm": lambda c, ctx: c.build(ctx.algorithm_context),
    "compressor": lambda c, ctx: c.build(ctx.dim, ctx.seed, ctx.store, layout=list(ctx.layout)),
    "executor": lambda c, ctx: c.build(),
    "privacy": lambda c, ctx: c.build(PrivacyContext(ctx.num_clients, ctx.seed, ctx.exp.config.rounds)),
    "secure_aggregation": lambda c, ctx: c.build(),
}

#: A component handed in instead of the configured one: the object itself, or ``factory(ctx)``.
Injected = Any


def compose(ctx: BuildContext, inject: Mapping[str, Injected] | None = None) -> Parts:
    """Build every simulation component, using ``inject[seam]`` where given.

    An injected value is either a ready component or a callable ``factory(ctx)`` returning one
    (components that need the world or the algorithm context are easiest built that way).
    """
    inject = dict(inject or {})
    unknown = set(inject) - set(BUILDERS)
    if unknown:
        raise ValueError(f"cannot inject {sorted(unknown)}; injectable seams: {', '.join(BUILDERS)}")
    built = {}
    for seam, build in BUILDERS.items():  # construction order is part of the contract (seeded streams)
        given = inject.get(seam)
        if given is None:
            built[seam] = build(ctx.exp[seam], ctx)
        elif inspect.isfunction(given) or inspect.ismethod(given) or isinstance(given, (functools.partial, type)):
            built[seam] = given(ctx)
        else:
            built[seam] = given
    return Parts(**built)
