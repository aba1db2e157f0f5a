"""Errors a user can act on.

Every problem with user input (config, dataset, trace, CLI argument) is raised as a
:class:`ConfigError`; the CLI prints its one-line message and exits with code 2, so users never
see a traceback for a mistake of theirs.
"""

from __future__ import annotations

import reprlib
from itertools import islice

#: Characters of a user value shown in an error message: enough for the file paths users pass (a bad trace or
#: config is named in full, also under a deep temporary folder), few enough to keep the message one short line.
SHOWN_CHARS = 240


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` with limits small enough that showing any value takes microseconds.

    A user value may be an expanded YAML alias bomb or a pickle's shared-reference structure:
    its full ``repr`` can take minutes and gigabytes, or recurse without end. This one looks at
    no more than ``maxlevel`` levels of ``maxlist`` items each, never sorts or re-hashes a
    dict's keys (``reprlib`` does both), cuts strings and bytes before converting them, and
    shows a huge ``int`` by its size (its decimal digits cost quadratic time).
    """

    def __init__(self):
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdeque = 6
        self.maxdict = self.maxset = self.maxfrozenset = 6
        self.maxstring = self.maxlong = self.maxother = SHOWN_CHARS

    def repr_int(self, x, level):
        bits = x.bit_length()
        return f"<int of {bits} bits>" if bits > 256 else super().repr_int(x, level)

    def repr_bytes(self, x, level):
        return self._cut(repr(x[:self.maxstring]))

    def repr_dict(self, x, level):
        if not x:
            return "{}"
        if level <= 0:
            return "{" + self.fillvalue + "}"
        pieces = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
                  for k, v in islice(x.items(), self.maxdict)]
        return "{" + ", ".join(pieces + [self.fillvalue] * (len(x) > self.maxdict)) + "}"

    def repr_set(self, x, level):
        return self._repr_iterable(x, level, "{", "}", self.maxset) if x else "set()"

    def repr_frozenset(self, x, level):
        return self._repr_iterable(x, level, "frozenset({", "})", self.maxfrozenset) if x else "frozenset()"

    def repr_instance(self, x, level):
        if isinstance(x, (str, bytes, bytearray)):  # also subclasses (numpy.str_): never convert all of it
            return self._cut(repr(x[:self.maxstring]))
        return super().repr_instance(x, level)

    def _cut(self, s: str) -> str:
        return s if len(s) <= self.maxother else s[:self.maxother - 3] + self.fillvalue


_REPR = _BoundedRepr()


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message: one line of at most ``limit`` characters, in bounded time."""
    try:
        s = _REPR.repr(value)
    except Exception:  # a broken __repr__ of an odd object must not hide the actual error
        s = f"<{type(value).__name__}>"
    s = " ".join(s.split())  # one line: numpy arrays, for one, print over several
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _rebuild(cls: type, args: tuple, state: dict) -> Exception:
    """Unpickle a :class:`TurnoutError` without calling its ``__init__`` (whose arguments pickle does not keep)."""
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class TurnoutError(Exception):
    """Base class for errors that turnout reports to users as a single line.

    Such an error crosses process boundaries (a sweep's worker processes, ``--jobs``, Ray, a page check's pool):
    it pickles as its message and attributes, so the parent sees the same error, never a failed unpickling.
    """

    def __reduce__(self):
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class ConfigError(TurnoutError):
    """A bad value for a named key, with what would be accepted instead.

    ``key`` is the dotted path (``selector.clients_per_round``), ``value`` the offending value
    and ``allowed`` a short description of what is accepted (a range, a list of names, a fix).
    """

    def __init__(self, key: str, value: object, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key} = {shown(value)}: {allowed}")


class DataError(TurnoutError):
    """A dataset that is missing or malformed; the message says how to fix it."""


class ConfigWarning(UserWarning):
    """A config that runs but likely not as meant (a ``--set`` no variant takes); the CLI prints one line."""
