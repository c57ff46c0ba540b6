"""One LeRobot robot without gRPC: instructions, held observations, the outbox, errors."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from armory_client import ARMORY_KEY
from lerobot_client.wire import raw_observation, robot_features
from server_harness import make_reply

from armory.core.errors import (
    ObservationError,
    PolicyError,
    QueueStateError,
    RequestError,
    ServerClosing,
)
from armory.engine.server_engine import Reply, ServerEngine
from armory.engine.session import Session
from armory.policies.base import CONTEXT_CHUNK_START, Policy, PolicyMetadata
from armory.policies.mock import MockPolicyConfig
from armory.scheduling.registry import make_scheduler
from armory.transports.lerobot_core import (
    NO_INSTRUCTIONS,
    CallRefused,
    LeRobotRobot,
    Outgoing,
    serve,
    status_of,
)
from armory.transports.lerobot_protocol import (
    ObservationMapping,
    PolicyInstructions,
    QueueEstimator,
    TimedAction,
    TimedObservation,
    decode_actions,
)

JOINTS = [f"joint_{i}.pos" for i in range(6)]
CAMERAS = {"front": (32, 32, 3), "wrist": (32, 32, 3)}
META = MockPolicyConfig(state_dim=6, image_shape=(32, 32, 3)).make().metadata


def make_robot() -> tuple[LeRobotRobot, list[int]]:
    """A robot at LeRobot's defaults (30 Hz, threshold 0.5); the list counts outbox posts."""
    posts: list[int] = []
    robot = LeRobotRobot(
        "ipv4:127.0.0.1:5000",
        Session(peer="ipv4:127.0.0.1:5000"),
        QueueEstimator(default_control_hz=30.0, chunk_size_threshold=0.5),
        META,
        on_post=lambda: posts.append(1),
    )
    return robot, posts


def instructions(joints: list[str] = JOINTS, *, actions_per_chunk: int = 5) -> PolicyInstructions:
    return PolicyInstructions(
        policy_type="act",
        pretrained_name_or_path="user/model",
        features=robot_features(joints, CAMERAS),
        actions_per_chunk=actions_per_chunk,
        device="cpu",
        rename_map={},
    )


def observation(timestep: int, timestamp_s: float = 0.0, seed: int = 0) -> TimedObservation:
    return TimedObservation(
        timestamp_s=timestamp_s,
        timestep=timestep,
        observation=raw_observation(seed, JOINTS, CAMERAS),
        must_go=False,
    )


def instructed_robot(**kwargs: int) -> tuple[LeRobotRobot, list[int]]:
    robot, posts = make_robot()
    robot.instruct(instructions(**kwargs), ObservationMapping())
    return robot, posts


def chunk(value: float, chunk_start: int = 0, **fields: Any) -> Reply:
    """An Armory reply whose actions are all ``value``."""
    actions = np.full((META.action_horizon, META.action_dim), value, np.float32)
    return make_reply(actions, chunk_start=chunk_start, is_armory=True, **fields)


def test_an_observation_before_instructions_is_refused() -> None:
    """Observations need the robot's features first: FAILED_PRECONDITION, naming the call."""
    robot, _ = make_robot()
    with pytest.raises(CallRefused) as caught:
        robot.observe(observation(0), 0.0)
    assert caught.value.status == "FAILED_PRECONDITION"
    assert caught.value.message == NO_INSTRUCTIONS
    assert robot.held is None


def test_more_joints_than_action_values_is_refused_unless_allowed() -> None:
    """A robot whose joints outnumber the policy's action values is refused at the
    instructions, changing nothing; the operator can allow it."""
    robot, _ = make_robot()
    joints = [f"joint_{i}.pos" for i in range(META.action_dim + 1)]
    mapping = ObservationMapping(state_keys=tuple(joints[:6]))  # the state input takes 6
    with pytest.raises(CallRefused, match=r"--lerobot\.allow-mismatched-policy") as caught:
        robot.instruct(instructions(joints), mapping)
    assert caught.value.status == "INVALID_ARGUMENT" and robot.mapping is None
    assert f"the robot has {len(joints)} joints" in caught.value.message
    robot.instruct(instructions(joints), mapping, allow_mismatched_policy=True)
    assert robot.mapping is not None


def test_chunks_are_capped_at_the_policys_horizon() -> None:
    robot, _ = instructed_robot(actions_per_chunk=10 * META.action_horizon)
    assert robot.actions_per_chunk == META.action_horizon


