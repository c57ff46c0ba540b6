"""Which addresses reach this machine only."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether a bind or listening address reaches this machine only: ``localhost``,
    ``127.0.0.1``, ``[::1]``, an IPv4-mapped loopback (``[::ffff:127.0.0.1]``, as
    ``ss`` lists a dual-stack socket bound to 127.0.0.1). A wildcard (``0.0.0.0``,
    ``::``, ``*``) or a host name is not: a name may resolve to any interface."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback
