"""Deploy what you simulated: turnout's selectors, server rules, compressors and round modes on Flower.

The same experiment file configures both: the ``selector``, ``algorithm``, ``compressor`` and
``round_mode`` blocks run on real devices; ``data``, ``availability``, ``devices`` and ``executor``
describe the simulated world, which connected Flower nodes replace (``devices`` still prices
seconds under ``clock="modelled"``). :func:`server_app` builds the Flower ``ServerApp`` that runs
the rounds and writes the simulator's tables; :func:`client_app` builds the ``ClientApp`` that
runs turnout's client rule on a node's data; :func:`check_deployable` refuses, in one line, what only
the simulator can run. Flower is an optional extra (``pip install 'turnout[flower]'``): importing
this package never imports it, and the first call that needs it says how to install it.
"""

from __future__ import annotations

from .deployable import check_deployable
from .extra import FLOWER_VERSION, require_flower


def server_app(*args, **kwargs):
    """A Flower ``ServerApp`` running one experiment variant (see :func:`turnout.flower.serverapp.server_app`)."""
    from .serverapp import server_app as build  # optional extra: flwr is imported when an app is built

    return build(*args, **kwargs)


def client_app(*args, **kwargs):
    """A Flower ``ClientApp`` running turnout's client rule (see :func:`turnout.flower.clientapp.client_app`)."""
    from .clientapp import client_app as build  # optional extra: flwr is imported when an app is built

    return build(*args, **kwargs)


__all__ = ["FLOWER_VERSION", "check_deployable", "client_app", "require_flower", "server_app"]
