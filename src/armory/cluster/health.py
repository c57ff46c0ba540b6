"""Is a replica alive, what latency has it learned, and who is connected: one HTTP GET
of its ``/stats``; and ``/move``, by which the front door moves a robot off it.

The front door's supervisor asks every replica's openpi door each period; a replica
that refuses the connection is dead at once, one that does not answer in time misses
a beat (a hung replica misses several and is declared dead).
"""

from __future__ import annotations

import asyncio
import json
import math
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from armory.core.latency_profile import LatencyProfile
from armory.placement.base import ReplicaProfile, RobotDemand
from armory.server_stats import MAX_STATS_BYTES
from armory.transports import http

MAX_REPORTED_BATCH_SIZE = 1 << 16
"""Largest batch size of a replica's learned latency that is read: a profile builds a
table up to its largest point, so a larger one is ignored rather than built."""
MIN_LEARNED_BATCHES = 5
"""Forward passes a replica must have run before its learned latency counts for
placement. A fresh replica's first passes run cold (a GPU allocates, compiles, tunes;
a process's first calls fault pages in), and a median of one or two of them would make
it look several times slower than its twin while the fleet's first robots are placed."""


@dataclass(frozen=True)
class ReplicaPresence:
    """The robots connected at a replica, as its ``/stats`` rows list them."""

    names: frozenset[str] = frozenset()
    """Connected robots that reported their Armory robot id."""
    num_unnamed: int = 0
    """Connected robots known only by their connection (plain clients, and Armory robots
    before their first request)."""
    demands: Mapping[str, RobotDemand] = field(default_factory=dict)
    """Of the named ones: the rate, horizon and weight they reported (no round trip: the
    replica does not measure one), where those are within the wire's bounds."""


@dataclass(frozen=True)
class Probe:
    """One look at a replica."""

    alive: bool
    """It answered /stats with 200."""
    refused: bool = False
    """Nothing listens on its port: its process is gone."""
    profile: ReplicaProfile | None = None
    """Its learned latency per batch size (up to the max batch), when it answered."""
    presence: ReplicaPresence | None = None
    """Who is connected there, when it answered with rows that say."""
    error: str | None = None
    """Why it could not be read where that is worth telling (TLS refused)."""


async def probe_replica(
    host: str,
    port: int,
    *,
    timeout_s: float,
    max_batch_size: int,
    api_key: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Probe:
    """GET ``/stats`` from a replica's openpi door within ``timeout_s`` (over TLS with
    ``ssl_context``, a client context that trusts the replicas' certificate)."""
    try:
        raw = await _get(host, port, http.STATS_PATH, timeout_s, api_key, ssl_context)
    except ConnectionRefusedError:
        return Probe(alive=False, refused=True)
    except ssl.SSLError as exc:  # a certificate not trusted, or TLS on one side only
        return Probe(alive=False, error=f"TLS failed: {exc}")
    except (TimeoutError, OSError):
        return Probe(alive=False)
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return Probe(alive=False)
    try:
        stats = json.loads(body)
    except ValueError:  # cut at MAX_STATS_BYTES, or not JSON: alive, nothing learned
        return Probe(alive=True)
    return Probe(
        alive=True,
        profile=learned_profile(stats, max_batch_size),
        presence=replica_presence(stats),
    )


async def move_robot(
    host: str,
    port: int,
    robot: str,
    *,
    timeout_s: float,
    api_key: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> bool:
    """Ask a replica to move ``robot`` (``GET /move``): its connection closes after its
    next reply and it reconnects through the front door. True when the replica took it."""
    target = f"{http.MOVE_PATH}?{urlencode({'robot': robot})}"
    try:
        raw = await _get(host, port, target, timeout_s, api_key, ssl_context)
    except (TimeoutError, OSError, ssl.SSLError):
        return False
    return raw.startswith(b"HTTP/1.1 200")


async def _get(
    host: str,
    port: int,
    target: str,
    timeout_s: float,
    api_key: str | None,
    ssl_context: ssl.SSLContext | None,
) -> bytes:
    """The raw response (head and body, at most ``MAX_STATS_BYTES``) to one GET of
    ``target`` from a replica's openpi door within ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context)
        try:
            auth = f"{http.AUTH_HEADER}: {http.AUTH_SCHEME} {api_key}\r\n" if api_key else ""
            writer.write(
                f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n".encode()
            )
            await writer.drain()
            raw = await reader.read(MAX_STATS_BYTES)
            while chunk := await reader.read(MAX_STATS_BYTES - len(raw)):
                raw += chunk
        finally:
            writer.close()
    return raw


def replica_presence(stats: Any) -> ReplicaPresence | None:
    """Who a replica's ``/stats`` (parsed JSON) says is connected; None when its robot rows
    are missing or not as :class:`~armory.observe.robot_activity.RobotRow` writes them."""
    try:
        connected = [row for row in stats["robots"] if row["connected"] is True]
        named = [(row["robot"], row["named"]) for row in connected]
    except (KeyError, TypeError):
        return None
    if not all(isinstance(name, str) and isinstance(flag, bool) for name, flag in named):
        return None
    return ReplicaPresence(
        names=frozenset(name for name, flag in named if flag),
        num_unnamed=sum(1 for _, flag in named if not flag),
        demands={
            row["robot"]: demand
            for row in connected
            if row["named"] and (demand := _reported_demand(row)) is not None
        },
    )


def _reported_demand(row: dict[str, Any]) -> RobotDemand | None:
    """The demand a robot row reports; None when a field is missing, of the wrong type or
    beyond the wire's bounds."""
    horizon = row.get("max_execution_horizon")
    if not isinstance(horizon, int) or isinstance(horizon, bool):
        return None
    try:
        return RobotDemand(
            control_hz=float(row["control_hz"]),
            max_execution_horizon=horizon,
            weight=float(row["weight"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def learned_profile(stats: Any, max_batch_size: int) -> ReplicaProfile | None:
    """The latency a replica's ``/stats`` (parsed JSON) reports, up to ``max_batch_size``;
    None (the front door keeps the profile it has) before the replica has run
    :data:`MIN_LEARNED_BATCHES` forward passes, when it reports none, or points that are
    not batch sizes of 1 to :data:`MAX_REPORTED_BATCH_SIZE` with finite positive seconds."""
    try:
        points = {int(b): float(s) for b, s in stats["latency_points_s"].items()}
        num_batches = sum(int(n) for n in stats["batch_size_counts"].values())
    except (ValueError, OverflowError, KeyError, TypeError, AttributeError):
        return None
    if num_batches < MIN_LEARNED_BATCHES:
        return None
    if not all(1 <= b <= MAX_REPORTED_BATCH_SIZE and math.isfinite(s) for b, s in points.items()):
        return None
    try:
        table = LatencyProfile(points).table(max_batch_size)
    except ValueError:  # no points, or seconds <= 0
        return None
    return ReplicaProfile(tuple(float(x) for x in table[1:]))
