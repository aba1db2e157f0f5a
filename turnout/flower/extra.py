"""Flower is an optional extra: the release turnout is tested with, and a one-line error when it is missing."""

from __future__ import annotations

from ..core.errors import ConfigError

#: The Flower release this package is tested with (the ``turnout[flower]`` extra pins it).
FLOWER_VERSION = "1.42.0"


def require_flower():
    """The ``flwr`` module, or a one-line error saying how to install the extra."""
    try:
        import flwr
    except ImportError:
        raise ConfigError("flower", "not installed",
                          f"install the extra: pip install -c constraints.txt 'turnout[flower]' "
                          f"(flwr[simulation]=={FLOWER_VERSION})") from None
    return flwr
