"""A fleet on K GPUs: robots placed across replicas, each GPU simulated on its own.

Robots arrive one by one in an order drawn from the seed, and the placement policy
(:mod:`armory.placement`, the code the cluster's front door runs) puts each on a
replica; then the policy may move robots off a replica over capacity. Each replica
is its own server (its own queue mirror, scheduler and decision step), and robots
of different replicas never share a batch, so each replica's robots run as one
fleet in the one-GPU :class:`~armory.sim.simulator.Simulator` (replica ``k`` with
seed ``seed + k``); the report gathers every robot of every replica.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np

from armory.fleet_spec import FleetSpec, RobotSpec
from armory.placement.base import Placement, ReplicaProfile
from armory.placement.fluid_load import replica_load
from armory.placement.query import robot_demand
from armory.placement.registry import make_placement
from armory.report import SimReport, make_report
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler
from armory.scheduling.rule_changes import RuleChanges, summed
from armory.sim.metrics import robot_tallies, timing_of
from armory.sim.simulator import SimConfig, Simulator


@dataclass(frozen=True)
class GpuSummary:
    """One GPU of a K-GPU run."""

    num_robots: int
    starvation: float
    """Starved ticks / counted ticks of its robots (0.0 when it serves none)."""
    gpu_utilization: float
    fluid_load: float
    """Its robots' fluid load on its GPU (:mod:`armory.placement.fluid_load`)."""


@dataclass(frozen=True)
class MultiGpuReport:
    """What ``armory simulate --gpus K`` prints and writes as JSON."""

    placement: str
    report: SimReport
    """The whole fleet over every GPU (GPU utilisation: the mean over GPUs)."""
    gpus: list[GpuSummary]
    num_starved_ticks: int
    """Starved ticks of every robot together."""
    num_moved: int
    """Robots the placement moved after arrival (off a replica over capacity)."""


def replica_profile(fleet: FleetSpec) -> ReplicaProfile:
    """The fleet's GPU as placement sees it."""
    table = fleet.profile().table(fleet.max_batch_size)[1:]
    return ReplicaProfile(tuple(float(x) for x in table))


def place_fleet(
    fleet: FleetSpec, placement: Placement, seed: int
) -> tuple[list[list[RobotSpec]], int]:
    """Each replica's robots (in fleet order) after placing the fleet's robots in an
    arrival order drawn from ``seed``, and how many robots the placement then moved."""
    specs = fleet.robot_specs()
    order = np.random.Generator(np.random.PCG64([seed, 0x91AC])).permutation(len(specs))
    for i in order:
        placement.place(specs[i].robot_id, robot_demand(specs[i]))
    moved = placement.rebalance()
    where = [placement.replica_of(spec.robot_id) for spec in specs]
    return [
        [spec for spec, k in zip(specs, where, strict=True) if k == replica]
        for replica in range(placement.num_replicas)
    ], len(moved)


def sub_fleet(fleet: FleetSpec, robots: list[RobotSpec], replica: int) -> FleetSpec:
    """The fleet of one replica: the fleet's groups, each with the robots placed there."""
    counts: Counter[str] = Counter(spec.robot_id.rsplit("-", 1)[0] for spec in robots)
    groups = tuple(
        dataclasses.replace(g, count=counts[g.name]) for g in fleet.robots if counts[g.name]
    )
    return dataclasses.replace(fleet, name=f"{fleet.name}@gpu{replica}", robots=groups)


def simulate_gpus(
    fleet: FleetSpec,
    scheduler: SchedulerConfig,
    config: SimConfig,
    *,
    num_gpus: int,
    placement: str,
) -> MultiGpuReport:
    """Run ``fleet`` on ``num_gpus`` GPUs, robots placed by ``placement``."""
    if num_gpus < 1:
        raise ValueError(f"--gpus must be >= 1, got {num_gpus}")
    if len({g.name for g in fleet.robots}) != len(fleet.robots):
        raise ValueError(f"fleet {fleet.name!r}: robot group names must differ to place robots")
    profile = replica_profile(fleet)
    policy = make_placement(placement, [profile] * num_gpus, seed=config.seed)
    placed, num_moved = place_fleet(fleet, policy, config.seed)
    tallies = []
    gpus = []
    batch_sizes: Counter[int] = Counter()
    rules: Counter[str] = Counter()
    changes: list[dict[str, RuleChanges]] = []
    busy_s = decision_s = decision_cpu_s = 0.0
    num_decisions = 0
    for replica, robots in enumerate(placed):
        if not robots:
            gpus.append(GpuSummary(0, 0.0, 0.0, 0.0))
            continue
        sim_config = dataclasses.replace(config, seed=config.seed + replica)
        sim = Simulator(sub_fleet(fleet, robots, replica), make_scheduler(scheduler), sim_config)
        sim.run()
        # The replica's fleet lists robots by group as the whole fleet does: same order.
        replica_tallies = [
            dataclasses.replace(t, id=spec.robot_id)
            for t, spec in zip(robot_tallies(sim, config.duration_s), robots, strict=True)
        ]
        tallies += replica_tallies
        batch_sizes.update(sim.batch_sizes)
        rules.update(sim.decisions_by_rule)
        changes.append(sim.rule_changes)
        busy_s += sim.gpu_busy_s
        num_decisions += sim.num_decisions
        decision_s += sim.decision_s
        decision_cpu_s += sim.decision_cpu_s
        counted = sum(t.counted_ticks for t in replica_tallies)
        starved = sum(t.starved_ticks for t in replica_tallies)
        gpus.append(
            GpuSummary(
                num_robots=len(robots),
                starvation=starved / counted if counted else 0.0,
                gpu_utilization=sim.gpu_busy_s / config.duration_s,
                fluid_load=replica_load(map(robot_demand, robots), profile),
            )
        )
    order = {spec.robot_id: i for i, spec in enumerate(fleet.robot_specs())}
    tallies.sort(key=lambda t: order[t.id])
    report = make_report(
        tallies,
        batch_size_counts=batch_sizes,
        gpu_busy_s=busy_s / num_gpus,
        duration_s=config.duration_s,
        scheduler=scheduler.name,
        fleet=fleet.name,
        seed=config.seed,
        request_mode=fleet.request_mode,
        timing=timing_of(num_decisions, decision_s, decision_cpu_s),
        decisions_by_rule=rules,
        rule_changes=summed(changes),
    )
    return MultiGpuReport(
        placement=placement,
        report=report,
        gpus=gpus,
        num_starved_ticks=sum(t.starved_ticks for t in tallies),
        num_moved=num_moved,
    )
