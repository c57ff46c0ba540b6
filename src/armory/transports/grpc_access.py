"""Who may call the LeRobot gRPC door: the API key in a call's metadata, or an allowed address.

A client that can set gRPC metadata sends ``authorization: Api-Key <key>``, the same
header the openpi door checks, compared in constant time. LeRobot's unmodified
``RobotClient`` (0.6.1) opens a bare channel and cannot send metadata, so the door
also takes an allowlist of networks (CIDR) whose calls need no key. An address is
weaker than a key: anyone who can send from an allowed address (another user of an
allowed host, a NAT gateway in front of many hosts) is let in; docs/security.md.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from armory.transports.http import AUTH_SCHEME, api_key_ok

AUTH_METADATA_KEY = "authorization"
"""gRPC metadata key of the API key (gRPC keys are lower case)."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(cidrs: Iterable[str], *, option: str) -> tuple[Network, ...]:
    """Networks from CIDR strings (a bare address is one host); a bad entry raises a
    ValueError naming it and ``option``."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(
                f"{option}: {cidr!r} is not a network (CIDR such as 10.0.0.0/24 or an "
                f"address such as 192.168.1.7): {exc}"
            ) from None
    return tuple(networks)


def peer_address(peer: str) -> Address | None:
    """The IP address in a gRPC peer string (``ipv4:10.0.0.5:50412``,
    ``ipv6:[::1]:50412``, ``ipv6:%5B::1%5D:50412``); None for any other kind (``unix:``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        host = rest.rsplit(":", 1)[0]
    elif kind == "ipv6":
        host = rest.replace("%5B", "[").replace("%5D", "]")
        host = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        host = host.split("%", 1)[0]  # a zone index
    else:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class CallAccess:
    """The door's rule: with neither a key nor networks every call passes; otherwise a
    call passes with the right key in its metadata, or from an allowed network."""

    api_key: str | None = None
    """The key a call's ``authorization`` metadata must carry (``Api-Key <key>``)."""
    networks: tuple[Network, ...] = ()
    """Networks whose calls need no key."""

    @property
    def is_open(self) -> bool:
        """Whether every call passes (no key, no networks)."""
        return not self.api_key and not self.networks

    def allows(self, metadata: Sequence[tuple[str, str | bytes]] | None, peer: str) -> bool:
        """Called before every RPC is served: whether this call may go on."""
        if self.is_open:
            return True
        if self.networks:
            address = peer_address(peer)
            if address is not None and any(address in network for network in self.networks):
                return True
        if not self.api_key:
            return False
        return any(
            api_key_ok(value, self.api_key)
            for key, value in metadata or ()
            if key == AUTH_METADATA_KEY and isinstance(value, str)
        )

    def describe(self) -> str:
        """Who is served, for the door's start-up line."""
        if self.is_open:
            return "no API key (every caller is served)"
        if self.networks and self.api_key:
            return "API key required outside the allowed networks"
        if self.networks:
            return "only the allowed networks are served"
        return "API key required"

    def refusal(self) -> str:
        """The status message of a refused call: what it lacked, no more."""
        ways = []
        if self.api_key:
            ways.append(f"send the gRPC metadata '{AUTH_METADATA_KEY}: {AUTH_SCHEME} <key>'")
        if self.networks:
            ways.append("connect from a network the operator allowed (--lerobot.allowed-networks)")
        return "missing or wrong API key: " + " or ".join(ways)