def test_a_newer_observation_replaces_one_not_yet_given_to_the_engine() -> None:
    """The engine gets the newest observation, with the robot's estimated queue as every-
    tick __armory__ state; the one it replaced is counted."""
    robot, _ = instructed_robot()
    robot.observe(observation(0, 0.0, seed=1), 0.0)
    robot.observe(observation(0, 0.1, seed=2), 0.1)
    assert robot.num_replaced == 1
    call = robot.next_call(0.1)
    assert call is not None and robot.next_call(0.1) is None
    state = call.observation[ARMORY_KEY]
    assert state["robot_id"] == "lerobot:ipv4:127.0.0.1:5000"
    assert state["defer_after_s"] == pytest.approx(robot.estimator.tick_s)
    assert state["observation_step"] == 1


def test_a_chunk_waits_in_the_outbox_and_a_newer_one_replaces_it() -> None:
    """answered posts the chunk (its first action_per_chunk rows, LeRobot timesteps from the
    observation's); a chunk never fetched is counted when replaced."""
    robot, posts = instructed_robot(actions_per_chunk=4)
    robot.observe(observation(0), 0.0)
    call = robot.next_call(0.0)
    assert call is not None
    robot.answered(call, chunk(1.0))
    robot.observe(observation(1, 0.04), 0.04)
    second = robot.next_call(0.04)
    assert second is not None
    robot.answered(second, chunk(2.0, chunk_start=2))
    assert robot.num_unfetched == 1 and len(posts) == 2
    item = robot.take()
    assert item is not None and robot.take() is None
    actions = decode_actions(item.payload)
    assert [a.timestep for a in actions] == [1, 2, 3, 4]
    assert all(np.all(a.action == 2.0) for a in actions)
    robot.fetched(item)


def test_a_deferred_observation_is_held_again_unless_a_newer_one_came() -> None:
    """Deferred: the same observation goes again at the next call; a newer one wins."""
    robot, _ = instructed_robot()
    robot.observe(observation(0), 0.0)
    call = robot.next_call(0.0)
    assert call is not None
    robot.answered(call, chunk(0.0, deferred=True))
    assert robot.held is call.pending and robot.take() is None
    again = robot.next_call(0.05)
    assert again is not None
    robot.observe(observation(1, 0.04, seed=3), 0.06)
    robot.answered(again, chunk(0.0, deferred=True))
    assert robot.held is not None and robot.held is not again.pending


def test_an_observation_a_computed_chunk_covers_is_dropped() -> None:
    """Once a chunk starting at index 5 was computed, an observation at index <= 5 is not
    sent to the engine (it could not be served)."""
    robot, _ = instructed_robot()
    robot.observe(observation(0), 0.0)
    call = robot.next_call(0.0)
    assert call is not None
    robot.answered(call, chunk(1.0, chunk_start=5))
    robot.observe(observation(4, 0.13), 0.13)
    assert robot.next_call(0.13) is None and robot.held is None


def test_an_engine_error_is_the_next_get_actions_status() -> None:
    """The engine's refusal lands in the outbox with the status of its kind."""
    robot, _ = instructed_robot()
    robot.refused(ObservationError("bad image"))
    item = robot.take()
    assert item is not None and item.error is not None
    assert (item.error.status, item.error.message) == ("INVALID_ARGUMENT", "bad image")
    robot.failed()
    item = robot.take()
    assert item is not None and item.error is not None and item.error.status == "INTERNAL"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ObservationError("x"), "INVALID_ARGUMENT"),
        (QueueStateError("x"), "FAILED_PRECONDITION"),
        (ServerClosing("x"), "UNAVAILABLE"),
        (PolicyError("x"), "INTERNAL"),
    ],
)
def test_engine_errors_map_to_grpc_statuses(error: RequestError, status: str) -> None:
    assert status_of(error) == status


def test_a_closed_robot_drops_its_chunk_and_wakes_a_waiting_call() -> None:
    """Closing empties the outbox (the chunk counts as never fetched), signals the
    outbox, and gives the engine nothing more."""
    robot, posts = instructed_robot()
    robot.observe(observation(0), 0.0)
    call = robot.next_call(0.0)
    assert call is not None
    robot.answered(call, chunk(1.0))
    robot.observe(observation(1, 0.04), 0.04)
    robot.close("it called Ready again")
    assert robot.closed and robot.take() is None and robot.num_unfetched == 1
    assert len(posts) == 2
    assert robot.next_call(0.05) is None


# ---- chunk timesteps, through a running engine ---------------------------------------


class StepPolicy(Policy):
    """The mock's inputs; every value of row ``j`` is the step the row was planned for:
    ``armory/chunk_start + j`` for a planner that asks for the chunk start (as the expert,
    replay), ``j`` for one that does not (as a learned policy, whose rows the door numbers)."""

    def __init__(self, *, plans_from_chunk_start: bool) -> None:
        keys = (CONTEXT_CHUNK_START,) if plans_from_chunk_start else ()
        self._metadata = dataclasses.replace(META, context_keys=keys)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        meta = self._metadata
        steps = np.arange(meta.action_horizon, dtype=np.float32)[:, None]
        return [
            np.repeat(steps + obs.get(CONTEXT_CHUNK_START, 0), meta.action_dim, axis=1)
            for obs in observations
        ]


