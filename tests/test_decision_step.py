"""DecisionStep: the one decision (snapshot, choose, check, dispatch) of server and simulator.

Robots run at 8 Hz (an action every 0.125 s, exact in binary) with instant uplinks, so
every landing estimate below is exact.
"""

from __future__ import annotations

import time
from typing import cast

import pytest

from armory.core.latency_profile import LatencyProfile
from armory.engine.batch_loop import BatchLoop
from armory.engine.decision_step import DecisionStep
from armory.engine.executor import Executor
from armory.engine.queue_mirror import QueueMirror, QueueReport, RobotLimits
from armory.fleet_spec import load_fleet
from armory.scheduling.base import Scheduler
from armory.scheduling.max_batch import MaxBatchScheduler
from armory.scheduling.snapshot import Batch, Snapshot
from armory.sim.simulator import SimConfig, Simulator, simulate

FLEET = "configs/fleets/mixed-rate.yaml"
PROFILE = {1: 0.05, 2: 0.0625, 3: 0.075, 4: 0.0875}
"""Forward-pass seconds per batch size (exact in binary)."""


def _limits(downlink_s: float, control_hz: float = 8.0) -> RobotLimits:
    return RobotLimits(
        control_hz=control_hz,
        min_execution_horizon=2,
        max_execution_horizon=6,
        weight=1.0,
        uplink_s=0.0,
        downlink_s=downlink_s,
    )


def _step(scheduler: Scheduler, *, isolate_faults: bool = True, **downlinks: float) -> DecisionStep:
    """A step over robots named r<id> with the given downlinks, each holding an
    observation at index 0 with an empty queue, at time 0."""
    mirror = QueueMirror()
    for name, downlink_s in downlinks.items():
        robot_id = int(name.removeprefix("r"))
        control_hz = 13.0 if robot_id == 13 else 8.0
        mirror.add(robot_id, _limits(downlink_s, control_hz), now_s=0.0)
        mirror.observe(robot_id, QueueReport(action_index=0, actions_left=0), now_s=0.0)
    return DecisionStep(
        mirror,
        scheduler,
        LatencyProfile(PROFILE),
        max_batch_size=4,
        isolate_faults=isolate_faults,
    )


class _Raises(Scheduler):
    """max-batch, but raises whenever a 13 Hz robot is in the snapshot."""

    name = "raises"

    def schedule(self, snapshot: Snapshot) -> Batch:
        if (snapshot.control_hz == 13.0).any():
            raise FloatingPointError("inf in the constraints")
        return MaxBatchScheduler().schedule(snapshot)


def test_no_decision_while_no_robot_is_eligible() -> None:
    step = DecisionStep(
        QueueMirror(), MaxBatchScheduler(), LatencyProfile(PROFILE), max_batch_size=4
    )
    assert step.decide(0.0) is None
    assert step.counters.num_decisions == 0


def test_a_decision_is_counted_by_its_rule_and_dispatch_plans_each_landing() -> None:
    step = _step(MaxBatchScheduler(), r1=0.0, r2=0.25)
    decision = step.decide(1.0)
    assert decision is not None
    assert sorted(decision.batch.robot_ids) == [1, 2]
    assert decision.refused == ()
    assert step.counters.num_decisions == 1
    assert step.counters.decisions_by_rule == {"max-batch": 1}
    dispatched = {d.robot_id: d for d in step.dispatch(decision.batch, start_s=1.5)}
    # start + learned latency of a batch of two + the robot's own downlink
    assert dispatched[1].land_s == 1.5 + 0.0625
    assert dispatched[2].land_s == 1.5 + 0.0625 + 0.25
    assert {d.chunk_start for d in dispatched.values()} == {0}
    # The mirror now plays each chunk into its robot's queue from its landing.
    assert step.mirror.deadline_of(2) == 1.5 + 0.0625 + 0.25 + 6 / 8


class SleepingScheduler(MaxBatchScheduler):
    """max-batch, after 60 ms off the processor."""

    def schedule(self, snapshot: Snapshot) -> Batch:
        time.sleep(0.06)
        return super().schedule(snapshot)


def test_every_decision_is_timed_in_wall_and_processor_seconds() -> None:
    """A decision counts the deciding thread's processor time beside the wall time: a
    thread kept off the cores adds wall time and no processor time."""
    step = _step(SleepingScheduler(), r1=0.0)
    decision = step.decide(0.0)
    assert decision is not None
    assert decision.decision_s >= 0.05 > 0.01 > decision.decision_cpu_s >= 0.0
    assert step.counters.decision_cpu_s == decision.decision_cpu_s
    assert step.counters.decision_s == decision.decision_s
    report = simulate(load_fleet(FLEET), MaxBatchScheduler(), SimConfig(duration_s=1.0))
    assert report.timing["mean_decision_cpu_us"] > 0.0


def test_batch_done_teaches_the_profile_and_moves_the_recent_batch_size() -> None:
    step = _step(MaxBatchScheduler(), r1=0.0, r2=0.0)
    decision = step.decide(0.0)
    assert decision is not None
    step.dispatch(decision.batch, 0.0)
    step.batch_done(decision.batch, 0.1)  # dearer than planned (under twice: learned at once)
    assert step.planned_latency_s(2) > PROFILE[2]
    assert step.recent_batch_size > 1.0
    unlearned = step.planned_latency_s(2)
    step.batch_done(decision.batch, 5.0, learn=False)  # a failed pass: not learned
    assert step.planned_latency_s(2) == unlearned


def test_a_robot_whose_state_fails_the_scheduler_is_refused_and_forgotten() -> None:
    step = _step(_Raises(), r1=0.0, r13=0.0, r2=0.0)
    decision = step.decide(0.0)
    assert decision is not None
    assert decision.refused == (13,)
    assert sorted(decision.batch.robot_ids) == [1, 2]
    assert 13 not in step.mirror
    assert step.counters.num_scheduler_faults == 1


def test_without_fault_isolation_the_scheduler_error_propagates() -> None:
    step = _step(_Raises(), isolate_faults=False, r1=0.0, r13=0.0)
    with pytest.raises(FloatingPointError):
        step.decide(0.0)
    assert 13 in step.mirror


def test_server_and_simulator_decide_through_the_same_step() -> None:
    fleet = load_fleet(FLEET)
    simulator = Simulator(fleet, MaxBatchScheduler(), SimConfig(duration_s=2.0))
    assert type(simulator.step) is DecisionStep
    assert simulator.mirror is simulator.step.mirror
    loop = BatchLoop(
        cast(Executor, None), MaxBatchScheduler(), LatencyProfile(PROFILE), max_batch_size=4
    )
    assert type(loop.step) is DecisionStep
    assert loop.mirror is loop.step.mirror and loop.profile is loop.step.profile
    report = simulator.run()
    assert simulator.step.counters.num_decisions == report.timing["num_decisions"] > 0


def test_the_simulator_shows_a_failing_scheduler_instead_of_hiding_it() -> None:
    class _AlwaysRaises(Scheduler):
        name = "always-raises"

        def schedule(self, snapshot: Snapshot) -> Batch:
            raise FloatingPointError("inf in the constraints")

    with pytest.raises(FloatingPointError):
        simulate(load_fleet(FLEET), _AlwaysRaises(), SimConfig(duration_s=1.0))
