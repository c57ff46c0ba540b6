"""The server's Prometheus metrics, on a registry of its own (several servers may run in
one process), served at ``/metrics`` in the text exposition format.

Histograms are observed once per batch or decision (never per request); everything
else is read from the engine's own counters when Prometheus scrapes (a copy taken on
the event loop, formatted in a worker thread), so a request costs nothing here.
Per-robot series carry a ``robot`` label for at most ``max_robot_labels`` robots at a
time (the earliest connected, each name once); the rest are summed (counters, latency
sums) or averaged (queue depth, starvation) under ``robot="other"``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from armory.observe.robot_activity import RobotSample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER_ROBOTS = "other"
"""The ``robot`` label of robots beyond the label cap, summed or averaged."""

_FORWARD_BUCKETS_S = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
_DECISION_BUCKETS_S = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1)


@dataclass(frozen=True)
class EngineReading:
    """What the engine's counters say when Prometheus scrapes."""

    uptime_s: float
    busy_s: float
    """Seconds the executor spent on forward passes."""
    batch_size_counts: dict[int, int]
    decisions_by_rule: dict[str, int]
    requests_by_door: dict[str, int]
    replies_by_door: dict[str, dict[str, int]]
    """Replies by door, then by kind (chunk, deferred)."""
    errors_by_door: dict[str, dict[str, int]]
    """Requests answered with an error, by door, then by the error's kind."""
    num_worker_restarts: int
    robots: Sequence[RobotSample]
    """Connected robots, earliest connected first."""


class ServerMetrics:
    """The registry of the per-batch histograms; the rest comes with each scrape's
    :class:`EngineReading`."""

    def __init__(self, *, max_batch_size: int, max_robot_labels: int) -> None:
        self._max_batch_size = max_batch_size
        self._max_robot_labels = max_robot_labels
        self.registry = CollectorRegistry(auto_describe=True)
        self.forward_s = Histogram(
            "armory_forward_pass_seconds",
            "Seconds the policy took for one forward pass, by batch size.",
            ["batch_size"],
            buckets=_FORWARD_BUCKETS_S,
            registry=self.registry,
        )
        self._forward_by_size: dict[int, Any] = {}
        """Children of ``forward_s`` by batch size, made when a size first runs (a scrape
        then carries only the sizes that ran)."""
        self.decision_s = Histogram(
            "armory_scheduler_decision_seconds",
            "Seconds of one scheduling decision (snapshot, schedule, check).",
            buckets=_DECISION_BUCKETS_S,
            registry=self.registry,
        )

    def batch_done(self, size: int, policy_s: float) -> None:
        """Called once per forward pass."""
        child = self._forward_by_size.get(size)
        if child is None:
            child = self._forward_by_size[size] = self.forward_s.labels(str(size))
        child.observe(policy_s)

    def decided(self, decision_s: float) -> None:
        """Called once per scheduling decision (waits included)."""
        self.decision_s.observe(decision_s)

    def exposition(self, reading: EngineReading) -> bytes:
        """The text exposition of every metric (the body of ``/metrics``); safe to call
        from a worker thread."""
        scrape = CollectorRegistry(auto_describe=False)
        scrape.register(_EngineCollector(reading, self._max_batch_size, self._max_robot_labels))
        return generate_latest(self.registry) + generate_latest(scrape)


class _EngineCollector(Collector):
    """Families of one scrape's reading of the engine's counters."""

    def __init__(self, reading: EngineReading, max_batch_size: int, max_robot_labels: int) -> None:
        self._reading = reading
        self._max_batch_size = max_batch_size
        self._max_robot_labels = max_robot_labels

    def collect(self) -> Iterator[Metric]:
        r = self._reading
        yield from _door_families(r)
        yield _batch_size_family(r.batch_size_counts, self._max_batch_size)
        rules = CounterMetricFamily(
            "armory_scheduler_decisions",
            "Scheduling decisions by the scheduler rule that made them (waits included).",
            labels=["rule"],
        )
        for rule, n in sorted(r.decisions_by_rule.items()):
            rules.add_metric([rule], n)
        yield rules
        yield CounterMetricFamily(
            "armory_gpu_busy_seconds",
            "Seconds the executor spent on forward passes (rate() of it: the busy ratio).",
            value=r.busy_s,
        )
        yield GaugeMetricFamily(
            "armory_gpu_busy_ratio",
            "Share of the server's uptime spent on forward passes.",
            value=r.busy_s / r.uptime_s if r.uptime_s > 0 else 0.0,
        )
        yield CounterMetricFamily(
            "armory_worker_restarts",
            "Restarts of the policy's worker process (crash or hang).",
            value=r.num_worker_restarts,
        )
        yield GaugeMetricFamily(
            "armory_robots_connected", "Robots connected now.", value=len(r.robots)
        )
        yield from _robot_families(r.robots, self._max_robot_labels)


