"""Sizes on the wire, shared by the engine (a model's bytes), the compressors (what they charge) and a
deployment's codec (what it actually sends), so none of them imports another for a constant."""

from __future__ import annotations

#: bytes of one model value: turnout's models and messages are float32
VALUE_BYTES = 4
#: bytes of one coordinate index in a sparse message (int32)
INDEX_BYTES = 4

__all__ = ["INDEX_BYTES", "VALUE_BYTES"]
