"""SO-101 pick-and-place (``lerobot-env-so101``) as an evaluation environment.

The scene is ``SO101PickPlace-v0`` at 10 Hz with the block and goal placed from
the episode's seed, stepped with the action scale the package's scripted
controller is calibrated for (0.025 m per unit; the environment's own default of
1.0 makes that controller fail every episode).

Actions are absolute: the grasp point's target (x, y, z in metres, world frame)
and the grasp command (0 closed, 1 open). Each step sends the environment the
native delta from its current IK target. The environment locks its target to
the measured position on an exactly zero delta (the arm then sags by its
tracking error), so a held target is sent as a delta of 1e-5 units instead.

Observations: ``observation.state`` (14 values: joint positions, velocities,
gripper, end effector), ``observation.environment_state`` (block and goal
positions; state-only runs) or ``observation.images.front`` (``image_obs``),
``task``, and the privileged entries an expert reads (``privileged/state``:
grasp point, IK target, block, goal; ``privileged/episode``).

Variation axes (``axes/so101-pick.json``): front camera position, light
brightness, block mass and colour, robot base position; all are model fields
set before the reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from armory.eval.environment import EnvConfig, Environment, ResetResult, StepResult
from armory.eval.headless_gl import configure_headless_gl
from armory.eval.variation import Scenario
from armory.policies.expert import EPISODE_KEY, PRIVILEGED_STATE_KEY

STATE_KEY = "observation.state"
ENV_STATE_KEY = "observation.environment_state"
FRONT_IMAGE_KEY = "observation.images.front"
TASK_KEY = "task"

_HELD_DELTA = np.asarray([0.0, 0.0, 1e-5])
"""Native delta sent for a held target (the environment treats an exact zero as 'lock')."""
_ZERO_DELTA_UNITS = 1e-5
AXES = (
    "camera.front.x",
    "camera.front.y",
    "camera.front.z",
    "lighting.diffuse",
    "object.block_mass",
    "object.block_red",
    "robot-base.x",
    "robot-base.y",
)
"""The variation axes this environment sets (others in a scenario are not applied)."""


@dataclass(frozen=True)
class So101PickConfig(EnvConfig):
    """SO-101 pick-and-place: move the cube onto the goal (lerobot-env-so101)."""

    image_obs: bool = False
    """Render the front camera (``observation.images.front``) instead of sending the
    block and goal positions."""
    image_size: int = 128
    task: str = "Pick up the cube and place it on the goal."
    shadows: bool = False
    """Render shadows (about ten times slower with a software renderer)."""

    @property
    def name(self) -> str:
        return "so101-pick"

    def prepare_process(self) -> None:
        """A camera needs an OpenGL platform, chosen before MuJoCo is imported."""
        if self.image_obs:
            configure_headless_gl()

    def make(self) -> So101PickEnv:
        """Called in the robot's process."""
        return So101PickEnv(self)


