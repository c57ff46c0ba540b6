"""The scripted transfer-cube expert of ALOHA (gym-aloha), as ACT's authors scripted it.

ACT's ``PickAndTransferPolicy`` moves both grippers through timed end-effector
waypoints (the right arm picks the cube and lifts it to a meeting point, the left arm
takes it there) in the end-effector (mocap) version of the scene; the joint positions
that scene passes through, with the grippers' commands, are the joint-space actions
that reproduce the episode in the joint-position scene the evaluation runs. The
expert is open-loop: from the cube's pose at the episode's start it computes the
whole 400-step joint trajectory once (about a second of simulation, in a scene with the
arm bases where the episode's variation put them) and serves rows of it by action index.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

EPISODE_STEPS = 400
"""Steps of a scripted episode (gym-aloha's transfer-cube length)."""
ACTION_DIM = 14
PRIVILEGED_STATE_DIM = 13
"""What ALOHA's transfer-cube environment sends as privileged state: the cube's position
and quaternion, then the left and right arm bases' positions."""
_INIT_LEFT = np.array([-0.31718881, 0.5, 0.29525084, 1.0, 0.0, 0.0, 0.0])
_INIT_RIGHT = np.array([0.31718881, 0.49999888, 0.29525084, 1.0, 0.0, 0.0, 0.0])
"""The mocap poses gym-aloha's end-effector scene starts from (its grippers' poses)."""
_MEET = np.array([0.0, 0.5, 0.25])
_STIFF_WELD = (0.9, 0.95, 0.001, 0.5, 2.0)
"""solimp of the mocap welds (the file's is 0.25, 0.25, 0.001, 0.5, 2)."""


def _axis_angle_quat(axis: tuple[float, float, float], degrees: float) -> np.ndarray:
    half = np.radians(degrees) / 2
    return np.array([np.cos(half), *(np.sin(half) * np.asarray(axis))])


def _quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def waypoints(cube_xyz: np.ndarray) -> tuple[list[tuple], list[tuple]]:
    """ACT's PickAndTransferPolicy: (step, xyz, quat, gripper) of the left and right
    grippers (gripper 0 closed, 1 open)."""
    pick = _quat_multiply(_INIT_RIGHT[3:], _axis_angle_quat((0.0, 1.0, 0.0), -60))
    meet_left = _axis_angle_quat((1.0, 0.0, 0.0), 90)
    upright = np.array([1.0, 0.0, 0.0, 0.0])
    left = [
        (0, _INIT_LEFT[:3], _INIT_LEFT[3:], 0.0),
        (100, _MEET + np.array([-0.1, 0, -0.02]), meet_left, 1.0),  # approach the meeting point
        (260, _MEET + np.array([0.02, 0, -0.02]), meet_left, 1.0),  # move to it
        (310, _MEET + np.array([0.02, 0, -0.02]), meet_left, 0.0),  # close the gripper
        (360, _MEET + np.array([-0.1, 0, -0.02]), upright, 0.0),  # go left
        (400, _MEET + np.array([-0.1, 0, -0.02]), upright, 0.0),  # stay
    ]
    right = [
        (0, _INIT_RIGHT[:3], _INIT_RIGHT[3:], 0.0),
        (90, cube_xyz + np.array([0, 0, 0.08]), pick, 1.0),  # above the cube
        (130, cube_xyz + np.array([0, 0, -0.015]), pick, 1.0),  # down
        (170, cube_xyz + np.array([0, 0, -0.015]), pick, 0.0),  # close the gripper
        (200, _MEET + np.array([0.05, 0, 0]), pick, 0.0),  # approach the meeting point
        (220, _MEET, pick, 0.0),  # move to it
        (310, _MEET, pick, 1.0),  # open the gripper
        (360, _MEET + np.array([0.1, 0, 0]), pick, 1.0),  # go right
        (400, _MEET + np.array([0.1, 0, 0]), pick, 1.0),  # stay
    ]
    return left, right


def _interpolate(points: list[tuple], step: int) -> np.ndarray:
    """xyz, quat and gripper at ``step``, linear between waypoints (as ACT does)."""
    for (t0, xyz0, q0, g0), (t1, xyz1, q1, g1) in itertools.pairwise(points):
        if t0 <= step <= t1:
            f = (step - t0) / (t1 - t0)
            return np.concatenate(
                [
                    np.asarray(xyz0) + f * (np.asarray(xyz1) - xyz0),
                    np.asarray(q0) + f * (np.asarray(q1) - q0),
                    [g0 + f * (g1 - g0)],
                ]
            )
    _, xyz, q, g = points[-1]
    return np.concatenate([xyz, q, [g]])


def joint_trajectory(state: np.ndarray) -> np.ndarray:
    """(EPISODE_STEPS, 14) joint-space actions that transfer the cube of the privileged
    ``state`` (:data:`PRIVILEGED_STATE_DIM` values): the scripted waypoints run in
    gym-aloha's end-effector scene, its joint positions recorded with the grippers'
    commands."""
    from dm_control import mujoco
    from dm_control.rl import control
    from gym_aloha.constants import ASSETS_DIR, DT, normalize_puppet_gripper_position

    state = np.asarray(state, dtype=np.float64)
    if state.shape != (PRIVILEGED_STATE_DIM,):
        raise ValueError(
            f"aloha expert: privileged state must have {PRIVILEGED_STATE_DIM} values (the "
            f"transfer-cube task's cube pose and arm bases), got shape {state.shape}"
        )
    cube_pose = state[:7]
    physics = mujoco.Physics.from_xml_path(
        str(ASSETS_DIR / "bimanual_viperx_end_effector_transfer_cube.xml")
    )
    for arm, base in (("left", state[7:10]), ("right", state[10:13])):
        physics.model.body_pos[physics.model.name2id(f"vx300s_{arm}", "body")] = base
    # The welds pulling the grippers to their mocap targets are soft in the file: under
    # MuJoCo 3 the arms then lag the waypoints by centimetres and miss the cube.
    physics.model.eq_solimp[:] = _STIFF_WELD
    task = _placed_cube_task(cube_pose)
    env = control.Environment(
        physics, task, float("inf"), control_timestep=DT, n_sub_steps=None, flat_observation=False
    )
    left, right = waypoints(cube_pose[:3])
    rows = [env.reset().observation]
    for step in range(EPISODE_STEPS - 1):
        action = np.concatenate([_interpolate(left, step), _interpolate(right, step)])
        rows.append(env.step(action).observation)
    actions = np.stack([row["qpos"] for row in rows]).astype(np.float32)
    ctrl = np.stack([row["gripper_ctrl"] for row in rows])
    actions[:, 6] = normalize_puppet_gripper_position(ctrl[:, 0])
    actions[:, 13] = normalize_puppet_gripper_position(ctrl[:, 2])
    return actions


def _placed_cube_task(cube_pose: np.ndarray) -> Any:
    """gym-aloha's end-effector transfer-cube task with the cube at ``cube_pose`` (where
    the episode's joint-space scene put it), observing without rendering."""
    from gym_aloha.tasks.sim_end_effector import TransferCubeEndEffectorTask

    class PlacedCubeTask(TransferCubeEndEffectorTask):
        def initialize_episode(self, physics: Any) -> None:
            self.initialize_robots(physics)
            start = physics.model.name2id("red_box_joint", "joint")
            np.copyto(physics.data.qpos[start : start + 7], cube_pose)

        def get_observation(self, physics: Any) -> dict[str, np.ndarray]:
            return {"qpos": self.get_qpos(physics), "gripper_ctrl": physics.data.ctrl.copy()}

    return PlacedCubeTask()


class AlohaChunkExpert:
    """Per-robot scripted trajectories, each computed when its robot's episode changes."""

    def __init__(self, *, action_horizon: int) -> None:
        """Check that gym-aloha is importable (raises ImportError naming it)."""
        try:
            import gym_aloha  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "policy:expert for aloha needs gym-aloha: pip install 'armory[aloha]' and "
                "pip install --no-deps gym-aloha==0.1.5"
            ) from exc
        self.action_horizon = action_horizon
        self._trajectories: dict[str, tuple[int, np.ndarray]] = {}

    def chunk(self, robot: str, episode: int, chunk_start: int, state: np.ndarray) -> np.ndarray:
        """Called per observation: rows ``chunk_start`` on of the episode's trajectory (the
        last row repeated past its end), computed from the privileged ``state`` when the
        episode is new to this robot."""
        known = self._trajectories.get(robot)
        if known is None or known[0] != episode:
            known = (episode, joint_trajectory(state))
            self._trajectories[robot] = known
        trajectory = known[1]
        rows = np.minimum(
            np.arange(chunk_start, chunk_start + self.action_horizon), EPISODE_STEPS - 1
        )
        return trajectory[rows]
