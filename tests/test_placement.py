"""Placement of robots across replicas, and the K-GPU simulator that uses it."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest
from fleet_files import load_script, make_fleet_dict, write_fleet_file

from armory.cli import main
from armory.fleet_spec import FleetSpec, RobotGroup
from armory.placement.base import NoReplicaError, ReplicaProfile, RobotDemand
from armory.placement.fluid import FluidPlacement
from armory.placement.fluid_load import replica_load
from armory.placement.registry import make_placement, placement_names
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler
from armory.sim.bound import fleet_bound
from armory.sim.multi_gpu import simulate_gpus, sub_fleet
from armory.sim.simulator import SimConfig, simulate

GPU = ReplicaProfile((0.05, 0.06, 0.07, 0.08))
"""A GPU-like replica: 50 ms + 10 ms per robot, batches of up to 4."""
SLOW = RobotDemand(control_hz=10.0, max_execution_horizon=10)
FAST = RobotDemand(control_hz=40.0, max_execution_horizon=10)


def test_unknown_placement_lists_valid_names() -> None:
    """An unknown name is refused with every valid name in the message."""
    with pytest.raises(ValueError, match="random, round-robin, least-robots, fluid"):
        make_placement("nearest", [GPU])


def test_bad_demand_names_the_field() -> None:
    """A robot demand with a non-positive rate is refused, naming the field."""
    with pytest.raises(ValueError, match="control_hz"):
        RobotDemand(control_hz=0.0)


def test_round_robin_and_least_robots_spread_counts() -> None:
    """Round-robin takes replicas in turn; least-robots fills the emptiest first."""
    rr = make_placement("round-robin", [GPU] * 3)
    assert [rr.place(f"r{i}", SLOW) for i in range(5)] == [0, 1, 2, 0, 1]
    least = make_placement("least-robots", [GPU] * 3)
    for i in range(4):
        least.place(f"r{i}", SLOW)
    least.remove("r1")
    assert least.place("new", SLOW) == 1


def test_random_is_deterministic_per_seed() -> None:
    """The same seed places the same robots on the same replicas."""
    runs = []
    for _ in range(2):
        p = make_placement("random", [GPU] * 4, seed=7)
        runs.append([p.place(f"r{i}", SLOW) for i in range(20)])
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def test_fluid_load_grows_with_robots_and_passes_one_over_capacity() -> None:
    """A replica's fluid load rises with each robot and exceeds 1 once it cannot feed them."""
    loads = [replica_load([FAST] * n, GPU) for n in range(1, 12)]
    assert loads[7] < 1.0  # eight fit
    assert all(b >= a for a, b in itertools.pairwise(loads))
    assert loads[0] < 0.5 and loads[-1] > 1.0
    assert replica_load([], GPU) == 0.0


def test_a_replicas_load_does_not_depend_on_the_scale_of_its_robots_weights() -> None:
    """Weights are relative: a replica of heavy fast robots and light slow ones, over
    capacity, has the same fluid load with every weight scaled by 1e-5 or 1e5 (within the wire's
    1e-6 to 1e6; the GPU's cost was once counted against absolute weights, and at 1e-5 the
    program left robots unserved to save GPU time)."""

    def fleet(scale: float) -> list[RobotDemand]:
        fast = dataclasses.replace(FAST, weight=4.0 * scale)
        slow = dataclasses.replace(SLOW, max_execution_horizon=2, weight=1.0 * scale)
        return [fast] * 6 + [slow] * 6

    load = replica_load(fleet(1.0), GPU)
    assert load > 1.0
    for scale in (1e-5, 1e5):
        assert replica_load(fleet(scale), GPU) == pytest.approx(load, rel=1e-6)


