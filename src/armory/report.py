"""Per-robot and per-fleet metrics of a run, and the JSON report they make.

Both ways of running a fleet end here: the simulator (``armory simulate``) and the
fleet runner (``armory fleet``) each reduce every robot to a :class:`RobotTally` of
raw counts (:meth:`RobotTally.for_robot`), and :func:`make_report` turns the tallies
and the server's batch counts into the same :class:`SimReport`, so one piece of code
computes the metrics and one prints them (``sim/table.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from armory.scheduling.rule_changes import RuleChanges

if TYPE_CHECKING:
    from armory.fleet_spec import FleetSpec, RobotSpec

MIN_STARTUP_S = 1.0
"""A robot's start-up lasts at least this long (see :func:`startup_s`)."""


def startup_s(fleet: FleetSpec, robot: RobotSpec) -> float:
    """Seconds after its first tick that a robot's wait for its first chunk is start-up.

    Every robot starts with an empty queue, so its ticks until its first chunk lands
    are start-up, not starvation, but only for as long as a server needs to give the
    whole fleet its first chunks: one round of the fleet in batches of the max size
    (at least ``MIN_STARTUP_S``), plus the robot's links at their longest. Past that,
    a robot still waiting is starving: otherwise a scheduler that left a robot out
    for most of a run would hide those ticks by serving it once near the end.
    """
    size = min(fleet.max_batch_size, fleet.num_robots)
    rounds = math.ceil(fleet.num_robots / size)
    round_s = rounds * fleet.profile().latency_s(size)
    links_s = sum(d.median_s + d.jitter_s for d in (robot.uplink, robot.downlink))
    return max(MIN_STARTUP_S, round_s) + links_s


@dataclass(frozen=True)
class RobotMetrics:
    """One robot over a run (ticks counted from its first chunk's landing, or from the end
    of its start-up if that comes first: :func:`startup_s`)."""

    id: str
    weight: float
    control_hz: float
    starvation: float
    """Starved ticks / counted ticks (1.0 if no chunk ever landed)."""
    actions_per_s: float
    """Actions executed per second of counted ticks."""
    inferences: int
    """Chunks applied."""
    mean_age_s: float
    """Freshness: mean age of the observation behind each executed action."""
    requests_per_s: float
    """Observations sent per second of the run."""
    bytes_sent_per_s: float | None = None
    """Bytes of observations sent per second of the run (None in virtual time: the
    simulator sends no bytes)."""


@dataclass(frozen=True)
class SystemMetrics:
    """The whole fleet over a run."""

    starvation: float
    """Starved ticks / counted ticks, all robots together."""
    throughput_actions_per_s: float
    weighted_throughput: float
    """Sum over robots of weight * actions per second."""
    jain_service: float
    """Fairness: Jain's index over per-robot service, the fraction of counted ticks with
    an action to execute (1 - starvation). 1.0 when every robot is served alike, down
    to 1/n when one robot gets all the service; a fleet that starves nobody reads 1.0,
    and one robot starved 0.2% of its ticks moves it by less than 0.001. (Over
    starvation itself, the index would read 1/n, the least fair, for that fleet.)"""
    bound_starvation: float | None
    """The least starvation any scheduler could reach (fluid LP); None when not computed."""
    mean_batch_size: float
    num_batches: int
    batch_size_histogram: dict[int, int]
    gpu_utilization: float
    """Fraction of the run the GPU spent in forward passes."""
    mean_age_s: float
    inferences_per_s: float
    bytes_sent_per_robot_per_s: float | None = None
    """Mean over robots of bytes sent per second (None in virtual time)."""


@dataclass(frozen=True)
class SimReport:
    """What ``armory simulate`` and ``armory fleet`` print and write as JSON."""

    scheduler: str
    fleet: str
    seed: int
    duration_s: float
    request_mode: str
    system: SystemMetrics
    robots: list[RobotMetrics] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    """Wall-clock measurements (vary between runs, unlike everything else)."""
    clock: str = "virtual"
    """``virtual`` (the simulator) or ``wall`` (real robots over real sockets)."""
    decisions_by_rule: dict[str, int] = field(default_factory=dict)
    """Scheduler decisions by the rule that made them (``Batch.rule``; waits included)."""
    rule_changes: dict[str, RuleChanges] = field(default_factory=dict)
    """Per rule, its decisions against the base rule's on the same snapshots (explained
    runs only: ``--explain``)."""


