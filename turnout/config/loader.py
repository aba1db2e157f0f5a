"""Load an experiment file, apply ``--set`` overrides, and validate everything before any work.

Validation resolves every seam's block against its registry and expands the variants, so a typo
in the fifth variant fails at start-up with one line, not an hour into the run. This module is
generic: which seams exist, their registries and the rules that refuse a combination come in as a
:class:`Catalogue` (:data:`turnout.sim.composition.CATALOGUE`), so ``turnout.config`` imports no
component package.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Protocol

from pydantic import BaseModel

from ..core.errors import ConfigError, ConfigWarning
from ..core.registry import Registry
from . import plugin_specs, safe_yaml
from .components import validate_component, validate_model
from .display import one_line
from .schema import ExperimentConfig, VariantConfig
from .train import TrainConfig


class Catalogue(Protocol):
    """The seams an experiment is made of: config key → registry, the lists of components, the rules, plugins."""

    def registries(self) -> Mapping[str, Registry]:
        """Config key → registry of that seam, in the order blocks are validated."""

    def lists(self) -> Mapping[str, Registry]:
        """Top-level keys holding a list of components (``loggers``) → their registry."""

    def load_plugins(self, specs: Any) -> None:
        """Import the experiment's plugins, so what they register can be named (before any block is validated)."""

    def check(self, exp: "ResolvedExperiment", prefix: str) -> None:
        """Raise :class:`ConfigError` for a combination that would run but break an algorithm."""


@dataclass(frozen=True)
class Component:
    """A seam's chosen component class and its validated options."""

    name: str
    cls: type
    cfg: BaseModel

    def build(self, *args, **kwargs):
        return self.cls(self.cfg, *args, **kwargs)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.cfg.model_dump(mode="json")}


@dataclass(frozen=True)
class ResolvedExperiment:
    """One fully validated variant of an experiment."""

    variant: str
    config: ExperimentConfig
    train: TrainConfig
    components: dict[str, Component]
    lists: dict[str, tuple[Component, ...]] = field(default_factory=dict)  # e.g. "loggers"

    def __getitem__(self, seam: str) -> Component:
        return self.components[seam]

    @property
    def loggers(self) -> tuple[Component, ...]:
        """The live loggers every unit of this variant feeds (validated ``loggers:`` entries)."""
        return self.lists.get("loggers", ())

    def as_dict(self) -> dict[str, Any]:
        """The fully resolved configuration (defaults filled in), as written to ``config.yaml``.

        The blocks of :data:`QUIET_WHEN_OFF` are left out while they hold their ``none`` component, so a run that
        does not use them resolves (and hashes) as it did before they existed.
        """
        quiet = {seam for seam in QUIET_WHEN_OFF if seam in self.components
                 and self.components[seam].as_dict() == {"name": "none"}}
        out = self.config.model_dump(mode="json", exclude={"variants", *quiet})
        out["train"] = self.train.model_dump(mode="json")
        out.update({seam: c.as_dict() for seam, c in self.components.items() if seam not in quiet})
        out.update({key: [c.as_dict() for c in comps] for key, comps in self.lists.items()})
        return out


#: Seams added after runs were first recorded: left out of the resolved configuration while switched off (``none``)
QUIET_WHEN_OFF = ("privacy", "secure_aggregation")


#: What a minimal experiment file looks like, for the message that refuses an empty one.
MINIMAL_EXAMPLE = "`rounds: 50` and `data: {name: synthetic, num_clients: 30}`"


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The experiment file at ``path`` as a dict; anything else is one :class:`ConfigError` naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config", str(path), "file not found; give the path of an experiment YAML file")
    try:
        if p.stat().st_size > 4 * safe_yaml.MAX_CHARS:
            raise ConfigError("config", str(path), f"is {p.stat().st_size:,} bytes; an experiment file is at most "
                                                   f"{safe_yaml.MAX_CHARS:,} characters")
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("config", str(path), f"is not a UTF-8 text file ({exc.reason} at byte {exc.start}); "
                                               "give the path of an experiment YAML file") from None
    except OSError as exc:
        raise ConfigError("config", str(path), f"cannot be read ({exc.strerror or exc})") from None
    try:
        data = safe_yaml.load(text)
    except safe_yaml.BadYaml as exc:
        raise ConfigError("config", str(path), f"{exc.problem}{exc.where}") from None
    if data is None or data == {}:
        raise ConfigError("config", str(path), "is empty (or only comments); an experiment file names at least what "
                                               f"it runs, e.g. {MINIMAL_EXAMPLE} (every other block has a default, "
                                               "see `turnout list`)")
    if not isinstance(data, dict):
        raise ConfigError("config", str(path), "must be a YAML mapping of keys (data, model, selector, ...)")
    if "plugins" in data:  # plugin files are named relative to the experiment file
        data["plugins"] = plugin_specs.anchor(data["plugins"], p.parent)
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=c"`` → ``("a.b", yaml-parsed c)``; text that is not YAML stays a string."""
    if not isinstance(text, str):
        raise ConfigError("--set", text, "expected KEY=VALUE text, e.g. selector.clients_per_round=20")
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError("--set", text, "expected KEY=VALUE with a dotted key, e.g. selector.clients_per_round=20")
    if not value.strip():
        return key, ""
    try:
        return key, safe_yaml.load(value)
    except safe_yaml.BadYaml as exc:
        if exc.problem.startswith("is not valid YAML"):
            return key, value  # e.g. `--set name=a: b`: taken as the literal text
        raise ConfigError(f"--set {one_line(key, 80)}", value, f"{exc.problem}{exc.where}") from None


