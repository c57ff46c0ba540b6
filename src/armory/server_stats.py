"""A running server's own counters (``GET /stats``), read by the programs that drive it.

A run's batch sizes and GPU busy time are the server's to know: the fleet runner
reads an Armory server's ``/stats`` at both ends of the run and keeps the
difference, and ``armory eval --server`` reads it for its progress bar. A server
without ``/stats`` (upstream openpi) gives None, and the report's batch metrics
stay empty. The front door of ``armory cluster`` has no ``/stats`` of its own: its
``/replicas`` names the replicas, whose readings are read and combined into one
(:func:`combined`).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from armory.scheduling.rule_changes import RuleChanges, changes_since, summed

_TIMEOUT_S = 3.0
MAX_STATS_BYTES = 1 << 20
"""Largest ``/stats`` answer read (bytes)."""
REPLICAS_PATH = "/replicas"
"""A cluster's front door lists its replicas here."""
MAX_REPLICAS = 1024
"""Most replicas of a listing read."""


@dataclass(frozen=True)
class StatsReading:
    """The counters of one ``/stats`` answer that a run's report needs."""

    batch_size_counts: dict[int, int]
    """Forward passes per batch size since the server started."""
    busy_s: float
    """Seconds of forward passes since the server started."""
    overhead_ms_p50: float | None
    """Server-added time per request over its recent requests (median)."""
    overhead_ms_p99: float | None
    decision_ms_mean: float
    """Mean time of one scheduling decision since the server started."""
    num_errors: int
    """Requests the server answered with an error."""
    decision_cpu_ms_mean: float | None = None
    """The mean decision in processor time of the server's deciding thread (None from
    a server that does not report it)."""
    steps_ms_p50: float | None = None
    """The requests' own steps (decode, validate, schedule, encode) over recent requests
    (median)."""
    steps_ms_p99: float | None = None
    latency_points_s: dict[int, float] = field(default_factory=dict)
    """The server's learned forward-pass seconds per batch size (empty if it reports none)."""
    decisions_by_rule: dict[str, int] = field(default_factory=dict)
    """Scheduling decisions by the rule that made them, since the server started."""
    num_replicas: int = 1
    """Servers (a cluster's replicas, each its own GPU) the reading covers."""
    rule_changes: dict[str, RuleChanges] = field(default_factory=dict)
    """Per rule, what it changed against the scheduler's base rule alone, since the
    server started (empty unless the server explains its rules)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StatsReading:
        return cls(
            batch_size_counts={int(b): int(n) for b, n in data["batch_size_counts"].items()},
            busy_s=float(data["busy_s"]),
            overhead_ms_p50=data.get("overhead_ms_p50"),
            overhead_ms_p99=data.get("overhead_ms_p99"),
            steps_ms_p50=data.get("steps_ms_p50"),
            steps_ms_p99=data.get("steps_ms_p99"),
            decision_ms_mean=float(data.get("decision_ms_mean", 0.0)),
            decision_cpu_ms_mean=data.get("decision_cpu_ms_mean"),
            num_errors=int(data.get("num_errors", 0)),
            latency_points_s={
                int(b): float(s) for b, s in (data.get("latency_points_s") or {}).items()
            },
            decisions_by_rule={
                str(r): int(n) for r, n in (data.get("decisions_by_rule") or {}).items()
            },
            rule_changes={
                str(r): RuleChanges.from_json(c)
                for r, c in (data.get("rule_changes") or {}).items()
            },
        )

    def rules_since(self, earlier: StatsReading | None) -> dict[str, int]:
        """Decisions by rule between ``earlier`` and this reading."""
        before = {} if earlier is None else earlier.decisions_by_rule
        counts = {r: n - before.get(r, 0) for r, n in self.decisions_by_rule.items()}
        return {r: n for r, n in counts.items() if n > 0}

    def rule_changes_since(self, earlier: StatsReading | None) -> dict[str, RuleChanges]:
        """What each rule changed between ``earlier`` and this reading."""
        return changes_since(self.rule_changes, {} if earlier is None else earlier.rule_changes)

    def since(self, earlier: StatsReading | None) -> tuple[dict[int, int], float]:
        """Batch counts and busy seconds between ``earlier`` and this reading."""
        if earlier is None:
            return dict(self.batch_size_counts), self.busy_s
        counts = {
            b: n - earlier.batch_size_counts.get(b, 0) for b, n in self.batch_size_counts.items()
        }
        # A server restarted between the readings (a cluster's replica) counts afresh.
        return {b: n for b, n in counts.items() if n > 0}, max(self.busy_s - earlier.busy_s, 0.0)


def stats_url(ws_uri: str) -> str:
    """``ws://host:port`` (or ``wss://``) to the matching ``http(s)://host:port/stats``."""
    scheme, _, rest = ws_uri.partition("://")
    http_scheme = "https" if scheme == "wss" else "http"
    return f"{http_scheme}://{rest.split('/', 1)[0]}/stats"