@dataclass(frozen=True)
class RobotTally:
    """One robot's raw counts over a run, from which its metrics follow."""

    id: str
    weight: float
    control_hz: float
    counted_ticks: int
    """Ticks since the first chunk landed or the start-up ended (:func:`startup_s`),
    whichever came first; every tick when no chunk ever landed."""
    starved_ticks: int
    """Counted ticks with an empty queue (every tick when no chunk ever landed)."""
    executed: int
    """Actions executed."""
    age_sum_s: float
    """Sum over executed actions of the age of the observation behind each."""
    chunks_applied: int
    requests_sent: int
    bytes_sent: int | None = None
    """Bytes of observations sent; None when nothing went over a wire."""

    @classmethod
    def for_robot(
        cls,
        spec: RobotSpec,
        *,
        counted_ticks: int,
        starved_ticks: int,
        executed: int,
        age_sum_s: float,
        chunks_applied: int,
        requests_sent: int,
        bytes_sent: int | None = None,
    ) -> RobotTally:
        """The tally of the fleet file's robot `spec` from its counts over a run."""
        return cls(
            id=spec.robot_id,
            weight=spec.weight,
            control_hz=spec.control_hz,
            counted_ticks=counted_ticks,
            starved_ticks=starved_ticks,
            executed=executed,
            age_sum_s=age_sum_s,
            chunks_applied=chunks_applied,
            requests_sent=requests_sent,
            bytes_sent=bytes_sent,
        )


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index of non-negative values; 1.0 when all are zero."""
    x = np.asarray(values, dtype=np.float64)
    total_sq = float(np.sum(x * x))
    if x.size == 0 or total_sq == 0.0:
        return 1.0
    return float(np.sum(x) ** 2 / (x.size * total_sq))


def robot_metrics(tally: RobotTally, duration_s: float) -> RobotMetrics:
    """The metrics of one robot's tally over a run of ``duration_s`` seconds."""
    active_s = tally.counted_ticks / tally.control_hz
    counted = tally.counted_ticks
    return RobotMetrics(
        id=tally.id,
        weight=tally.weight,
        control_hz=tally.control_hz,
        starvation=tally.starved_ticks / counted if counted else 0.0,
        actions_per_s=tally.executed / active_s if active_s > 0 else 0.0,
        inferences=tally.chunks_applied,
        mean_age_s=tally.age_sum_s / tally.executed if tally.executed else 0.0,
        requests_per_s=tally.requests_sent / duration_s,
        bytes_sent_per_s=None if tally.bytes_sent is None else tally.bytes_sent / duration_s,
    )


def make_report(
    tallies: Sequence[RobotTally],
    *,
    batch_size_counts: Mapping[int, int],
    gpu_busy_s: float,
    duration_s: float,
    scheduler: str,
    fleet: str,
    seed: int,
    request_mode: str,
    bound_starvation: float | None = None,
    timing: Mapping[str, float] | None = None,
    clock: str = "virtual",
    decisions_by_rule: Mapping[str, int] | None = None,
    rule_changes: Mapping[str, RuleChanges] | None = None,
) -> SimReport:
    """The report of a run: per-robot metrics from the tallies, fleet metrics from the
    tallies and the server's forward passes (``batch_size_counts``: passes per size)."""
    robots = [robot_metrics(t, duration_s) for t in tallies]
    counted = sum(t.counted_ticks for t in tallies)
    starved = sum(t.starved_ticks for t in tallies)
    executed = sum(t.executed for t in tallies)
    age_sum_s = sum(t.age_sum_s for t in tallies)
    counts = {int(b): int(n) for b, n in sorted(batch_size_counts.items()) if n}
    num_batches = sum(counts.values())
    num_inferences = sum(b * n for b, n in counts.items())
    sent = [r.bytes_sent_per_s for r in robots if r.bytes_sent_per_s is not None]
    system = SystemMetrics(
        starvation=starved / counted if counted else 0.0,
        throughput_actions_per_s=sum(r.actions_per_s for r in robots),
        weighted_throughput=sum(r.weight * r.actions_per_s for r in robots),
        jain_service=jain_index([1.0 - r.starvation for r in robots]),
        bound_starvation=bound_starvation,
        mean_batch_size=num_inferences / num_batches if num_batches else 0.0,
        num_batches=num_batches,
        batch_size_histogram=counts,
        gpu_utilization=gpu_busy_s / duration_s,
        mean_age_s=age_sum_s / executed if executed else 0.0,
        inferences_per_s=num_inferences / duration_s,
        bytes_sent_per_robot_per_s=float(np.mean(sent)) if sent else None,
    )
    return SimReport(
        scheduler=scheduler,
        fleet=fleet,
        seed=seed,
        duration_s=duration_s,
        request_mode=request_mode,
        system=system,
        robots=robots,
        timing=dict(timing or {}),
        clock=clock,
        decisions_by_rule=dict(sorted((decisions_by_rule or {}).items(), key=lambda kv: -kv[1])),
        rule_changes=dict(rule_changes or {}),
    )
