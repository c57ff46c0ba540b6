"""Robots arriving through different front doors are batched together in one forward pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from armory_client import PolicyClient
from groot_client import GrootClient, groot_observation
from lerobot_client.wire import (
    AsyncInferenceClient,
    TimedObservation,
    install_upstream_classes,
    instructions,
    raw_observation,
    robot_features,
)
from server_harness import GatedPolicy, expected_actions, make_mock, make_obs

from armory.engine.config import ServerConfig
from armory.policies.mock import MockPolicyConfig
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler
from armory.serve import ArmoryServer, ServerThread
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.lerobot_grpc import LeRobotDoorConfig
from armory.transports.lerobot_protocol import decode_actions


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_openpi_groot_and_lerobot_robots_share_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """One robot through each door asks while a batch holds the executor: the next
    forward pass carries all three, each gets the chunk of its own observation, and the
    GR00T robot's info tells the batch's size."""
    install_upstream_classes(monkeypatch)
    joints = [f"joint_{i}.pos" for i in range(6)]
    cameras = {"front": (224, 224, 3), "wrist": (224, 224, 3)}
    config = MockPolicyConfig(state_dim=6)
    mock = make_mock(state_dim=6)
    policy = GatedPolicy(mock)
    lerobot_door = LeRobotDoorConfig(
        port=0, allow_unsafe_pickle_on_untrusted_networks=True, actions_wait_s=0.3
    )
    server = ArmoryServer(
        policy,
        # The test holds the first batch until all three asked: the next is decided when
        # it ends.
        ServerConfig(max_batch_size=4, decide_ahead_s=0.0),
        port=0,
        scheduler=make_scheduler(SchedulerConfig(name="max-batch")),
        doors=[GrootDoorConfig(port=0).door("127.0.0.1"), lerobot_door.door("127.0.0.1")],
    )
    raw = raw_observation(3, joints, cameras, task="pick")
    results: dict[str, Any] = {}
    with ServerThread(server) as thread:
        groot_port = server.doors[0].port  # type: ignore[attr-defined]
        lerobot_port = server.doors[1].port  # type: ignore[attr-defined]

        def openpi_robot(name: str, seed: int) -> None:
            with PolicyClient("127.0.0.1", thread.port, request_timeout_s=10.0) as client:
                results[name] = client.infer(make_obs(seed, config=config))["actions"]

        def groot_robot() -> None:
            with GrootClient(groot_port) as client:
                obs = groot_observation(make_obs(2, config=config), "n1.6")
                actions, results["groot_info"] = client.get_action(obs)
                results["groot"] = actions["joints"][0]

        def lerobot_robot() -> None:
            with AsyncInferenceClient(lerobot_port) as client:
                client.ready()
                client.send_instructions(instructions(robot_features(joints, cameras)))
                client.send_observation(TimedObservation(100.0, 0, raw, must_go=True))
                deadline = time.monotonic() + 10.0
                while time.monotonic() < deadline and "lerobot" not in results:
                    data = client.get_actions()
                    if data:
                        results["lerobot"] = np.stack([a.action for a in decode_actions(data)])

        first = threading.Thread(target=openpi_robot, args=("blocker", 0))
        first.start()
        policy.next_batch()  # the blocker's batch holds the executor
        others = [
            threading.Thread(target=openpi_robot, args=("openpi", 1)),
            threading.Thread(target=groot_robot),
            threading.Thread(target=lerobot_robot),
        ]
        for t in others:
            t.start()
        wait_for(lambda: thread.stats().num_requests == 4)
        policy.allow(2)
        shared = policy.next_batch()
        for t in [first, *others]:
            t.join(15)
    assert len(shared) == 3
    np.testing.assert_array_equal(
        results["openpi"], expected_actions(mock, make_obs(1, config=config))
    )
    np.testing.assert_array_equal(
        results["groot"], expected_actions(mock, make_obs(2, config=config))
    )
    assert results["groot_info"]["batch_size"] == 3
    lerobot_obs = {
        "observation/image": raw["front"],
        "observation/wrist_image": raw["wrist"],
        "observation/state": np.asarray([raw[j] for j in joints], np.float32),
        "prompt": raw["task"],
    }
    np.testing.assert_array_equal(results["lerobot"], expected_actions(mock, lerobot_obs))
