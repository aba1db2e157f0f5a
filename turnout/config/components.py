"""Validate a ``{name: ..., <options>}`` block against the component that name registers.

Each seam's config block names a component and carries that component's options at the same
level (``selector: {name: uniform, clients_per_round: 10}``). The options are validated by the
component's own pydantic ``Config``; any failure becomes one :class:`ConfigError` naming the
full dotted key, the bad value, and what is allowed.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from ..core.errors import ConfigError
from ..core.registry import Registry
from .display import one_line


def _allowed_from_pydantic(err: dict) -> str:
    ctx = err.get("ctx") or {}
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind.startswith("greater_than_equal"):
        return f"must be >= {ctx.get('ge')}"
    if kind.startswith("greater_than"):
        return f"must be > {ctx.get('gt')}"
    if kind.startswith("less_than_equal"):
        return f"must be <= {ctx.get('le')}"
    if kind.startswith("less_than"):
        return f"must be < {ctx.get('lt')}"
    if kind == "finite_number":
        return "must be a finite number (not inf or nan)"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    msg = err.get("msg", "invalid value")
    return msg[len("Value error, "):] if msg.startswith("Value error, ") else msg


def _model_at(model: type[BaseModel] | None, path: tuple) -> type[BaseModel] | None:
    """The nested config block that ``path`` (field names) leads to from ``model``, if it is one."""
    for part in path:
        field = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        if field is None:
            return None
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return model


def config_error_from_pydantic(exc: ValidationError, prefix: str, model: type[BaseModel] | None = None) -> ConfigError:
    """The first error of a pydantic ``ValidationError`` as a one-line :class:`ConfigError`."""
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    key = one_line(".".join(p for p in (prefix, ".".join(str(p) for p in loc)) if p))
    allowed = one_line(_allowed_from_pydantic(err), 400)
    if err.get("type") == "extra_forbidden" and model is not None:
        block = _model_at(model, loc[:-1])  # an unknown key inside eval/runtime/lr_schedule lists *their* keys
        if block is not None:
            allowed = "unknown key; allowed keys: " + ", ".join(sorted(block.model_fields)) if block.model_fields \
                else "unknown key; this component takes no options"
    return ConfigError(key, err.get("input"), allowed)


def validate_model(model: type[BaseModel], raw: Any, prefix: str) -> BaseModel:
    """``model.model_validate(raw)`` with errors turned into a one-line :class:`ConfigError`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(prefix, raw, "must be a mapping of keys to values")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise config_error_from_pydantic(exc, prefix, model) from None
    except ConfigError as exc:  # raised by a nested component validator
        raise ConfigError(f"{prefix}.{exc.key}" if prefix else exc.key, exc.value, exc.allowed) from None


def validate_component(registry: Registry, raw: Any, key: str) -> tuple[type, BaseModel]:
    """Resolve ``raw = {name: ..., **options}`` to ``(component_class, validated_options)``."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        raise ConfigError(key, raw, f"must be a mapping with a 'name' (one of: {', '.join(registry.names())})")
    if "name" not in raw:
        raise ConfigError(f"{key}.name", None, f"required; choose one of: {', '.join(registry.names())}")
    name = raw["name"]
    if not isinstance(name, str):
        raise ConfigError(f"{key}.name", name, f"must be a string, one of: {', '.join(registry.names())}")
    cls = registry.get(name, f"{key}.name")
    options = {k: v for k, v in raw.items() if k != "name"}
    return cls, validate_model(cls.Config, options, key)
