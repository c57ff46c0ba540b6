"""The engine's context hook that replay relies on: entries a policy asks for in
PolicyMetadata.context_keys, and only those, are added to its observations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from armory_client import PolicyClient, RobotState, attach
from server_harness import running_server

from armory.policies.base import (
    CONTEXT_CHUNK_START,
    CONTEXT_ROBOT,
    InputSpec,
    Policy,
    PolicyMetadata,
)


class RecordingPolicy(Policy):
    """Zero chunks; keeps every observation it is given."""

    def __init__(self, context_keys: tuple[str, ...]) -> None:
        self._metadata = PolicyMetadata(
            name="recording",
            action_horizon=4,
            action_dim=2,
            inputs={},
            context_keys=context_keys,
        )
        self.seen: list[dict[str, Any]] = []

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        self.seen.extend(dict(obs) for obs in observations)
        return [np.zeros((4, 2), np.float32) for _ in observations]


def serve(policy: RecordingPolicy, observations: list[dict[str, Any]]) -> None:
    with running_server(policy) as server, PolicyClient("127.0.0.1", server.port) as client:
        for obs in observations:
            client.infer(obs)


def state(action_index: int, chunk_start: int | None) -> RobotState:
    return RobotState(
        robot_id="arm-7",
        action_index=action_index,
        actions_left=0,
        chunk_start=chunk_start,
        control_hz=10.0,
        min_execution_horizon=1,
        max_execution_horizon=4,
    )


def test_no_context_unless_asked() -> None:
    """A policy that asks for nothing never sees context keys, even ones a robot sends;
    other undeclared keys pass untouched."""
    policy = RecordingPolicy(())
    serve(policy, [{"extra": 1, CONTEXT_CHUNK_START: 99, CONTEXT_ROBOT: "spoof"}])
    assert policy.seen == [{"extra": 1}]


def test_armory_client_context_is_its_action_index_and_robot_id() -> None:
    """For an Armory client: chunk start = the observation's action_index, robot = robot_id;
    a value the robot sent under the reserved key is replaced."""
    policy = RecordingPolicy((CONTEXT_CHUNK_START, CONTEXT_ROBOT))
    serve(
        policy,
        [
            attach({CONTEXT_CHUNK_START: 99}, state(0, None)),
            attach({}, state(3, 0)),
        ],
    )
    assert [obs[CONTEXT_CHUNK_START] for obs in policy.seen] == [0, 3]
    assert {obs[CONTEXT_ROBOT] for obs in policy.seen} == {"arm-7"}


def test_plain_client_context_counts_whole_chunks() -> None:
    """For a plain client: chunk starts 0, H, 2H (it plays whole chunks); only the asked-for
    key is added."""
    policy = RecordingPolicy((CONTEXT_CHUNK_START,))
    serve(policy, [{}, {}, {}])
    assert policy.seen == [{CONTEXT_CHUNK_START: k} for k in (0, 4, 8)]


def test_metadata_checks_context_keys() -> None:
    """Unknown context keys and inputs named like context entries are refused."""
    with pytest.raises(ValueError, match=r"unknown context keys.*valid keys: armory/chunk_start"):
        PolicyMetadata(name="x", action_horizon=1, action_dim=1, inputs={}, context_keys=("a",))
    with pytest.raises(ValueError, match="reserved for engine context"):
        PolicyMetadata(
            name="x", action_horizon=1, action_dim=1, inputs={CONTEXT_ROBOT: InputSpec()}
        )