def combined(readings: list[StatsReading]) -> StatsReading:
    """One reading of several servers (a cluster's replicas): passes, decisions and errors
    summed; busy seconds and the learned latency per batch size their mean (per GPU);
    decision times (wall and processor) the means weighted by passes; server-added and
    step times the highest replica's."""
    passes = [sum(r.batch_size_counts.values()) for r in readings]
    sizes = {b for r in readings for b in r.batch_size_counts}
    rules = {rule for r in readings for rule in r.decisions_by_rule}
    points = {b for r in readings for b in r.latency_points_s}
    cpu_ms = [r.decision_cpu_ms_mean for r in readings if r.decision_cpu_ms_mean is not None]

    def highest(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return StatsReading(
        batch_size_counts={b: sum(r.batch_size_counts.get(b, 0) for r in readings) for b in sizes},
        busy_s=sum(r.busy_s for r in readings) / len(readings),
        overhead_ms_p50=highest([r.overhead_ms_p50 for r in readings]),
        overhead_ms_p99=highest([r.overhead_ms_p99 for r in readings]),
        steps_ms_p50=highest([r.steps_ms_p50 for r in readings]),
        steps_ms_p99=highest([r.steps_ms_p99 for r in readings]),
        decision_ms_mean=_weighted_mean([r.decision_ms_mean for r in readings], passes),
        decision_cpu_ms_mean=(
            _weighted_mean(cpu_ms, passes) if len(cpu_ms) == len(readings) else None
        ),
        num_errors=sum(r.num_errors for r in readings),
        latency_points_s={
            b: sum(r.latency_points_s[b] for r in readings if b in r.latency_points_s)
            / sum(1 for r in readings if b in r.latency_points_s)
            for b in points
        },
        decisions_by_rule={
            rule: sum(r.decisions_by_rule.get(rule, 0) for r in readings) for rule in rules
        },
        num_replicas=sum(r.num_replicas for r in readings),
        rule_changes=summed([r.rule_changes for r in readings]),
    )


def _get_json(url: str, api_key: str | None) -> Any:
    """The JSON body of ``GET url`` (raises on any failure)."""
    headers = {"Authorization": f"Api-Key {api_key}"} if api_key else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            return json.loads(response.read(MAX_STATS_BYTES))
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the answer's socket
        raise


def fetch_stats(ws_uri: str, api_key: str | None) -> StatsReading | None:
    """The server's counters, or None when it has no readable ``/stats`` (blocks up to a
    few seconds). At a cluster's front door, its replicas' counters combined."""
    url = stats_url(ws_uri)
    try:
        return StatsReading.from_json(_get_json(url, api_key))
    except urllib.error.HTTPError as exc:
        if exc.code != HTTPStatus.NOT_FOUND:
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return _fetch_replicas(url.removesuffix("/stats") + REPLICAS_PATH, api_key)


def _fetch_replicas(url: str, api_key: str | None) -> StatsReading | None:
    """A cluster's replicas' counters combined (from its front door's listing at ``url``);
    None unless every replica up answers."""
    try:
        listing = _get_json(url, api_key)
        doors = [
            str(entry["doors"]["openpi"])
            for entry in listing[:MAX_REPLICAS]
            if entry.get("doors") and entry["doors"].get("openpi")
        ]
        if not doors:
            return None
        return combined(
            [StatsReading.from_json(_get_json(stats_url(door), api_key)) for door in doors]
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


async def read_stats(ws_uri: str, api_key: str | None) -> StatsReading | None:
    """:func:`fetch_stats` off the event loop."""
    return await asyncio.to_thread(fetch_stats, ws_uri, api_key)


def batches_since_now(ws_uri: str, api_key: str | None) -> Callable[[], int] | None:
    """A counter of the server's forward passes from this call on, one ``/stats`` read per
    call (the last count it read when a read fails); None when the server has no readable
    ``/stats`` now."""
    before = fetch_stats(ws_uri, api_key)
    if before is None:
        return None
    last = 0

    def num_batches() -> int:
        nonlocal last
        now = fetch_stats(ws_uri, api_key)
        if now is not None:
            last = sum(now.since(before)[0].values())
        return last

    return num_batches


def _weighted_mean(values: list[float], weights: list[int]) -> float:
    return sum(v * n for v, n in zip(values, weights, strict=True)) / max(sum(weights), 1)
