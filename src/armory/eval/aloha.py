"""Bimanual ALOHA (``gym-aloha``): transfer-cube and insertion as evaluation environments.

The scene is gym-aloha's joint-position task (dm_control on MuJoCo) at 50 Hz, the
object placed as gym-aloha places it from the episode's seed. Actions are gym-aloha's
14 values: per arm (left, then right) six absolute joint positions and the gripper's
normalised position (0 closed, 1 open). Success is the task's top reward (4: the cube
held by the left gripper in the air; the peg in the socket).

Observations use the names of LeRobot's ALOHA datasets: ``observation.state`` (the
14 joint and gripper positions) and ``observation.images.<camera>`` for the model's
cameras (``top`` as in ``lerobot/aloha_sim_*``; also ``angle``, ``front_close``,
``left_wrist``, ``right_wrist``, ``left_pillar``, ``right_pillar``), plus ``task``,
and the privileged entries an expert reads (``privileged/state``: the objects' poses,
7 values per object, then the left and right arm bases' positions;
``privileged/episode``). gym-aloha's own observation renders three 640x480 cameras
every step; here only the cameras the policy declares are rendered, at the declared
size, and only when an observation is taken.

Variation axes (``axes/aloha.json``): the top camera's position (it stays aimed at
its target), the lights' and headlight's brightness, both arm bases' positions, and
an offset of the objects' sampled position (cube, or peg and socket together).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from armory.eval.environment import EnvConfig, Environment, ResetResult, StepResult
from armory.eval.headless_gl import configure_headless_gl
from armory.eval.mapping import MappingError
from armory.eval.variation import Scenario
from armory.policies.expert import EPISODE_KEY, PRIVILEGED_STATE_KEY

STATE_KEY = "observation.state"
IMAGE_PREFIX = "observation.images."
TASK_KEY = "task"
DEFAULT_CAMERA = "top"
"""The camera of LeRobot's simulated ALOHA datasets."""
ACTION_DIM = 14
MAX_REWARD = 4
"""The reward of a finished task (both gym-aloha tasks)."""
TASKS = {"transfer-cube": "transfer_cube", "insertion": "insertion"}
"""``--env.task-name`` -> gym-aloha's task."""
INSTRUCTIONS = {
    "transfer-cube": "Pick up the cube with the right arm and transfer it to the left arm.",
    "insertion": "Insert the peg into the socket.",
}
AXES = (
    "camera.top.x",
    "camera.top.y",
    "camera.top.z",
    "lighting.diffuse",
    "lighting.headlight",
    "object.offset_x",
    "object.offset_y",
    "robot-base.left.x",
    "robot-base.left.y",
    "robot-base.right.x",
    "robot-base.right.y",
)
"""The variation axes this environment sets (others in a scenario are not applied)."""
_ARMS = ("left", "right")


@dataclass(frozen=True)
class AlohaConfig(EnvConfig):
    """Bimanual ALOHA (gym-aloha): transfer the cube between the arms, or insert the peg."""

    task_name: Literal["transfer-cube", "insertion"] = "transfer-cube"
    """gym-aloha's task."""
    cameras: tuple[str, ...] | None = None
    """Cameras to render (observation.images.<name>); None: the ones the policy declares
    (top when it declares no inputs)."""
    image_size: int = 480
    """Height of a frame the policy does not size (width 4/3 of it, as gym-aloha's)."""
    task: str = ""
    """The language instruction; empty: a sentence describing the task."""

    @property
    def name(self) -> str:
        return "aloha"

    def prepare_process(self) -> None:
        """Cameras need an OpenGL platform, chosen before MuJoCo is imported."""
        configure_headless_gl()

    def make(self) -> AlohaEnv:
        """Called in the robot's process."""
        return AlohaEnv(self)


