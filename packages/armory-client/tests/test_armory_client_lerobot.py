"""LeRobotRobot: a LeRobot-shaped robot object as a runtime Robot (no lerobot needed)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from armory_client import RobotRuntime
from armory_client.lerobot_robot import LeRobotRobot
from test_armory_client_runtime import FakeClient, FakeClock, make_config

JOINTS = ("shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos")


class FakeSO101:
    """The shape of a LeRobot robot: named joint readings and frames, actions by name."""

    def __init__(self) -> None:
        self.action_features = {name: float for name in JOINTS}
        self.sent: list[dict[str, Any]] = []
        self.frame = np.full((4, 6, 3), 7, np.uint8)

    def get_observation(self) -> dict[str, Any]:
        readings = {name: float(i) + 0.5 for i, name in enumerate(JOINTS)}
        return readings | {"front": self.frame}

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(action)
        return action


def test_observation_joins_joints_into_state_and_keeps_cameras() -> None:
    """Joint readings become a float32 state in action_features order; frames keep
    their names (or the keys given); a prompt is added when set."""
    adapter = LeRobotRobot(FakeSO101(), prompt="stack the cubes")
    obs = adapter.get_observation()
    np.testing.assert_array_equal(obs["observation/state"], np.float32([0.5, 1.5, 2.5]))
    assert obs["observation/state"].dtype == np.float32
    assert obs["front"].shape == (4, 6, 3) and obs["prompt"] == "stack the cubes"
    renamed = LeRobotRobot(FakeSO101(), cameras={"front": "observation/image"})
    assert set(renamed.get_observation()) == {"observation/state", "observation/image"}


def test_action_vector_becomes_named_joint_targets() -> None:
    """send_action maps the vector onto the joint names, as floats, in order."""
    robot = FakeSO101()
    LeRobotRobot(robot).send_action(np.float32([1.0, 2.0, 3.0]))
    assert robot.sent == [dict(zip(JOINTS, [1.0, 2.0, 3.0], strict=True))]
    assert all(type(v) is float for v in robot.sent[0].values())


def test_mismatches_are_clear_errors() -> None:
    """A wrong action length, a missing reading or camera, or no joint names is a
    ValueError naming what is wrong."""
    adapter = LeRobotRobot(FakeSO101())
    with pytest.raises(ValueError, match="2 values, the robot 3 joints"):
        adapter.send_action(np.zeros(2))
    with pytest.raises(ValueError, match=r"lacks \['gripper\.pos'\]"):
        LeRobotRobot(FakeSO101(), state_names=["gripper.pos"]).get_observation()
    with pytest.raises(ValueError, match="lacks camera 'wrist'"):
        LeRobotRobot(FakeSO101(), cameras={"wrist": "w"}).get_observation()
    with pytest.raises(ValueError, match="action_names is empty"):
        LeRobotRobot(object())  # type: ignore[arg-type]


def test_a_runtime_drives_the_adapter() -> None:
    """A RobotRuntime plays chunks onto the fake arm as named joint targets."""
    clock = FakeClock()
    robot = FakeSO101()
    client = FakeClient(clock)
    client.horizon = 20
    config = make_config(duration_s=0.1)
    original = client.infer

    async def infer(obs: dict[str, Any]) -> dict[str, Any]:
        reply = await original(obs)
        reply["actions"] = np.repeat(reply["actions"][:, :1], 3, axis=1)
        return reply

    client.infer = infer  # type: ignore[method-assign]
    runtime = RobotRuntime(LeRobotRobot(robot), client, config, clock=clock, sleep=clock.sleep)
    asyncio.run(runtime.run())
    assert [a["elbow_flex.pos"] for a in robot.sent] == list(range(len(robot.sent)))
    assert len(robot.sent) >= 5
    assert client.requests