TICK_S = 1 / 30
"""The robot's control period (LeRobot's default 30 Hz, which the door assumes)."""


def chunk_after_wait(policy: Policy, wait_ticks: int) -> tuple[list[TimedAction], Outgoing]:
    """A robot fetches the chunk of its first observation (timestep 0), executes actions 0
    to 4 and sends an observation of timestep 4, which waits ``wait_ticks`` ticks at the
    door before the engine takes it: that observation's chunk as the robot decodes it, and
    its outbox item."""
    now_s = [0.0]
    engine = ServerEngine(policy, make_scheduler("max-batch"), clock=lambda: now_s[0])
    peer = "ipv4:127.0.0.1:5000"
    robot = LeRobotRobot(
        peer,
        engine.open_session(peer=peer, door="lerobot"),
        QueueEstimator(default_control_hz=30.0, chunk_size_threshold=0.5),
        policy.metadata,
    )
    robot.instruct(instructions(actions_per_chunk=10), ObservationMapping())

    async def main() -> Outgoing | None:
        await engine.start()
        try:
            robot.observe(observation(0, 0.0), 0.0)
            await serve(robot, engine)
            first = robot.take()
            assert first is not None and first.error is None
            assert [a.timestep for a in decode_actions(first.payload)] == list(range(10))
            robot.fetched(first)
            robot.observe(observation(4, 4 * TICK_S), 4 * TICK_S)
            now_s[0] = (4 + wait_ticks + 0.5) * TICK_S
            await serve(robot, engine)
            return robot.take()
        finally:
            await engine.stop()

    item = asyncio.run(main())
    assert item is not None and item.error is None, item
    actions = decode_actions(item.payload)
    assert timed_from_the_observation(actions, robot.estimator)
    return actions, item


def timed_from_the_observation(actions: list[TimedAction], estimator: QueueEstimator) -> bool:
    """Each row is timed as upstream times a timestep: the observation's timestamp (that of
    timestep 4) plus a tick per step."""
    return all(
        a.timestamp_s == pytest.approx(4 * TICK_S + (a.timestep - 4) * estimator.tick_s)
        for a in actions
    )


@pytest.mark.parametrize("wait_ticks", [0, 3])
def test_a_chunk_start_planners_rows_play_at_the_steps_it_planned(wait_ticks: int) -> None:
    """The policy is told the observation's own index (5, the robot's next action) however
    long the observation waited, and the door numbers the rows from it, so the robot plays
    each (row 0 included) at the step it was planned for; the engine schedules with its own
    chunk start, that index aged by the ticks waited."""
    actions, item = chunk_after_wait(StepPolicy(plans_from_chunk_start=True), wait_ticks)
    assert [a.timestep for a in actions] == list(range(5, 15))
    assert [float(a.action[0]) for a in actions] == [float(a.timestep) for a in actions]
    assert item.reply is not None and item.chunk_start == item.reply.chunk_start
    assert item.chunk_start == 5 + wait_ticks


@pytest.mark.parametrize("wait_ticks", [0, 3])
def test_a_learned_policys_rows_are_numbered_from_the_observations_timestep(
    wait_ticks: int,
) -> None:
    """A policy that ignores the chunk start gets upstream's numbering: its row j has
    timestep 4 + j (the robot drops row 0, the step it executed)."""
    actions, item = chunk_after_wait(StepPolicy(plans_from_chunk_start=False), wait_ticks)
    assert [(a.timestep, float(a.action[0])) for a in actions] == [
        (4 + row, float(row)) for row in range(10)
    ]
    assert item.chunk_start == 5 + wait_ticks


def test_the_queue_state_counts_row_0_only_where_the_robot_plays_it() -> None:
    """The engine is told a robot plays whole chunks of a chunk-start planner, and all but
    row 0 of a learned policy's."""
    for plans, horizon in ((True, 10), (False, 9)):
        policy = StepPolicy(plans_from_chunk_start=plans)
        robot = LeRobotRobot(
            "p",
            Session(peer="p"),
            QueueEstimator(default_control_hz=30.0, chunk_size_threshold=0.5),
            policy.metadata,
        )
        robot.instruct(instructions(actions_per_chunk=10), ObservationMapping())
        robot.observe(observation(0), 0.0)
        call = robot.next_call(0.0)
        assert call is not None and call.first_timestep == 0
        assert call.observation[ARMORY_KEY]["max_execution_horizon"] == horizon