class AlohaEnv(Environment):
    """gym-aloha's joint-position task, rendering only the cameras asked for."""

    name = "aloha"
    control_hz = 50.0
    action_dim = ACTION_DIM

    def __init__(self, config: AlohaConfig) -> None:
        config.prepare_process()
        try:
            from gym_aloha import env as gym_aloha_env
            from gym_aloha.tasks import sim as aloha_sim
            from gym_aloha.utils import sample_box_pose, sample_insertion_pose
        except ImportError as exc:
            raise ImportError(
                "env:aloha needs gym-aloha: pip install 'armory[aloha]' and "
                "pip install --no-deps gym-aloha==0.1.5"
            ) from exc
        self.config = config
        self.task = config.task or INSTRUCTIONS[config.task_name]
        self._sim = aloha_sim
        self._sample = (
            sample_box_pose
            if config.task_name == "transfer-cube"
            else _insertion_pose(sample_insertion_pose)
        )
        gym_env = gym_aloha_env.AlohaEnv(TASKS[config.task_name], obs_type="pixels_agent_pos")
        self._env = gym_env._env  # dm_control's Environment: stepped without gym's render
        task = self._env.task
        # gym-aloha's observation renders three cameras per step; keep only the state.
        task.get_observation = lambda physics: {"qpos": task.get_qpos(physics)}
        self._physics = self._env.physics
        model = self._physics.model
        self.camera_names = tuple(model.id2name(i, "camera") for i in range(model.ncam))
        self._cameras: dict[str, tuple[int, int]] = {}
        self.declare_inputs({})
        self._defaults = {
            "cam_pos": model.cam_pos.copy(),
            "light_diffuse": model.light_diffuse.copy(),
            "headlight": model.vis.headlight.diffuse.copy(),
            "body_pos": model.body_pos.copy(),
        }
        self._top = model.name2id(DEFAULT_CAMERA, "camera")
        self._bases = {arm: model.name2id(f"vx300s_{arm}", "body") for arm in _ARMS}
        self._qpos: np.ndarray | None = None
        self._frames: dict[str, np.ndarray] = {}
        self._episode = 0

    def declare_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Render the declared cameras at their declared size; a declared camera the model
        lacks is a MappingError naming the cameras it has."""
        if self.config.cameras is not None:
            wanted = {name: None for name in self.config.cameras}
        else:
            wanted = {
                key.removeprefix(IMAGE_PREFIX): spec
                for key, spec in inputs.items()
                if key.startswith(IMAGE_PREFIX)
            }
            if not inputs:
                wanted = {DEFAULT_CAMERA: None}
        unknown = sorted(set(wanted) - set(self.camera_names))
        if unknown:
            have = ", ".join(IMAGE_PREFIX + name for name in self.camera_names)
            raise MappingError(
                f"env:aloha has no camera {', '.join(map(repr, unknown))}; its cameras are "
                f"{have}; rename with --mapping ENV_KEY POLICY_KEY"
            )
        default = (self.config.image_size, self.config.image_size * 4 // 3)
        self._cameras = {name: _frame_size(spec, default) for name, spec in wanted.items()}

    def reset(self, *, seed: int, episode: int, scenario: Scenario) -> ResetResult:
        values = {name: v.value for name, v in scenario.values.items()}
        self._apply(values)
        pose = np.array(self._sample(seed), dtype=np.float64)
        for start in range(0, len(pose), 7):  # each object's x, y, then z and quaternion
            pose[start] += values.get("object.offset_x", 0.0)
            pose[start + 1] += values.get("object.offset_y", 0.0)
        task = self._env.task
        task.random.seed(seed)
        self._sim.BOX_POSE[0] = pose  # gym-aloha's tasks read the pose from this global
        timestep = self._env.reset()
        self._qpos = np.asarray(timestep.observation["qpos"], dtype=np.float32)
        self._frames = {}
        self._episode = episode
        return ResetResult(not_applied=tuple(n for n in scenario.values if n not in AXES))

    def step(self, action: np.ndarray) -> StepResult:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (ACTION_DIM,) or not np.isfinite(action).all():
            raise ValueError(f"aloha: expected {ACTION_DIM} finite values, got {action!r}")
        timestep = self._env.step(action)
        self._qpos = np.asarray(timestep.observation["qpos"], dtype=np.float32)
        self._frames = {}
        reward = float(timestep.reward or 0.0)
        success = reward >= MAX_REWARD
        return StepResult(reward=reward, success=success, terminated=success)

    def hold_action(self) -> np.ndarray:
        assert self._qpos is not None, "reset before stepping"
        return self._qpos.copy()

    def observation(self) -> dict[str, Any]:
        assert self._qpos is not None, "reset before observing"
        obs: dict[str, Any] = {STATE_KEY: self._qpos.copy(), TASK_KEY: self.task}
        for camera, (height, width) in self._cameras.items():
            if camera not in self._frames:  # one render per camera per step
                self._frames[camera] = self._physics.render(
                    height=height, width=width, camera_id=camera
                )
            obs[IMAGE_PREFIX + camera] = self._frames[camera]
        model = self._physics.model
        bases = [model.body_pos[self._bases[arm]] for arm in _ARMS]
        obs[PRIVILEGED_STATE_KEY] = np.concatenate([self._physics.data.qpos[16:], *bases]).astype(
            np.float32
        )
        obs[EPISODE_KEY] = np.int64(self._episode)
        return obs

    def _apply(self, values: Mapping[str, float]) -> None:
        """Set the model fields of the scenario's values; every other field its default."""
        model = self._physics.model
        cam = self._defaults["cam_pos"].copy()
        for i, axis in enumerate(("x", "y", "z")):
            cam[self._top, i] = values.get(f"camera.top.{axis}", cam[self._top, i])
        model.cam_pos[:] = cam
        model.light_diffuse[:] = self._defaults["light_diffuse"] * values.get(
            "lighting.diffuse", 1.0
        )
        model.vis.headlight.diffuse[:] = self._defaults["headlight"] * values.get(
            "lighting.headlight", 1.0
        )
        body_pos = self._defaults["body_pos"].copy()
        for arm, body in self._bases.items():
            body_pos[body, 0] += values.get(f"robot-base.{arm}.x", 0.0)
            body_pos[body, 1] += values.get(f"robot-base.{arm}.y", 0.0)
        model.body_pos[:] = body_pos


def _frame_size(spec: Any, default: tuple[int, int]) -> tuple[int, int]:
    """(height, width) of a declared image input, else ``default``."""
    shape = spec.get("shape") if isinstance(spec, Mapping) else None
    if shape is not None and len(shape) == 3 and all(isinstance(d, int) for d in shape[:2]):
        return int(shape[0]), int(shape[1])
    return default


def _insertion_pose(sample: Any) -> Any:
    """gym-aloha's insertion sampler as one 14-value pose (peg, then socket)."""
    return lambda seed: np.concatenate(sample(seed))
