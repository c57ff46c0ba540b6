"""Directed mode: an observation taken while the robot still moved, that no batch took by
the time the robot runs dry, is answered "deferred", and the robot sends a fresh one
taken once dry (docs/scheduling.md, "A fresh observation once dry")."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np
from armory_client import ARMORY_KEY, attach
from armory_client.wire import RobotState
from server_harness import expected_actions, hold_the_slot, make_obs, one_slot_server

from armory.engine.queue_mirror import NO_CHUNK, QueueReport, RobotLimits
from armory.engine.session import directed_defer_s
from armory.scheduling.registry import make_scheduler
from armory.sim.fleet_family import generate_fleet
from armory.sim.simulator import SimConfig, Simulator

DIRECTED = RobotLimits(
    control_hz=20.0, min_execution_horizon=2, max_execution_horizon=8, directed=True
)


def test_only_an_observation_taken_before_the_robot_runs_dry_is_deferred_once_a_chunk() -> None:
    """Deferred at the dry time: not for a robot that is not directed, nor for an
    observation taken once dry, nor one arriving after the dry time, nor twice in one
    chunk."""
    moving = QueueReport(action_index=5, actions_left=3, chunk_start=0)
    times = {"dry_s": 2.15, "received_s": 2.0}
    assert directed_defer_s(DIRECTED, moving, **times, deferred_chunk_start=NO_CHUNK) == 2.15
    streaming = RobotLimits(control_hz=20.0, min_execution_horizon=2, max_execution_horizon=8)
    assert directed_defer_s(streaming, moving, **times, deferred_chunk_start=NO_CHUNK) is None
    dry = QueueReport(action_index=8, actions_left=0, chunk_start=0)
    assert directed_defer_s(DIRECTED, dry, **times, deferred_chunk_start=NO_CHUNK) is None
    late = {"dry_s": 2.15, "received_s": 2.2}
    assert directed_defer_s(DIRECTED, moving, **late, deferred_chunk_start=NO_CHUNK) is None
    assert directed_defer_s(DIRECTED, moving, **times, deferred_chunk_start=0) is None
    assert directed_defer_s(DIRECTED, moving, **times, deferred_chunk_start=-5) == 2.15


def test_an_observation_holding_no_more_than_the_links_round_trip_is_not_deferred() -> None:
    """A fresh observation would cost the robot the links' round trip standing dry (the
    "deferred" reply down, the observation up): one taken holding three actions (0.15 s
    at 20 Hz) is deferred over links of 0.07 s (0.14 s both ways), not over 0.08 s."""
    moving = QueueReport(action_index=5, actions_left=3, chunk_start=0)
    times = {"dry_s": 2.15, "received_s": 2.0, "deferred_chunk_start": NO_CHUNK}
    near = dataclasses.replace(DIRECTED, uplink_s=0.07, downlink_s=0.07)
    assert directed_defer_s(near, moving, **times) == 2.15
    far = dataclasses.replace(DIRECTED, uplink_s=0.08, downlink_s=0.08)
    assert directed_defer_s(far, moving, **times) is None


def directed_state(name: str, index: int, actions_left: int, chunk_start: int | None) -> RobotState:
    """A directed robot's queue state at 20 Hz, horizons 2..8."""
    return RobotState(
        robot_id=name,
        action_index=index,
        actions_left=actions_left,
        chunk_start=chunk_start,
        control_hz=20.0,
        min_execution_horizon=2,
        max_execution_horizon=8,
        directed=True,
    )


def test_a_directed_observation_still_waiting_when_its_robot_runs_dry_is_deferred() -> None:
    """Robot a holds the only executor slot; directed robot b, three actions (0.15 s) from
    running dry, is answered "deferred" about then; its fresh observation, taken dry, waits
    for the executor and is served."""
    with one_slot_server() as (policy, server, a, b):

        async def scenario() -> tuple[dict, dict, float, dict]:
            held = directed_state("a", 0, 0, None)
            task_a = await hold_the_slot(policy, a, attach(make_obs(0), held))
            sent_s = time.monotonic()
            first = await asyncio.to_thread(
                b.infer, attach(make_obs(1, 0), directed_state("b", 5, 3, 0))
            )
            waited_s = time.monotonic() - sent_s
            fresh = asyncio.ensure_future(
                asyncio.to_thread(b.infer, attach(make_obs(1, 1), directed_state("b", 8, 0, 0)))
            )
            await asyncio.sleep(0.3)  # past the dry time: the fresh one is not deferred
            policy.allow(2)
            return await task_a, first, waited_s, await fresh

        reply_a, first, waited_s, second = asyncio.run(scenario())
        stats = server.stats()
    assert first[ARMORY_KEY]["deferred"] is True and first["actions"].shape == (0, 7)
    assert 0.1 <= waited_s < 5.0  # answered about when b ran dry, not when a's batch ended
    assert second[ARMORY_KEY]["deferred"] is False
    assert second[ARMORY_KEY]["chunk_start"] == 8
    np.testing.assert_array_equal(second["actions"], expected_actions(policy, make_obs(1, 1)))
    np.testing.assert_array_equal(reply_a["actions"], expected_actions(policy, make_obs(0)))
    assert stats.num_deferred == 1 and stats.num_errors == 0


def test_the_simulator_defers_as_the_server_does() -> None:
    """Simulated directed robots are deferred by the same rule: some observations are, and
    no robot sends more than two observations a chunk (one at its lead, at most one once
    dry); the same fleet streaming every tick defers none this way."""
    fleet = generate_fleet("mixed", 93).fleet  # 7 directed robots, the GPU ~99% busy
    assert fleet.request_mode == "directed"
    sim = Simulator(fleet, make_scheduler("just-in-time"), SimConfig(duration_s=10.0, seed=93))
    sim.run()
    assert sim.num_deferred > 0
    for robot in sim.robots:
        assert robot.requests_sent <= 2 * robot.chunks_applied + 2
    streaming = dataclasses.replace(fleet, request_mode="every-tick")
    sim = Simulator(streaming, make_scheduler("just-in-time"), SimConfig(duration_s=10.0, seed=93))
    sim.run()
    assert sim.num_deferred == 0
