"""`LeRobotRobot`: a LeRobot robot object (an SO-100/SO-101 arm...) as a runtime `Robot`.

LeRobot's robots speak named values: ``get_observation()`` returns a map of joint
readings (``"shoulder_pan.pos": 12.5``, floats) and camera frames (``"front": (H, W, 3)
uint8``), and ``send_action(dict)`` takes the joint targets by the same names. A
policy speaks arrays. The adapter joins the two, with no import of lerobot: any object
with that shape will do (its ``action_features`` map, when it has one, gives the joint
order). The arm must be connected before the runtime starts (the adapter never
connects hardware), and both calls run on the runtime's event loop, so they must
return quickly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["LeRobotLike", "LeRobotRobot"]


class LeRobotLike(Protocol):
    """What the adapter needs of a LeRobot robot."""

    def get_observation(self) -> dict[str, Any]:
        """Joint readings by name (floats) and camera frames by name (arrays)."""
        ...

    def send_action(self, action: dict[str, Any]) -> Any:
        """Joint targets by name."""
        ...


class LeRobotRobot:
    """Maps a LeRobot robot's named joints and cameras to a policy's arrays."""

    def __init__(
        self,
        robot: LeRobotLike,
        *,
        # Actions
        action_names: Sequence[str] | None = None,
        # Observations
        state_names: Sequence[str] | None = None,
        state_key: str = "observation/state",
        cameras: Mapping[str, str] | None = None,
        prompt: str | None = None,
        prompt_key: str = "prompt",
    ) -> None:
        """`action_names`: the joint names in action order (default: the robot's
        ``action_features`` keys). `state_names`: the readings stacked, in order, into the
        float32 state vector under `state_key` (default: the action names). `cameras`:
        LeRobot camera name -> observation key (default: every array of 3 dimensions the
        robot returns, under its own name). `prompt`: a task sent under `prompt_key`.

        Raises ValueError when no joint names are given or found, or names repeat.
        """
        if action_names is None:
            features = getattr(robot, "action_features", None)
            action_names = list(features) if isinstance(features, Mapping) else []
        self.action_names = tuple(action_names)
        """Joint names, in the order of the policy's action vector."""
        self.state_names = tuple(self.action_names if state_names is None else state_names)
        """Readings stacked, in order, into the state vector."""
        for name, names in [("action_names", self.action_names), ("state_names", self.state_names)]:
            if not names:
                raise ValueError(
                    f"{name} is empty: give it, or use a robot whose action_features names "
                    "its joints"
                )
            if len(set(names)) != len(names):
                raise ValueError(f"{name} repeats a name: {list(names)}")
        self.state_key = state_key
        self.cameras = None if cameras is None else dict(cameras)
        self.prompt = prompt
        self.prompt_key = prompt_key
        self._robot = robot

    def get_observation(self) -> dict[str, Any]:
        """The robot's readings as the state vector, its frames under their keys, and
        the prompt. Raises ValueError naming a reading or camera the robot did not return."""
        raw = self._robot.get_observation()
        missing = [name for name in self.state_names if name not in raw]
        if missing:
            raise ValueError(f"the robot's observation lacks {missing}; it has {sorted(raw)}")
        obs: dict[str, Any] = {
            self.state_key: np.array([raw[name] for name in self.state_names], np.float32)
        }
        if self.cameras is None:
            for name, value in raw.items():
                if isinstance(value, np.ndarray) and value.ndim == 3:
                    obs[name] = value
        else:
            for name, key in self.cameras.items():
                if name not in raw:
                    raise ValueError(f"the robot's observation lacks camera {name!r}")
                obs[key] = raw[name]
        if self.prompt is not None:
            obs[self.prompt_key] = self.prompt
        return obs

    def send_action(self, action: np.ndarray) -> None:
        """The action vector as joint targets by name. Raises ValueError when its length
        is not the number of joints."""
        values = np.asarray(action, dtype=np.float64).reshape(-1)
        if len(values) != len(self.action_names):
            raise ValueError(
                f"action has {len(values)} values, the robot {len(self.action_names)} joints "
                f"({', '.join(self.action_names)})"
            )
        self._robot.send_action(dict(zip(self.action_names, values.tolist(), strict=True)))
