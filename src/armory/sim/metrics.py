"""Per-robot and per-fleet metrics of a run, and the JSON report they make."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from armory.sim.simulator import Simulator


@dataclass(frozen=True)
class RobotMetrics:
    """One robot over a run (starvation counted from its first chunk's landing)."""

    id: str
    weight: float
    control_hz: float
    starvation: float
    """Starved ticks / ticks since the first chunk landed (1.0 if none ever landed)."""
    actions_per_s: float
    """Actions executed per second since the first chunk landed."""
    inferences: int
    """Chunks applied."""
    mean_age_s: float
    """Freshness: mean age of the observation behind each executed action."""
    requests_per_s: float
    """Observations sent per second of the run."""


@dataclass(frozen=True)
class SystemMetrics:
    """The whole fleet over a run."""

    starvation: float
    """Starved ticks / counted ticks, all robots together."""
    throughput_actions_per_s: float
    weighted_throughput: float
    """Sum over robots of weight * actions per second."""
    jain_starvation: float
    """Jain's index over per-robot starvation (1.0 = equal shares; all zero counts as 1.0)."""
    bound_starvation: float | None
    """The least starvation any scheduler could reach (fluid LP); None when not computed."""
    mean_batch_size: float
    num_batches: int
    batch_size_histogram: dict[int, int]
    gpu_utilization: float
    """Fraction of the run the GPU spent in forward passes."""
    mean_age_s: float
    inferences_per_s: float


@dataclass(frozen=True)
class SimReport:
    """What ``armory simulate`` prints and writes as JSON."""

    scheduler: str
    fleet: str
    seed: int
    duration_s: float
    request_mode: str
    system: SystemMetrics
    robots: list[RobotMetrics] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    """Wall-clock measurements (vary between runs, unlike everything else)."""


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index of non-negative values; 1.0 when all are zero."""
    x = np.asarray(values, dtype=np.float64)
    total_sq = float(np.sum(x * x))
    if x.size == 0 or total_sq == 0.0:
        return 1.0
    return float(np.sum(x) ** 2 / (x.size * total_sq))


def build_report(sim: Simulator, end_s: float, bound_starvation: float | None = None) -> SimReport:
    """Collect the metrics of a finished simulation."""
    robots = []
    counted = starved = executed = 0
    age_sum = 0.0
    for robot in sim.robots:
        if robot.first_land_s is None:
            ticks = robot.tick_index(end_s) + 1
            r_counted, r_starved = ticks, ticks
        else:
            r_counted, r_starved = robot.counted_ticks, robot.starved_ticks
        counted += r_counted
        starved += r_starved
        executed += robot.executed
        age_sum += robot.age_sum_s
        active_s = r_counted / robot.control_hz
        robots.append(
            RobotMetrics(
                id=robot.spec.robot_id,
                weight=robot.spec.weight,
                control_hz=robot.control_hz,
                starvation=r_starved / r_counted if r_counted else 0.0,
                actions_per_s=robot.executed / active_s if active_s > 0 else 0.0,
                inferences=robot.chunks_applied,
                mean_age_s=robot.age_sum_s / robot.executed if robot.executed else 0.0,
                requests_per_s=robot.requests_sent / end_s,
            )
        )
    sizes = sim.batch_sizes
    system = SystemMetrics(
        starvation=starved / counted if counted else 0.0,
        throughput_actions_per_s=sum(r.actions_per_s for r in robots),
        weighted_throughput=sum(r.weight * r.actions_per_s for r in robots),
        jain_starvation=jain_index([r.starvation for r in robots]),
        bound_starvation=bound_starvation,
        mean_batch_size=float(np.mean(sizes)) if sizes else 0.0,
        num_batches=len(sizes),
        batch_size_histogram=dict(sorted(Counter(sizes).items())),
        gpu_utilization=sim.gpu_busy_s / end_s,
        mean_age_s=age_sum / executed if executed else 0.0,
        inferences_per_s=sum(sizes) / end_s,
    )
    timing = {
        "num_decisions": float(sim.num_decisions),
        "mean_decision_us": 1e6 * sim.decision_s / sim.num_decisions if sim.num_decisions else 0.0,
    }
    return SimReport(
        scheduler=sim.scheduler.name,
        fleet=sim.fleet.name,
        seed=sim.config.seed,
        duration_s=end_s,
        request_mode=sim.fleet.request_mode,
        system=system,
        robots=robots,
        timing=timing,
    )