def _door_families(r: EngineReading) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "armory_requests", "Requests received, by front door.", labels=["door"]
    )
    for door, n in sorted(r.requests_by_door.items()):
        requests.add_metric([door], n)
    yield requests
    replies = CounterMetricFamily(
        "armory_replies", "Replies sent, by front door and kind.", labels=["door", "kind"]
    )
    for door, kinds in sorted(r.replies_by_door.items()):
        for kind, n in sorted(kinds.items()):
            replies.add_metric([door, kind], n)
    yield replies
    errors = CounterMetricFamily(
        "armory_request_errors",
        "Requests answered with an error, by front door and kind of error.",
        labels=["door", "kind"],
    )
    for door, kinds in sorted(r.errors_by_door.items()):
        for kind, n in sorted(kinds.items()):
            errors.add_metric([door, kind], n)
    yield errors


def _batch_size_family(counts: dict[int, int], max_batch_size: int) -> Metric:
    """The batch-size histogram, from the loop's count of forward passes per size."""
    buckets = []
    cumulative = 0
    for b in range(1, max_batch_size + 1):
        cumulative += counts.get(b, 0)
        buckets.append((str(float(b)), cumulative))
    total = sum(counts.values())
    buckets.append(("+Inf", total))
    return HistogramMetricFamily(
        "armory_batch_size",
        "Robots per forward pass.",
        buckets=buckets,
        sum_value=sum(b * n for b, n in counts.items()),
    )


def _robot_families(robots: Sequence[RobotSample], cap: int) -> Iterator[Metric]:
    named: list[RobotSample] = []
    others: list[RobotSample] = []
    labels_taken = {OTHER_ROBOTS}
    for sample in robots:
        # A robot's name is its own choice: one that another robot (or the aggregate)
        # already labels joins the aggregate, so no two series share a label.
        if len(named) < cap and sample.robot not in labels_taken:
            named.append(sample)
            labels_taken.add(sample.robot)
        else:
            others.append(sample)
    labels = ["robot"]
    depth = GaugeMetricFamily(
        "armory_robot_queue_depth_actions",
        "Actions queued on the robot at its last request (Armory clients; other: mean).",
        labels=labels,
    )
    starvation = GaugeMetricFamily(
        "armory_robot_starvation_ratio",
        "Share of the robot's ticks without an action since its first chunk, from its "
        "reports (other: mean).",
        labels=labels,
    )
    requests = CounterMetricFamily(
        "armory_robot_requests", "Requests received from the robot.", labels=labels
    )
    latency = SummaryMetricFamily(
        "armory_robot_chunk_latency_seconds",
        "Server time of each chunk reply, from the request's arrival to the reply sent.",
        labels=labels,
    )
    age = SummaryMetricFamily(
        "armory_robot_observation_age_seconds",
        "Age of an observation when its forward pass starts (its uplink included).",
        labels=labels,
    )
    groups = [(a.robot, [a]) for a in named]
    if others:
        groups.append((OTHER_ROBOTS, others))
    for label, group in groups:
        depths = [a.queue_depth_actions for a in group if a.queue_depth_actions is not None]
        if depths:
            depth.add_metric([label], sum(depths) / len(depths))
        ratios = [a.starvation for a in group if a.starvation is not None]
        if ratios:
            starvation.add_metric([label], sum(ratios) / len(ratios))
        requests.add_metric([label], sum(a.num_requests for a in group))
        num_chunks = sum(a.num_chunks for a in group)
        latency.add_metric([label], num_chunks, sum(a.latency_sum_s for a in group))
        age.add_metric([label], num_chunks, sum(a.observation_age_sum_s for a in group))
    yield from (depth, starvation, requests, latency, age)
