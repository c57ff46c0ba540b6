"""A simulated LeRobot robot for driving LeRobot's own ``RobotClient`` against Armory.

Runs in the LeRobot environment (Python 3.12, lerobot 0.6.1; see scripts/lerobot-env.sh).
Registered with draccus as robot type ``armory_mock``; LeRobot's
``make_robot_from_config`` finds :class:`ArmoryMockRobot` beside its config class.
Its joints follow the actions it is sent; its cameras show seeded noise; it records
every action.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lerobot.robots import Robot, RobotConfig


@RobotConfig.register_subclass("armory_mock")
@dataclass(kw_only=True)
class ArmoryMockRobotConfig(RobotConfig):
    """Joints, cameras (name: (height, width, 3)) and a seed."""

    num_joints: int = 7
    camera_shapes: dict[str, list[int]] = field(
        default_factory=lambda: {"front": [96, 128, 3], "wrist": [96, 128, 3]}
    )
    seed: int = 0


class ArmoryMockRobot(Robot):
    """No hardware: observations from a seeded generator, actions recorded."""

    config_class = ArmoryMockRobotConfig
    name = "armory_mock"

    def __init__(self, config: ArmoryMockRobotConfig) -> None:
        super().__init__(config)
        self.config = config
        self.joints = [f"joint_{i}.pos" for i in range(config.num_joints)]
        self._rng = np.random.default_rng(config.seed)
        self._position = np.zeros(config.num_joints)
        self._connected = False
        self._lock = threading.Lock()
        self.actions: list[list[float]] = []
        """Every action sent, in order (joint values)."""
        self.action_times_s: list[float] = []
        """When each action was sent (``time.monotonic``)."""
        self.num_observations = 0

    @property
    def observation_features(self) -> dict[str, Any]:
        cameras = {name: tuple(shape) for name, shape in self.config.camera_shapes.items()}
        return {**dict.fromkeys(self.joints, float), **cameras}

    @property
    def action_features(self) -> dict[str, type]:
        return dict.fromkeys(self.joints, float)

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self, calibrate: bool = True) -> None:
        self._connected = True

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass

    def get_observation(self) -> dict[str, Any]:
        with self._lock:
            self.num_observations += 1
            obs: dict[str, Any] = {
                name: float(value) for name, value in zip(self.joints, self._position, strict=True)
            }
            for name, shape in self.config.camera_shapes.items():
                obs[name] = self._rng.integers(0, 256, size=tuple(shape), dtype=np.uint8)
        return obs

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            values = [float(action[name]) for name in self.joints]
            self.actions.append(values)
            self.action_times_s.append(time.monotonic())
            self._position = np.asarray(values)
        return action

    def disconnect(self) -> None:
        self._connected = False