def default_block(key: str) -> dict[str, Any]:
    """The default of a top-level block as a mapping (``devices`` → ``{name: homogeneous}``; ``eval`` → ``{}``)."""
    field = ExperimentConfig.model_fields.get(key)
    default = field.get_default(call_default_factory=True) if field is not None else None
    return copy.deepcopy(default) if isinstance(default, dict) else {}


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any], where: str = "") -> dict[str, Any]:
    """A copy of ``raw`` with dotted-key overrides applied (intermediate mappings are created)."""
    out = copy.deepcopy(raw)
    for key, value in overrides.items():
        if not isinstance(key, str) or not key or any(not p for p in key.split(".")):
            raise ConfigError(one_line(f"{where}{key}"), value,
                              "override keys must be dotted names like selector.clients_per_round")
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:  # a block the file leaves to its default: override on top of that default
                nxt = node[part] = default_block(part) if i == 0 else {}
            elif isinstance(nxt, str) and i == 0:  # `selector: uniform` shorthand
                nxt = node[part] = {"name": nxt}
            elif not isinstance(nxt, dict):
                raise ConfigError(one_line(f"{where}{'.'.join(parts[:i + 1])}"), nxt,
                                  f"is not a mapping, so {one_line(key)} cannot be set")
            node = nxt
        # Changing a component's name drops the options of the component it replaces.
        if parts[-1] == "name" and len(parts) == 2 and node.get("name") not in (None, value):
            node.clear()
        node[parts[-1]] = value
    return out


def resolve(raw: dict[str, Any], catalogue: Catalogue, variant: str = "", prefix: str = "") -> ResolvedExperiment:
    """Validate one (variant's) raw config dict completely."""
    cfg = validate_model(ExperimentConfig, raw, prefix.rstrip("."))
    train = validate_model(TrainConfig, cfg.train, f"{prefix}train")
    components = {}
    for seam, registry in catalogue.registries().items():
        components[seam] = _component(registry, getattr(cfg, seam), f"{prefix}{seam}")
    lists = {key: tuple(_component(registry, block, f"{prefix}{key}[{i}]") for i, block in enumerate(getattr(cfg, key)))
             for key, registry in catalogue.lists().items()}
    exp = ResolvedExperiment(variant=variant, config=cfg, train=train, components=components, lists=lists)
    catalogue.check(exp, prefix)
    return exp


def _component(registry: Registry, block: Any, key: str) -> Component:
    cls, opts = validate_component(registry, block, key)
    return Component(block["name"] if isinstance(block, dict) else block, cls, opts)


def load_experiment(path: str | Path, catalogue: Catalogue, overrides: list[str] | None = None
                    ) -> list[ResolvedExperiment]:
    """Read, override and validate an experiment file; one resolved config per variant."""
    raw = read_yaml(path)
    return expand(raw, catalogue, dict(parse_override(o) for o in (overrides or [])))


def _reapplied(overrides: dict[str, Any], variant_set: dict[str, Any], merged: dict[str, Any],
               registries: Mapping[str, Registry]) -> dict[str, Any]:
    """The command-line overrides to apply again on top of a variant.

    ``--set`` beats the file, variants included (``--set selector.clients_per_round=50`` must reach a
    variant that swaps the selector, which clears the old selector's options), except where the
    variant sets that key itself (or a key above or below it) and for options the variant's
    replacement component does not have (``--set algorithm.mu=0.1`` tunes FedProx and leaves a
    FedAvg variant alone).
    """
    touched = []  # dotted keys the variant sets; a mapping under a bare seam key counts per option
    for key, value in variant_set.items():
        if isinstance(value, dict) and "." not in str(key):
            touched += [f"{key}.{sub}" for sub in value]
        else:
            touched.append(str(key))
    out = {}
    for key, value in overrides.items():
        if any(key == t or key.startswith(t + ".") or t.startswith(key + ".") for t in touched):
            continue
        parts = key.split(".")
        node = merged.get(parts[0])
        if len(parts) == 2 and parts[0] in registries and isinstance(node, dict) and parts[1] != "name":
            registry, name = registries[parts[0]], node.get("name")
            if isinstance(name, str) and name in registry and parts[1] not in registry.get(name).Config.model_fields:
                continue
        out[key] = value
    return out


