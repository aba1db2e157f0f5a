"""Errors a user can act on.

Every problem with user input (config, dataset, trace, CLI argument) is raised as a
:class:`ConfigError`; the CLI prints its one-line message and exits with code 2, so users never
see a traceback for a mistake of theirs.
"""

from __future__ import annotations


class TurnoutError(Exception):
    """Base class for errors that turnout reports to users as a single line."""


class ConfigError(TurnoutError):
    """A bad value for a named key, with what would be accepted instead.

    ``key`` is the dotted path (``selector.clients_per_round``), ``value`` the offending value
    and ``allowed`` a short description of what is accepted (a range, a list of names, a fix).
    """

    def __init__(self, key: str, value: object, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{key} = {shown}: {allowed}")


class DataError(TurnoutError):
    """A dataset that is missing or malformed; the message says how to fix it."""


class ConfigWarning(UserWarning):
    """A config that runs but likely not as meant (a ``--set`` no variant takes); the CLI prints one line."""
