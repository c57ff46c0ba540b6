"""The starvation bound: the least starvation a scheduler can reach on a fleet.

It comes from the fluid relaxation of the fleet (:mod:`armory.scheduling.fluid`): the
most actions per second the robots could execute, with every robot's links at
the smallest delays they can produce. docs/scheduling.md derives the constraints
and states their one assumption: a robot's request windows do not overlap
(a scheduler that pipelines requests for one robot while the GPU idles can beat
it; on GPU-bound fleets none does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from armory.core.latency_profile import LatencyProfile
from armory.fleet_spec import FleetSpec, RobotSpec
from armory.scheduling.fluid import FluidSolution, solve_fluid


def starvation_bound(
    robots: Sequence[RobotSpec], profile: LatencyProfile, max_batch_size: int
) -> float:
    """Least achievable fleet starvation (fraction of ticks): ``1 - sum a_i / sum f_i``."""
    return _least_starvation(robots, profile, max_batch_size, expected_ticks=False)


def fleet_bound(fleet: FleetSpec) -> float:
    """:func:`starvation_bound` of a fleet file's robots and configured profile."""
    return starvation_bound(fleet.robot_specs(), fleet.profile(), fleet.max_batch_size)


def expected_tick_starvation(fleet: FleetSpec) -> float:
    """The fluid's least starvation when each chunk pays the ticks a window of its
    latency holds on average over the tick phase (``f l``), not the fewest.

    Not a bound: a scheduler that starts batches just as its robots' observations
    arrive pays fewer. It is close to what a fleet pays whose batches start at
    random phases of its robots' ticks (docs/benchmarks.md).
    """
    return _least_starvation(
        fleet.robot_specs(), fleet.profile(), fleet.max_batch_size, expected_ticks=True
    )


def _least_starvation(
    robots: Sequence[RobotSpec],
    profile: LatencyProfile,
    max_batch_size: int,
    *,
    expected_ticks: bool,
) -> float:
    if not robots:
        return 0.0
    classes = robot_classes(robots)
    solution = classes.solve(profile.table(max_batch_size)[1:], expected_ticks=expected_ticks)
    executed = float(classes.count @ solution.actions_per_s)
    return max(0.0, 1.0 - executed / float(classes.count @ classes.control_hz))


@dataclass(frozen=True)
class RobotClasses:
    """Robots grouped by (rate, max horizon, smallest round-trip delay, weight)."""

    control_hz: np.ndarray
    max_execution_horizon: np.ndarray
    delay_s: np.ndarray
    weight: np.ndarray
    count: np.ndarray

    def solve(self, latency_s: np.ndarray, **options: object) -> FluidSolution:
        """:func:`solve_fluid` over the classes (``options`` as there)."""
        return solve_fluid(
            self.control_hz,
            self.max_execution_horizon,
            self.delay_s,
            latency_s,
            count=self.count,
            **options,  # type: ignore[arg-type]
        )


def robot_classes(robots: Sequence[RobotSpec]) -> RobotClasses:
    """Group interchangeable robots, in order of first appearance."""
    counts: dict[tuple[float, int, float, float], int] = {}
    for r in robots:
        key = (r.control_hz, r.max_execution_horizon, r.uplink.min_s + r.downlink.min_s, r.weight)
        counts[key] = counts.get(key, 0) + 1
    keys = np.array(list(counts), dtype=np.float64).reshape(-1, 4)
    return RobotClasses(
        control_hz=keys[:, 0],
        max_execution_horizon=keys[:, 1],
        delay_s=keys[:, 2],
        weight=keys[:, 3],
        count=np.array(list(counts.values()), dtype=np.float64),
    )