def check_nesting(value: Any, key: str) -> None:
    """Refuse a value nested deeper, or larger, than a YAML file may be (see :mod:`.safe_yaml`).

    Values built in Python (``expand`` called from a notebook, a test generator) skip the YAML
    reader's bounds; unchecked, a 5,000-deep list or a self-containing one would end in a
    ``RecursionError`` while being copied or shown in an error message.
    """
    todo, seen = [(value, 1)], 0
    while todo:
        node, depth = todo.pop()
        seen += 1
        if depth > safe_yaml.MAX_DEPTH or seen > safe_yaml.MAX_NODES:
            what = f"nested more than {safe_yaml.MAX_DEPTH} levels deep (or contains itself)" \
                if depth > safe_yaml.MAX_DEPTH else f"has more than {safe_yaml.MAX_NODES:,} values"
            raise ConfigError(one_line(key, 80), f"<a {type(value).__name__}>", f"{what}; an experiment needs far less")
        if isinstance(node, dict):
            todo.extend((v, depth + 1) for kv in node.items() for v in kv)
        elif isinstance(node, (list, tuple, set, frozenset)):
            todo.extend((v, depth + 1) for v in node)


#: top-level keys no variant may change: plugins are loaded once per process, and a comparison is
#: either trained or system-only throughout
EXPERIMENT_WIDE = ("plugins", "no_train")

#: most variants a grid may make (an experiment file may list at most 200 variants itself)
MAX_GRID_VARIANTS = 1000


def grid_variants(explicit: list[VariantConfig], grid: dict[str, list[Any]]) -> list[VariantConfig]:
    """``explicit`` crossed with every combination of ``grid``'s values (``explicit`` alone without a grid).

    A grid variant is named by its values, ``lr=0.1 mu=0.01`` (the last part of each key; the whole
    key where two keys end alike), after the explicit variant's name when there is one.
    """
    if not grid:
        return list(explicit)
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key}", values, "must be a non-empty list of values")
    size = math.prod(len(v) for v in grid.values()) * max(1, len(explicit))
    if size > MAX_GRID_VARIANTS:
        raise ConfigError("grid", f"{size} variants", f"a grid may make at most {MAX_GRID_VARIANTS} variants; "
                                                        "split the sweep over several experiment files")
    keys = list(grid)
    last = [k.rsplit(".", 1)[-1] for k in keys]
    labels = [short if last.count(short) == 1 else key for key, short in zip(keys, last)]
    out = []
    for v in explicit or [None]:
        for point in itertools.product(*(grid[k] for k in keys)):
            name = " ".join(f"{label}={_value_label(value)}" for label, value in zip(labels, point))
            if v is not None:
                name = f"{v.name} {name}"
            base_set = v.set if v is not None else {}
            out.append(VariantConfig(name=_fit(name), set={**base_set, **dict(zip(keys, point))}))
    names = [v.name for v in out]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash is not None:
        raise ConfigError("grid", clash, "two grid variants get this name (values that print alike); "
                                         "make the values distinct")
    return out


def _value_label(value: Any) -> str:
    if isinstance(value, dict):
        text = str(value.get("name")) if "name" in value else json.dumps(value, sort_keys=True, separators=(",", ":"))
    elif isinstance(value, (list, tuple)):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    return re.sub(r'[/\\\n\r\t"]', "_", text)


def _fit(name: str, limit: int = 80) -> str:
    """A variant name within the length limit: long ones keep their start and a short hash of the rest."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"{name[: limit - 8]}~{digest}"


def expand(raw: dict[str, Any], catalogue: Catalogue, overrides: dict[str, Any] | None = None
           ) -> list[ResolvedExperiment]:
    """Validate the base config and every variant; variants without a list mean one run named ``base``."""
    if not isinstance(raw, dict):
        raise ConfigError("config", f"<a {type(raw).__name__}>",
                          "must be a mapping of keys (data, model, selector, ...)")
    for key, value in [*raw.items(), *(overrides or {}).items()]:
        check_nesting(value, str(key))
    raw = apply_overrides(raw, overrides or {})
    catalogue.load_plugins(raw.get("plugins"))  # before any block names what a plugin registers
    base = resolve(raw, catalogue)
    variants = grid_variants(base.config.variants, base.config.grid)
    if not variants:
        return [replace(base, variant="base")]
    out = []
    reached: set[str] = set()
    for v in variants:
        merged = apply_overrides({k: val for k, val in raw.items() if k not in ("variants", "grid")}, v.set,
                                 where=f"variants[{v.name}].")
        again = _reapplied(overrides or {}, v.set, merged, catalogue.registries())
        reached.update(again)
        merged = apply_overrides(merged, again)
        if "variants" in v.set or any(str(k).startswith("variants.") for k in v.set):
            raise ConfigError(f"variants[{v.name}].set", v.set, "a variant cannot define variants")
        for key in EXPERIMENT_WIDE:
            if any(str(k) == key or str(k).startswith(key + ".") for k in v.set):
                raise ConfigError(f"variants[{v.name}].set.{key}", v.set.get(key),
                                  f"{key} holds for the whole experiment; set it at the top level")
        out.append(resolve(merged, catalogue, v.name, prefix=f"variants[{v.name}]."))
    for key in overrides or {}:
        if key not in reached and key != "variants" and not key.startswith("variants."):
            warnings.warn(ConfigWarning(f"--set {key} reaches no variant: every variant sets {key} itself or its "
                                        "component has no such option; the run goes on without it (set it in "
                                        "the variants instead)"), stacklevel=2)
    return out