class So101PickEnv(Environment):
    """``SO101PickPlace-v0`` with absolute grasp-point actions and variation handles."""

    name = "so101-pick"
    control_hz = 10.0
    action_dim = 4

    def __init__(self, config: So101PickConfig) -> None:
        config.prepare_process()
        try:
            from lerobot_env_so101 import GymRenderingSpec, SO101PickPlaceGymEnv
            from lerobot_env_so101.policy import DEFAULT_ACTION_SCALE
        except ImportError as exc:
            raise ImportError(
                "env:so101-pick needs lerobot-env-so101: pip install 'armory[eval]'"
            ) from exc
        self.config = config
        self.task = config.task
        self._scale = DEFAULT_ACTION_SCALE
        self._env = SO101PickPlaceGymEnv(
            render_spec=GymRenderingSpec(height=config.image_size, width=config.image_size),
            image_obs=config.image_obs,
            random_block_position=True,
            action_scale=DEFAULT_ACTION_SCALE,
        )
        model = self._env.model
        if not config.shadows:
            model.light_castshadow[:] = 0
        self._camera = model.camera("front").id
        self._base = model.body("base").id
        self._block_body = model.body("block").id
        self._block_geom = model.geom("block").id
        self._defaults = {
            "cam_pos": model.cam_pos[self._camera].copy(),
            "light_diffuse": model.light_diffuse.copy(),
            "block_mass": float(model.body_mass[self._block_body]),
            "block_rgba": model.geom_rgba[self._block_geom].copy(),
            "base_pos": model.body_pos[self._base].copy(),
        }
        self._obs: dict[str, Any] = {}
        self._episode = 0
        self._last_grip: float | None = None

    def reset(self, *, seed: int, episode: int, scenario: Scenario) -> ResetResult:
        self._apply(scenario)
        self._obs, _ = self._env.reset(seed=seed)
        self._episode = episode
        self._last_grip = None
        return ResetResult(not_applied=tuple(n for n in scenario.values if n not in AXES))

    def step(self, action: np.ndarray) -> StepResult:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (self.action_dim,) or not np.isfinite(action).all():
            raise ValueError(f"so101-pick: expected 4 finite values, got {action!r}")
        delta = (action[:3] - self._env._target_ee_pos) / self._scale
        if np.linalg.norm(delta) < _ZERO_DELTA_UNITS:
            delta = _HELD_DELTA
        self._last_grip = float(np.clip(action[3], 0.0, 1.0))
        native = np.asarray([*delta, self._last_grip], dtype=np.float32)
        self._obs, reward, terminated, _, info = self._env.step(native)
        return StepResult(
            reward=float(reward),
            success=bool(info.get("succeed", False)),
            terminated=bool(terminated),
        )

    def hold_action(self) -> np.ndarray:
        grip = 1.0 if self._last_grip is None else self._last_grip
        return np.asarray([*self._env._target_ee_pos, grip], dtype=np.float32)

    def observation(self) -> dict[str, Any]:
        env = self._env
        obs: dict[str, Any] = {
            STATE_KEY: np.asarray(self._obs["agent_pos"], dtype=np.float32),
            TASK_KEY: self.task,
        }
        if self.config.image_obs:
            obs[FRONT_IMAGE_KEY] = np.asarray(self._obs["pixels"]["front"], dtype=np.uint8)
        else:
            obs[ENV_STATE_KEY] = np.asarray(self._obs["environment_state"], dtype=np.float32)
        block = env.data.sensor("block_pos").data
        obs[PRIVILEGED_STATE_KEY] = np.concatenate(
            [env.ik_point_pos, env._target_ee_pos, block, env.goal_pos]
        ).astype(np.float32)
        obs[EPISODE_KEY] = np.int64(self._episode)
        return obs

    def close(self) -> None:
        self._env.close()

    def _apply(self, scenario: Scenario) -> None:
        """Set the model fields of ``scenario``'s values; every other field its default."""
        model = self._env.model
        values = {name: v.value for name, v in scenario.values.items()}
        cam = self._defaults["cam_pos"].copy()
        for i, axis in enumerate(("x", "y", "z")):
            cam[i] = values.get(f"camera.front.{axis}", cam[i])
        model.cam_pos[self._camera] = cam
        model.light_diffuse[:] = self._defaults["light_diffuse"] * values.get(
            "lighting.diffuse", 1.0
        )
        model.body_mass[self._block_body] = values.get(
            "object.block_mass", self._defaults["block_mass"]
        )
        rgba = self._defaults["block_rgba"].copy()
        rgba[0] = values.get("object.block_red", rgba[0])
        model.geom_rgba[self._block_geom] = rgba
        base = self._defaults["base_pos"].copy()
        base[0] += values.get("robot-base.x", 0.0)
        base[1] += values.get("robot-base.y", 0.0)
        model.body_pos[self._base] = base
