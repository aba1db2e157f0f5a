"""A config model's options as people read them: ``turnout list`` (defaults) and ``turnout check`` (changes).

Both walk a pydantic model's fields the same way: a nested block (``train.lr_schedule``, a trace's
``generator``) is spelled with dotted names, exactly as ``--set`` and variants address it, and a field
without a default says whether it is a required value or a required block instead of pydantic's
internal ``PydanticUndefined`` marker.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Iterator, Literal

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model class a field holds (also inside ``X | None``), or None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if len(models) == 1 else None
    return None


def _choices(annotation: Any) -> tuple | None:
    """The allowed values of a ``Literal[...]`` field (also inside ``X | None``)."""
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if typing.get_origin(arg) is Literal:
                return typing.get_args(arg)
    return None


def default_of(field: FieldInfo) -> Any:
    """A field's default value, calling its default factory (the value a config gets when the key is unset)."""
    return field.get_default(call_default_factory=True)


def value_range(metadata) -> str:
    """A field's accepted range, e.g. ``" in [1, 10,000,000]"`` (empty when unbounded)."""
    from annotated_types import Ge, Gt, Le, Lt

    def fmt(v) -> str:
        return f"{v:,}" if isinstance(v, int) else f"{v:g}"

    lo = next((f"[{fmt(m.ge)}" for m in metadata if isinstance(m, Ge)), None) or \
        next((f"({fmt(m.gt)}" for m in metadata if isinstance(m, Gt)), None)
    hi = next((f"{fmt(m.le)}]" for m in metadata if isinstance(m, Le)), None) or \
        next((f"{fmt(m.lt)})" for m in metadata if isinstance(m, Lt)), None)
    if lo and hi:
        return f" in {lo}, {hi}"
    if lo:
        return f" {'>=' if lo[0] == '[' else '>'} {lo[1:]}"
    if hi:
        return f" {'<=' if hi[-1] == ']' else '<'} {hi[:-1]}"
    return ""


def option_lines(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """``key = default: description`` for every option of ``model``; nested blocks as ``block.key`` lines."""
    for key, field in model.model_fields.items():
        name = prefix + key
        nested = _nested_model(field.annotation)
        if field.is_required():
            shown = "(required block)" if nested is not None else "(required)"
        elif nested is not None and isinstance(default_of(field), BaseModel):
            shown = "(block)"
        else:
            shown = repr(default_of(field))
        about = field.description or ""
        choices = _choices(field.annotation)
        if choices:
            about += ("; " if about else "") + "one of: " + ", ".join(map(str, choices))
        shown += value_range(field.metadata)
        yield f"{name} = {shown}: {about}" if about else f"{name} = {shown}"
        if nested is not None:
            yield from option_lines(nested, name + ".")


def _plain(value: Any) -> Any:
    """Comparable, YAML-printable form of a value (models as dicts, tuples as lists)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def changed_options(cfg: BaseModel, prefix: str = "") -> dict[str, Any]:
    """Dotted key → value of every option of ``cfg`` that differs from its default (required ones always)."""
    out: dict[str, Any] = {}
    for key, field in type(cfg).model_fields.items():
        value = getattr(cfg, key)
        if field.is_required():
            out[prefix + key] = _plain(value)
            continue
        default = default_of(field)
        if isinstance(value, BaseModel) and isinstance(default, BaseModel) and type(value) is type(default):
            out.update(changed_options(value, f"{prefix}{key}."))
        elif _plain(value) != _plain(default):
            out[prefix + key] = _plain(value)
    return out


def as_yaml(value: Any) -> str:
    """A value in the one-line YAML flow style ``--set`` accepts (``0.5``, ``exponential``, ``{name: iid}``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()  # a bare scalar ends with YAML's document-end marker
