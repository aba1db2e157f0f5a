"""Is a Ray head listening at the address a user gave? Asked before anything starts.

``ray.init(address=...)`` with a wrong or dead address does not fail: it retries for minutes. Both
places that join a cluster (the ``--backend ray`` sweep and the ``ray`` executor) first open one TCP
connection to the head's port, so a typo or a head that is down is one line at once, naming the option.
"""

from __future__ import annotations

import socket

from .errors import ConfigError

#: seconds to wait for the head's port to accept a connection
CONNECT_TIMEOUT_S = 5.0


def check_head(address: str | None, key: str) -> None:
    """Raise a one-line :class:`ConfigError` on ``key`` when nothing accepts connections at ``address``.

    ``None`` (start a local Ray) and ``auto`` (Ray finds the cluster this machine belongs to) are not
    checked; ``HOST:PORT`` and ``ray://HOST:PORT`` (Ray Client) are.
    """
    if address is None or address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(key, address, "is not a Ray address: give HOST:PORT (the head's GCS port, 6379 by "
                                        "default) or ray://HOST:PORT (Ray Client, 10001 by default)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError(key, address, f"no Ray head answers there ({why.lower()}); start one with `ray start "
                                        f"--head --port {port}` on that machine, or fix the address") from None