def test_fluid_balances_load_not_counts() -> None:
    """Fast robots weigh more than slow ones: fluid spreads the fast robots, so no replica
    carries two of them while another carries none."""
    p = FluidPlacement([GPU] * 2)
    for i, demand in enumerate([FAST, FAST, SLOW, SLOW, SLOW, SLOW]):
        p.place(f"r{i}", demand)
    fast_per_replica = [sum(d == FAST for d in p.demands(k)) for k in range(2)]
    assert fast_per_replica == [1, 1]
    assert abs(p.load(0) - p.load(1)) < 0.15


def test_fail_moves_robots_to_the_replicas_up() -> None:
    """When a replica fails, each of its robots is placed again on one that is up, and
    placing a robot with every replica down is an error."""
    for name in placement_names():
        p = make_placement(name, [GPU] * 3)
        for i in range(6):
            p.place(f"r{i}", SLOW)
        victims = p.members(1)
        moved = p.fail(1)
        assert sorted(moved) == sorted(victims)
        assert all(k != 1 for k in moved.values())
        assert p.members(1) == []
        p.fail(0)
        assert len(p.members(2)) == 6
        assert p.fail(2) == {} and p.replica_of("r0") is None
        with pytest.raises(NoReplicaError):
            p.place("late", SLOW)


def test_fluid_rebalance_moves_only_off_a_replica_over_capacity() -> None:
    """Fluid moves robots off an over-capacity replica until it fits, and none otherwise."""
    p = FluidPlacement([GPU] * 2)
    for i in range(4):
        p.place(f"r{i}", FAST)
    assert p.rebalance() == {}
    for i in range(4, 10):
        p.place(f"r{i}", FAST)
    for robot_id in p.members(1):
        p.move(robot_id, 0)
    assert p.load(0) > 1.0
    moved = p.rebalance()
    assert len(moved) == 2 and all(k == 1 for k in moved.values())
    assert p.load(0) <= 1.0 and len(p.members(0)) == 8


def test_fluid_rebalance_moves_only_the_robots_it_may() -> None:
    """Robots that may not move (plain clients, which do not reconnect on their own) stay
    on a replica over capacity; the movable ones go, and with none movable none do."""
    p = FluidPlacement([GPU] * 2)
    for i in range(10):
        p.place(f"r{i}", FAST)
    for robot_id in p.members(1):
        p.move(robot_id, 0)
    assert p.load(0) > 1.0
    assert p.rebalance(lambda robot_id: False) == {}
    movable = {"r3", "r7", "r8"}
    moved = p.rebalance(lambda robot_id: robot_id in movable)
    assert moved and set(moved) <= movable and all(k == 1 for k in moved.values())
    assert p.load(0) <= 1.0


def _fleet(num_fast: int, num_slow: int) -> FleetSpec:
    return FleetSpec(
        name="two-types",
        robots=(
            RobotGroup(name="fast", count=num_fast, control_hz=40.0, max_execution_horizon=10),
            RobotGroup(name="slow", count=num_slow, control_hz=10.0, max_execution_horizon=10),
        ),
        max_batch_size=4,
        latency_profile="linear",
    )


def test_one_gpu_through_the_k_gpu_path_matches_the_simulator() -> None:
    """With one GPU every robot is on it, and the run is the one-GPU simulator's run."""
    fleet = _fleet(2, 4)
    config = SimConfig(duration_s=5.0, seed=3)
    multi = simulate_gpus(fleet, SchedulerConfig(), config, num_gpus=1, placement="random")
    single = simulate(fleet, make_scheduler(SchedulerConfig()), config)
    assert multi.report.robots == single.robots
    assert multi.report.system == single.system


def test_sub_fleet_keeps_group_order_and_counts() -> None:
    """A replica's fleet holds the fleet's groups in order with the robots placed there."""
    fleet = _fleet(2, 3)
    specs = fleet.robot_specs()
    sub = sub_fleet(fleet, [specs[1], specs[3], specs[4]], 1)
    assert [(g.name, g.count) for g in sub.robots] == [("fast", 1), ("slow", 2)]
    assert sub.name == "two-types@gpu1"


