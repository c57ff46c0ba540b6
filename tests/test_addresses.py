"""Which bind and listening addresses count as reaching this machine only."""

from __future__ import annotations

import pytest

from armory.core.addresses import is_loopback


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.53",
        "localhost",
        "::1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "::ffff:127.0.0.1",
    ],
)
def test_loopback_addresses(host: str) -> None:
    """IPv4 and IPv6 loopback, with or without brackets, and IPv4-mapped loopback."""
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "[::]", "*", "", "192.0.2.2", "[::ffff:192.0.2.2]", "gpu-box"]
)
def test_wide_addresses(host: str) -> None:
    """Wildcards, other interfaces and host names are not loopback."""
    assert not is_loopback(host)
