"""One clear error for a door that cannot listen: which door, which address, why.

Each door's ``start`` raises :class:`ListenError` when its socket cannot be bound
(a port in use, an address not on this machine), so ``armory serve`` names the
door whose port is taken, in one line, whatever library the door is built on.
"""

from __future__ import annotations

import os
import socket


class ListenError(OSError):
    """A door cannot listen on its address; the message names the door and the address."""

    def __init__(self, door: str, address: str, reason: object) -> None:
        super().__init__(f"the {door} door cannot listen on {address}: {reason}")


def bind_failure(exc: Exception) -> str:
    """The reason of a failed bind in a few words (``Address already in use``), from an
    OSError or a library's error that carries an errno (ZeroMQ's)."""
    errno = getattr(exc, "errno", None)
    return os.strerror(errno) if isinstance(errno, int) and errno > 0 else str(exc)


def check_free(door: str, host: str, port: int) -> None:
    """Raise :class:`ListenError` if ``host:port`` cannot be bound now.

    Called by a door before it hands its port to a library that reports a failed
    bind only in its own log (gRPC). Binds the way such servers do
    (``SO_REUSEADDR``), so a port in TIME_WAIT is not called taken; port 0 always
    passes.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ListenError(door, f"{host}:{port}", exc) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ListenError(door, f"{host}:{port}", bind_failure(exc)) from None
