"""Declared run state: what a checkpoint must carry, and how it becomes plain arrays + JSON.

Every stateful part of a simulation (components, the server model, the client-state store, the
world's ledgers and counters) says by name which of its attributes change as a run goes on
(:attr:`Stateful.state_attrs`) and which are per-round scratch that is always rewritten before it
is read (:attr:`Stateful.scratch_attrs`: not checkpointed, since checkpoints are taken between
rounds). Everything else an object holds must be derived from its config, the seed and that
state. A test runs every registered component, compares its attributes with a freshly built one
and fails on any change that is not declared, so a new component cannot silently skip this.

State trees are made of ``None``, ``bool``, ``int``, ``float``, ``str``, numpy scalars and arrays,
torch tensors, and lists / tuples / dicts (``str`` or ``int`` keys) of those.
:func:`encode_state` turns a tree into ``(arrays, meta)``: a flat dict of numpy arrays (for an
``.npz``) and a JSON-able skeleton that points at them; :func:`decode_state` inverts it exactly
(dtypes, shapes, integer keys, tuples and non-finite floats included). Nothing is pickled.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Iterator

import numpy as np
import torch

#: torch dtype ↔ numpy dtype name, for the tensors a checkpoint carries.
_TORCH_TO_NUMPY = {torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
                   torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
                   torch.uint8: "uint8", torch.bool: "bool"}
_NUMPY_TO_TORCH = {v: k for k, v in _TORCH_TO_NUMPY.items()}


class Stateful:
    """Mixin: ``state_dict()`` / ``load_state_dict()`` over the attributes a class declares.

    Subclasses list only their own attributes; the declarations of base classes are inherited.
    An attribute holding another :class:`Stateful` object is saved and loaded through that object.
    """

    state_attrs: ClassVar[tuple[str, ...]] = ()
    scratch_attrs: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def declared_state(cls) -> tuple[str, ...]:
        """Every attribute name a checkpoint carries, base classes first."""
        return _collect(cls, "state_attrs")

    @classmethod
    def declared_scratch(cls) -> tuple[str, ...]:
        return _collect(cls, "scratch_attrs")

    def state_dict(self) -> dict[str, Any]:
        """A deep copy of the declared state (plain arrays, tensors and scalars)."""
        out = {}
        for name in self.declared_state():
            value = getattr(self, name)
            out[name] = value.state_dict() if isinstance(value, Stateful) else snapshot(value)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the declared state; a missing or unknown key is an error, not a silent default."""
        names = self.declared_state()
        missing, unknown = set(names) - set(state), set(state) - set(names)
        if missing or unknown:
            raise KeyError(f"{type(self).__name__} state: missing {sorted(missing)}, unexpected {sorted(unknown)}")
        for name in names:
            current = getattr(self, name, None)
            if isinstance(current, Stateful):
                current.load_state_dict(state[name])
            else:
                setattr(self, name, snapshot(state[name]))


def _collect(cls: type, attr: str) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for base in reversed(cls.__mro__):
        for name in base.__dict__.get(attr, ()):
            names[name] = None
    return tuple(names)


def snapshot(value: Any) -> Any:
    """A deep, independent copy of a state tree (arrays copied, tensors cloned)."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return value
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Stateful):
        return value.state_dict()
    if isinstance(value, tuple):
        return tuple(snapshot(v) for v in value)
    if isinstance(value, list):
        return [snapshot(v) for v in value]
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    raise TypeError(f"{type(value).__name__} is not a plain state value (arrays, tensors, scalars, "
                    "lists and dicts of them)")


# ---- on-disk form ------------------------------------------------------------------------------
def encode_state(tree: Any) -> tuple[dict[str, np.ndarray], Any]:
    """``(arrays, meta)``: numpy arrays keyed ``a0, a1, …`` and a JSON-able skeleton referring to them."""
    arrays: dict[str, np.ndarray] = {}

    def put(arr: np.ndarray) -> str:
        key = f"a{len(arrays)}"
        arrays[key] = arr
        return key

    def enc(v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, np.generic):  # before int/float: np.float64 is a float, and must come back as one
            return {"$scalar": put(np.asarray(v))}
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"$float": repr(v)}
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise TypeError("object arrays cannot be checkpointed")
            return {"$ndarray": put(np.ascontiguousarray(v))}
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu()
            if t.dtype not in _TORCH_TO_NUMPY:
                raise TypeError(f"tensor dtype {t.dtype} cannot be checkpointed")
            return {"$tensor": put(t.contiguous().numpy()), "dtype": _TORCH_TO_NUMPY[t.dtype]}
        if isinstance(v, Stateful):
            return enc(v.state_dict())
        if isinstance(v, tuple):
            return {"$tuple": [enc(x) for x in v]}
        if isinstance(v, list):
            return [enc(x) for x in v]
        if isinstance(v, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in v):
                return {k: enc(x) for k, x in v.items()}
            if all(isinstance(k, (int, str)) and not isinstance(k, bool) for k in v):
                return {"$items": [[k, enc(x)] for k, x in v.items()]}
        raise TypeError(f"{type(v).__name__} cannot be checkpointed")

    return arrays, enc(tree)


def decode_state(arrays: dict[str, np.ndarray], meta: Any) -> Any:
    """Inverse of :func:`encode_state`.

    Arrays are used as given (no copy: a memory-mapped array stays on disk until a component copies
    what it needs); tensors are copied into writable memory.
    """

    def dec(v: Any) -> Any:
        if isinstance(v, list):
            return [dec(x) for x in v]
        if not isinstance(v, dict):
            return v
        if "$float" in v:
            return float(v["$float"])
        if "$scalar" in v:
            return np.asarray(arrays[v["$scalar"]])[()]
        if "$ndarray" in v:
            return arrays[v["$ndarray"]]
        if "$tensor" in v:
            arr = np.array(arrays[v["$tensor"]], copy=True)
            return torch.from_numpy(arr).to(_NUMPY_TO_TORCH[v["dtype"]])
        if "$tuple" in v:
            return tuple(dec(x) for x in v["$tuple"])
        if "$items" in v:
            return {k: dec(x) for k, x in v["$items"]}
        return {k: dec(x) for k, x in v.items()}

    return dec(meta)


def iter_leaves(tree: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, leaf)`` for every leaf of a state tree (tests compare trees leaf by leaf)."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from iter_leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from iter_leaves(v, f"{path}[{i}]")
    else:
        yield path, tree


def same_state(a: Any, b: Any) -> bool:
    """Exact equality of two state trees (same structure, dtypes and bits; NaN equals NaN)."""
    la, lb = list(iter_leaves(a)), list(iter_leaves(b))
    if [p for p, _ in la] != [p for p, _ in lb]:
        return False
    for (_, x), (_, y) in zip(la, lb):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.dtype != y.dtype \
                    or x.shape != y.shape or not torch.equal(torch.nan_to_num(x), torch.nan_to_num(y)) \
                    or not torch.equal(torch.isnan(x) if x.is_floating_point() else x,
                                       torch.isnan(y) if y.is_floating_point() else y):
                return False
        elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)) or x.dtype != y.dtype \
                    or not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
                return False
        elif isinstance(x, float) and isinstance(y, float):
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True
