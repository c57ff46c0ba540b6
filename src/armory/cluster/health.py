"""Is a replica alive, and what latency has it learned: one HTTP GET of its ``/stats``.

The front door's supervisor asks every replica's openpi door each period; a replica
that refuses the connection is dead at once, one that does not answer in time misses
a beat (a hung replica misses several and is declared dead).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from armory.core.latency_profile import LatencyProfile
from armory.placement.base import ReplicaProfile
from armory.transports import http

MAX_STATS_BYTES = 1 << 20
"""Largest /stats answer read (bytes)."""


@dataclass(frozen=True)
class Probe:
    """One look at a replica."""

    alive: bool
    """It answered /stats with 200."""
    refused: bool = False
    """Nothing listens on its port: its process is gone."""
    profile: ReplicaProfile | None = None
    """Its learned latency per batch size (up to the max batch), when it answered."""


async def probe_replica(
    host: str, port: int, *, timeout_s: float, max_batch_size: int, api_key: str | None = None
) -> Probe:
    """GET ``/stats`` from a replica's openpi door within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                auth = f"{http.AUTH_HEADER}: {http.AUTH_SCHEME} {api_key}\r\n" if api_key else ""
                writer.write(
                    f"GET {http.STATS_PATH} HTTP/1.1\r\nHost: {host}\r\n{auth}"
                    "Connection: close\r\n\r\n".encode()
                )
                await writer.drain()
                raw = await reader.read(MAX_STATS_BYTES)
                while chunk := await reader.read(MAX_STATS_BYTES - len(raw)):
                    raw += chunk
            finally:
                writer.close()
    except ConnectionRefusedError:
        return Probe(alive=False, refused=True)
    except (TimeoutError, OSError):
        return Probe(alive=False)
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return Probe(alive=False)
    try:
        points = json.loads(body)["latency_points_s"]
        table = LatencyProfile({int(b): float(s) for b, s in points.items()}).table(max_batch_size)
    except (ValueError, KeyError, TypeError):
        return Probe(alive=True)
    return Probe(alive=True, profile=ReplicaProfile(tuple(float(x) for x in table[1:])))
