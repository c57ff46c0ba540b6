"""env:libero: openpi's and LeRobot's observation conventions, a scripted action stream
played through Armory's robot against the same stream played on LIBERO directly, a
mapping mismatch caught before the episode, and armory eval end to end (small renders,
a few steps: each LIBERO reset reloads its model)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libero.libero")
os.environ.setdefault("MUJOCO_GL", "egl")

from armory.cli import main
from armory.eval.libero import (
    LEROBOT_KEYS,
    OPENPI_KEYS,
    SETTLE_ACTION,
    LiberoConfig,
    LiberoEnv,
    format_observation,
    quat_to_axis_angle,
    resize_with_pad,
)
from armory.eval.mapping import MappingError, check_mapping
from armory.eval.robot_process import EnvRobot
from armory.eval.variation import Scenario, VariationConfig, load_axes, scenario
from armory.policies.noise import NoiseConfig, make_noise

LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON", "")
RENDER_SIZE = 64
SETTLE_STEPS = 2
STREAM = np.asarray(
    [[0.5, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0], [0.0, 0.5, -0.3, 0.0, 0.0, 0.2, 1.0]] * 2
)
"""A scripted action stream: move, turn and close the gripper."""


@pytest.fixture(scope="module")
def env() -> LiberoEnv:
    made = LiberoConfig(render_size=RENDER_SIZE, settle_steps=SETTLE_STEPS).make()
    yield made
    made.close()


def test_quat_to_axis_angle_matches_robosuite() -> None:
    from robosuite.utils.transform_utils import quat2axisangle

    rng = np.random.default_rng(0)
    for quat in [*rng.normal(size=(5, 4)), np.asarray([0.0, 0.0, 0.0, 1.0])]:
        quat = quat / np.linalg.norm(quat)
        np.testing.assert_allclose(quat_to_axis_angle(quat), quat2axisangle(quat), atol=1e-6)


def test_resize_with_pad_keeps_the_aspect_on_black() -> None:
    image = np.full((32, 64, 3), 200, dtype=np.uint8)
    out = resize_with_pad(image, 64, 64)
    assert out.shape == (64, 64, 3) and out.dtype == np.uint8
    assert (out[:16] == 0).all() and (out[48:] == 0).all() and (out[16:48] == 200).all()
    np.testing.assert_array_equal(resize_with_pad(out, 64, 64), out)


def test_both_conventions_name_and_shape_the_same_scene(env: LiberoEnv) -> None:
    """openpi: 224 padded images, ``observation/state``, ``prompt``; LeRobot: the render
    size, ``observation.state``, ``task``; both rotate the cameras and send one state."""
    env.reset(seed=1, episode=0, scenario=Scenario(seed=0, episode=0))
    raw = env._raw
    openpi = format_observation(raw, "openpi", 224, env.task)
    lerobot = format_observation(raw, "lerobot", 224, env.task)
    assert tuple(openpi) == OPENPI_KEYS and tuple(lerobot) == LEROBOT_KEYS
    assert openpi["observation/image"].shape == (224, 224, 3)
    image = lerobot["observation.images.image"]
    assert image.shape == (RENDER_SIZE, RENDER_SIZE, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(image, raw["agentview_image"][::-1, ::-1])
    wrist = lerobot["observation.images.image2"]
    np.testing.assert_array_equal(wrist, raw["robot0_eye_in_hand_image"][::-1, ::-1])
    state = openpi["observation/state"]
    assert state.shape == (8,) and state.dtype == np.float32
    np.testing.assert_array_equal(state, lerobot["observation.state"])
    np.testing.assert_allclose(state[:3], raw["robot0_eef_pos"], rtol=1e-6)
    np.testing.assert_allclose(state[6:], raw["robot0_gripper_qpos"], rtol=1e-6)
    assert openpi["prompt"] == lerobot["task"] == env.task and "bowl" in env.task


def test_a_scripted_stream_through_armory_matches_libero_played_directly(env: LiberoEnv) -> None:
    """The same seed, initial state, settle steps and actions give the same trajectory
    through Armory's robot as through LIBERO's own loop (openpi's example)."""
    seed, episode = 11, 3
    env.reset(seed=seed, episode=episode, scenario=Scenario(seed=0, episode=episode))
    robot = EnvRobot(env, mapping={}, inputs={}, max_steps=len(STREAM))
    through_armory = [robot.get_observation()["observation/state"]]
    for action in STREAM:
        robot.send_action(action)
        through_armory.append(robot.get_observation()["observation/state"])
    assert robot.num_steps == len(STREAM) and robot.done

    raw_env = env._env
    raw_env.seed(seed)
    raw_env.reset()
    raw = raw_env.set_init_state(env._init_states[episode % len(env._init_states)])
    for _ in range(SETTLE_STEPS):
        raw, _, _, _ = raw_env.step(SETTLE_ACTION)
    directly = [format_observation(raw, "openpi", 224, env.task)["observation/state"]]
    for action in STREAM:
        raw, _, _, _ = raw_env.step(action)
        directly.append(format_observation(raw, "openpi", 224, env.task)["observation/state"])
    np.testing.assert_allclose(np.asarray(through_armory), np.asarray(directly), atol=1e-6)
    assert np.abs(np.diff(np.asarray(directly), axis=0)).max() > 1e-3  # the arm moved


def test_variation_moves_the_camera_and_objects(env: LiberoEnv) -> None:
    """Every axis is applied after LIBERO reloads its model; the objects start offset."""
    axes = load_axes("libero")
    chosen = scenario(axes, VariationConfig(enabled=True, seed=4), 0)
    result = env.reset(seed=1, episode=0, scenario=chosen)
    assert result.not_applied == () and sorted(chosen.values) == sorted(axes)
    model = env._env.env.sim.model
    camera = model.camera_name2id("agentview")
    moved_camera = model.cam_pos[camera].copy()
    moved_objects = env._raw["plate_1_pos"][:2].copy()
    env.reset(seed=1, episode=0, scenario=Scenario(seed=4, episode=0))
    model = env._env.env.sim.model  # the reset loaded a fresh model
    expected = [chosen.values[f"camera.agentview.{a}"].value for a in "xyz"]
    np.testing.assert_allclose(moved_camera - model.cam_pos[camera], expected, atol=1e-9)
    offset = [chosen.values[f"object.offset_{a}"].value for a in "xy"]
    shift = moved_objects - env._raw["plate_1_pos"][:2]
    np.testing.assert_allclose(shift, offset, atol=2e-3)  # the settle steps let it rest


def test_variation_sets_fields_from_the_loaded_model_not_the_last_episode(env: LiberoEnv) -> None:
    """Applying a scenario twice to one model (a reset that kept it) moves the camera,
    base, light and table once, as on a freshly loaded model; no variation restores it."""
    axes = load_axes("libero")
    chosen = scenario(axes, VariationConfig(enabled=True, seed=5), 0)
    env.reset(seed=1, episode=0, scenario=Scenario(seed=5, episode=0))
    model = env._env.env.sim.model
    fields = ("cam_pos", "light_diffuse", "body_pos", "mat_rgba")
    loaded = {name: getattr(model, name).copy() for name in fields}
    init_state = env._init_states[0]
    env._apply(chosen, init_state)
    once = {name: getattr(model, name).copy() for name in fields}
    env._apply(chosen, init_state)
    for name in fields:
        np.testing.assert_array_equal(getattr(model, name), once[name], err_msg=name)
    camera = model.camera_name2id("agentview")
    expected = [chosen.values[f"camera.agentview.{a}"].value for a in "xyz"]
    np.testing.assert_allclose(model.cam_pos[camera] - loaded["cam_pos"][camera], expected)
    env._apply(Scenario(seed=5, episode=0), init_state)
    for name in fields:
        np.testing.assert_array_equal(getattr(model, name), loaded[name], err_msg=name)


def test_a_missing_camera_or_wrong_state_size_is_one_clear_error(env: LiberoEnv) -> None:
    """A LeRobot-named policy against openpi's names: every misfit in one error."""
    env.reset(seed=1, episode=0, scenario=Scenario(seed=0, episode=0))
    inputs = {
        "observation.images.image": {"dtype": "uint8", "shape": [256, 256, 3]},
        "observation/state": {"dtype": "float32", "shape": [7]},
    }
    with pytest.raises(MappingError) as caught:
        check_mapping(env.observation(), {}, inputs, env="libero")
    message = str(caught.value)
    assert "'observation.images.image'" in message and "has no source" in message
    assert "'observation/state'" in message and "(7)" in message


def test_armory_eval_runs_libero_with_a_served_policy_and_variation(tmp_path: Path) -> None:
    """armory eval env:libero, two robots against the mock (openpi's LIBERO inputs): each
    episode runs its steps over the wire with its scenario and the noise ticket recorded."""
    out = tmp_path / "out"
    env = ["env:libero", "--env.render-size", str(RENDER_SIZE), "--env.settle-steps", "1"]
    options = ["--robots", "2", "--episodes", "2", "--episode-time-s", "0.2", "--variation"]
    options += ["--seed", "2", "--policy.noise.seed", "5"]
    argv = ["eval", *env, "policy:mock", *options, "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["run"]["env"] == "libero" and results["run"]["robots"] == 2
    ticket = make_noise(NoiseConfig(seed=5), (10, 7))
    assert ticket is not None
    episodes = results["episodes"]
    assert sorted(e["episode"] for e in episodes) == [0, 1]
    for episode in episodes:
        assert episode["num_steps"] == 4 and episode["num_requests"] > 0
        assert episode["num_request_errors"] == 0
        assert episode["ticket"]["served_sha256"] == [ticket.sha256]
        assert "object.offset_x" in episode["scenario"]["values"]
        assert episode["scenario"]["not_applied"] == []
    offsets = {e["scenario"]["values"]["object.offset_x"]["value"] for e in episodes}
    assert len(offsets) == 2  # each episode its own scene


READ_BACK = """
    import json, sys
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("armory/eval", root=sys.argv[1])
    frame = dataset[0]
    print(json.dumps({
        "num_frames": len(dataset),
        "shapes": {k: list(v.shape) for k, v in frame.items() if hasattr(v, "shape")},
        "task": frame["task"],
    }))
"""


@pytest.mark.skipif(
    not (LEROBOT_PYTHON and Path(LEROBOT_PYTHON).exists()),
    reason="ARMORY_LEROBOT_PYTHON is unset or missing (build it with scripts/lerobot-env.sh)",
)
@pytest.mark.parametrize(
    ("mapping", "images", "state"),
    [
        ("lerobot", LEROBOT_KEYS[:2], LEROBOT_KEYS[2]),
        # LeRobot refuses '/' in feature names: openpi's entries are written with dots.
        ("openpi", ("observation.image", "observation.wrist_image"), "observation.state"),
    ],
)
def test_a_recorded_episode_reads_back_as_a_lerobot_dataset(
    env: LiberoEnv, tmp_path: Path, mapping: str, images: tuple[str, ...], state: str
) -> None:
    """--record.dir writes the LIBERO episode under the mapping's names: both cameras as
    images at the declared size, the 8-value state, the 7-value action and the task;
    LeRobot's own LeRobotDataset reads it back."""
    root = tmp_path / "dataset"
    libero = ["env:libero", "--env.mapping", mapping, "--env.render-size", str(RENDER_SIZE)]
    libero += ["--env.image-size", str(RENDER_SIZE), "--env.settle-steps", "1"]
    policy = ["policy:mock"]
    if mapping == "lerobot":
        policy += ["--policy.image-keys", *LEROBOT_KEYS[:2], "--policy.state-key", state]
        policy += ["--policy.image-shape", str(RENDER_SIZE), str(RENDER_SIZE), "3"]
        policy += ["--policy.state-dim", "8", "--policy.action-dim", "7"]
    options = ["--episodes", "1", "--episode-time-s", "0.2", "--record.dir", str(root)]
    options += ["--record.lerobot-python", LEROBOT_PYTHON, "--out", str(tmp_path / "out")]
    assert main(["eval", *libero, *policy, *options, "--no-progress"]) == 0

    info = json.loads((root / "meta" / "info.json").read_text())
    features = info["features"]
    assert info["total_frames"] == 4 and info["total_episodes"] == 1
    for key in images:
        assert features[key]["dtype"] == "image"
        assert features[key]["shape"] == [RENDER_SIZE, RENDER_SIZE, 3]
    assert features[state]["shape"] == [8] and features["action"]["shape"] == [7]
    assert not any("/" in key for key in features)
    done = subprocess.run(
        [LEROBOT_PYTHON, "-c", textwrap.dedent(READ_BACK), str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["num_frames"] == 4
    shapes = read["shapes"]
    assert all(shapes[key] == [3, RENDER_SIZE, RENDER_SIZE] for key in images)
    assert shapes[state] == [8] and shapes["action"] == [7]
    assert read["task"] == env.task and "bowl" in env.task  # the same suite's task 0
