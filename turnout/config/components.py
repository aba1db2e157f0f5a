"""Validate a ``{name: ..., <options>}`` block against the component that name registers.

Each seam's config block names a component and carries that component's options at the same
level (``selector: {name: uniform, clients_per_round: 10}``). The options are validated by the
component's own pydantic ``Config``; any failure becomes one :class:`ConfigError` naming the
full dotted key, the bad value, and what is allowed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from ..registry import Registry


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
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    msg = err.get("msg", "invalid value")
    return msg[len("Value error, "):] if msg.startswith("Value error, ") else msg


def config_error_from_pydantic(exc: ValidationError, prefix: str, model: type[BaseModel] | None = None) -> ConfigError:
    """The first error of a pydantic ``ValidationError`` as a one-line :class:`ConfigError`."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    key = ".".join(p for p in (prefix, loc) if p)
    allowed = _allowed_from_pydantic(err)
    if err.get("type") == "extra_forbidden" and model is not None:
        allowed = "unknown key; allowed keys: " + ", ".join(sorted(model.model_fields)) if model.model_fields \
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
