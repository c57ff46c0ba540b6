"""The simulator's side of the report: its robots' counts as tallies (``armory.report``)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from armory.report import RobotTally, SimReport, make_report

if TYPE_CHECKING:
    from armory.sim.simulator import Simulator


def build_report(sim: Simulator, end_s: float, bound_starvation: float | None = None) -> SimReport:
    """Collect the metrics of a finished simulation."""
    return make_report(
        robot_tallies(sim, end_s),
        batch_size_counts=Counter(sim.batch_sizes),
        gpu_busy_s=sim.gpu_busy_s,
        duration_s=end_s,
        scheduler=sim.scheduler.name,
        fleet=sim.fleet.name,
        seed=sim.config.seed,
        request_mode=sim.fleet.request_mode,
        bound_starvation=bound_starvation,
        timing=decision_timing(sim),
        decisions_by_rule=sim.decisions_by_rule,
        rule_changes=sim.rule_changes,
    )


def robot_tallies(sim: Simulator, end_s: float) -> list[RobotTally]:
    """Each robot's raw counts at the end of a simulation, in the fleet's order."""
    tallies = []
    for robot in sim.robots:
        if robot.first_land_s is None:
            ticks = robot.tick_index(end_s) + 1
            counted, starved = ticks, ticks
        else:
            counted, starved = robot.counted_ticks, robot.starved_ticks
        tallies.append(
            RobotTally.for_robot(
                robot.spec,
                counted_ticks=counted,
                starved_ticks=starved,
                executed=robot.executed,
                age_sum_s=robot.age_sum_s,
                chunks_applied=robot.chunks_applied,
                requests_sent=robot.requests_sent,
            )
        )
    return tallies


def decision_timing(sim: Simulator) -> dict[str, float]:
    """Wall-clock measurements of a simulation's decisions."""
    return timing_of(sim.num_decisions, sim.decision_s, sim.decision_cpu_s)


def timing_of(num_decisions: int, decision_s: float, decision_cpu_s: float) -> dict[str, float]:
    """The report's decision timing from total decisions and their total seconds (of one
    simulation, or summed over several)."""
    return {
        "num_decisions": float(num_decisions),
        "mean_decision_us": 1e6 * decision_s / num_decisions if num_decisions else 0.0,
        "mean_decision_cpu_us": 1e6 * decision_cpu_s / num_decisions if num_decisions else 0.0,
    }