def test_k_gpus_serve_every_robot_and_report_each_gpu() -> None:
    """Two GPUs: every robot appears once in the report, in fleet order, the GPUs'
    robot counts add up, and fluid starves no more than random over four arrival orders
    (one order's few starved ticks either way are the draw's)."""
    fleet = _fleet(6, 10)
    starved = {"random": 0, "fluid": 0}
    for seed in range(1, 5):
        config = SimConfig(duration_s=5.0, seed=seed)
        for name in starved:
            run = simulate_gpus(fleet, SchedulerConfig(), config, num_gpus=2, placement=name)
            assert [r.id for r in run.report.robots] == [s.robot_id for s in fleet.robot_specs()]
            assert sum(g.num_robots for g in run.gpus) == fleet.num_robots
            starved[name] += run.num_starved_ticks
    assert starved["fluid"] <= starved["random"]


def test_the_bound_on_k_gpus_holds_for_every_placement_and_falls_with_k() -> None:
    """The fluid bound with K GPUs' seconds pooled is below what any placement reaches on
    K GPUs, is below one GPU's bound where one GPU is over capacity, and twice the fleet
    on two GPUs is bounded no higher than the fleet on one."""
    fleet = _fleet(10, 16)
    one, two = fleet_bound(fleet), fleet_bound(fleet, num_gpus=2)
    assert one > 0.05 and 0.0 <= two < one
    assert fleet_bound(_fleet(20, 32), num_gpus=2) <= one + 1e-9
    config = SimConfig(duration_s=5.0, seed=2)
    for name in ("random", "round-robin", "fluid"):
        run = simulate_gpus(fleet, SchedulerConfig(), config, num_gpus=2, placement=name)
        assert run.report.system.starvation >= two - 0.01, name


def test_simulate_cli_with_gpus_writes_placement_and_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """simulate --gpus 2 prints a row per GPU and adds placement and gpus to the JSON."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict(num_robots=4))
    out = tmp_path / "report.json"
    argv = ["simulate", "--fleet", str(fleet), "--duration", "3", "--gpus", "2"]
    assert main([*argv, "--placement", "round-robin", "--json", str(out)]) == 0
    assert "gpu1" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["placement"] == "round-robin"
    assert [g["num_robots"] for g in report["gpus"]] == [2, 2]
    assert report["system"]["bound_starvation"] is not None  # on two GPUs


def test_simulate_cli_refuses_bad_gpus_and_placement(capsys: pytest.CaptureFixture[str]) -> None:
    """--gpus 0 and an unknown --placement are one-line usage errors."""
    assert main(["simulate", "--fleet", "x.yaml", "--gpus", "0"]) == 2
    assert "--gpus must be >= 1" in capsys.readouterr().err
    assert main(["simulate", "--fleet", "x.yaml", "--placement", "nearest"]) == 2
    assert "valid names: random" in capsys.readouterr().err


def test_paired_verdict_tells_a_steady_difference_from_the_draws_noise() -> None:
    """The placement benchmark's draw-by-draw verdict: -1 where fluid starves fewer ticks
    on paired draws beyond a one-sided 95% interval, +1 where more, 0 where the draws
    cannot tell; a single draw or differences all alike decide by their sign."""
    verdict = load_script("benchmarks/placement.py").paired_verdict
    base = [10, 12, 8, 15, 11, 9]
    assert verdict(base, base) == 0
    assert verdict([b - 3 for b in base], base) == -1
    assert verdict([b - d for b, d in zip(base, (3, 4, 2, 3, 5, 2), strict=True)], base) == -1
    assert verdict([b + d for b, d in zip(base, (3, 4, 2, 3, 5, 2), strict=True)], base) == 1
    # A mean difference of 1 tick against a spread of 10 either way: noise.
    assert verdict([b + d for b, d in zip(base, (10, -9, 11, -10, 9, -5), strict=True)], base) == 0
    assert verdict([3], [5]) == -1 and verdict([5], [3]) == 1 and verdict([4], [4]) == 0
