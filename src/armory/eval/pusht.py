"""PushT (``gym-pusht``) as an evaluation environment.

A circle agent pushes a T-shaped block onto a goal pose; success is 95% coverage
of the goal (the environment's own judgement), the reward the coverage so far.
Ten steps per second. Actions are the agent's absolute target (x, y in 0..512,
clipped there), so a robot that holds its last action on an empty queue stays.

Observations mirror LeRobot's PushT datasets: ``observation.state`` (the agent's
x, y), and ``observation.environment_state`` (the block's 16 keypoint
coordinates; state-only runs) or ``observation.image`` (``image_obs``), plus
``task``. No camera or lights to vary without patching the renderer: the axes
(``axes/pusht.json``) are physics (space damping, the agent's PD gains) and the
block's mass, set after the reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from armory.eval.environment import EnvConfig, Environment, ResetResult, StepResult
from armory.eval.variation import Scenario

STATE_KEY = "observation.state"
ENV_STATE_KEY = "observation.environment_state"
IMAGE_KEY = "observation.image"
TASK_KEY = "task"

AXES = ("physics.damping", "physics.agent_kp", "physics.agent_kv", "object.block_mass")
"""The variation axes this environment sets."""
_ARENA = (0.0, 512.0)
"""The agent's target range in each axis (the environment's action space)."""


@dataclass(frozen=True)
class PushTConfig(EnvConfig):
    """PushT: push the T-shaped block onto its goal pose (gym-pusht)."""

    image_obs: bool = False
    """Render the scene (``observation.image``) instead of sending the block's keypoints."""
    image_size: int = 96
    task: str = "Push the T-shaped block onto the T-shaped target."

    @property
    def name(self) -> str:
        return "pusht"

    def make(self) -> PushTEnv:
        """Called in the robot's process."""
        return PushTEnv(self)


class PushTEnv(Environment):
    """``gym_pusht.envs.PushTEnv`` with physics handles."""

    name = "pusht"
    control_hz = 10.0
    action_dim = 2

    def __init__(self, config: PushTConfig) -> None:
        try:
            from gym_pusht.envs import PushTEnv as GymPushT
        except ImportError as exc:
            raise ImportError("env:pusht needs gym-pusht: pip install 'armory[eval]'") from exc
        self.config = config
        self.task = config.task
        self._env = GymPushT(
            obs_type="pixels_agent_pos" if config.image_obs else "environment_state_agent_pos",
            observation_width=config.image_size,
            observation_height=config.image_size,
        )
        self._obs: Any = None

    def reset(self, *, seed: int, episode: int, scenario: Scenario) -> ResetResult:
        self._obs, _ = self._env.reset(seed=seed)
        values = {name: v.value for name, v in scenario.values.items()}
        env = self._env
        env.space.damping = values.get("physics.damping", 0.0)
        env.k_p = values.get("physics.agent_kp", 100.0)
        env.k_v = values.get("physics.agent_kv", 20.0)
        if "object.block_mass" in values:
            env.block.mass = values["object.block_mass"]
        return ResetResult(not_applied=tuple(n for n in scenario.values if n not in AXES))

    def step(self, action: np.ndarray) -> StepResult:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (self.action_dim,) or not np.isfinite(action).all():
            raise ValueError(f"pusht: expected 2 finite values, got {action!r}")
        self._obs, reward, terminated, _, info = self._env.step(np.clip(action, *_ARENA))
        return StepResult(
            reward=float(reward),
            success=bool(info.get("is_success", False)),
            terminated=bool(terminated),
        )

    def hold_action(self) -> np.ndarray:
        return np.asarray(self._env.agent.position, dtype=np.float32)

    def observation(self) -> dict[str, Any]:
        obs: dict[str, Any] = {
            STATE_KEY: np.asarray(self._obs["agent_pos"], dtype=np.float32),
            TASK_KEY: self.task,
        }
        if self.config.image_obs:
            obs[IMAGE_KEY] = np.asarray(self._obs["pixels"], dtype=np.uint8)
        else:
            obs[ENV_STATE_KEY] = np.asarray(self._obs["environment_state"], dtype=np.float32)
        return obs

    def close(self) -> None:
        self._env.close()
