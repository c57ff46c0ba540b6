"""env:aloha (gym-aloha): LeRobot's camera names, only declared cameras rendered, the
variation axes reaching the model, the served transfer-cube expert, and mapping
mismatches refused before start.

Every check runs in a fresh Python: MuJoCo picks its OpenGL platform once, at import,
and this test session may have imported it already without a headless one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("gym_aloha")

ROOT = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON", "")
TOP_CAMERA_MOCK = [
    *("policy:mock", "--policy.image-keys", "observation.images.top"),
    *("--policy.image-shape", "48", "64", "3", "--policy.state-key", "observation.state"),
    *("--policy.state-dim", "14", "--policy.action-dim", "14"),
]
"""A mock declaring ALOHA's state and its top camera at 48x64."""


def _python(code: str, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    paths = [str(ROOT / "src"), str(ROOT / "packages" / "armory-client" / "src")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )


def _eval(*argv: str) -> subprocess.CompletedProcess[str]:
    return _python("import sys\nfrom armory.cli import main\nsys.exit(main(sys.argv[1:]))", *argv)


ENV_CHECKS = """
    import json
    import numpy as np
    from armory.eval.aloha import AlohaConfig
    from armory.eval.mapping import MappingError
    from armory.eval.variation import Scenario, AxisValue

    out = {}
    env = AlohaConfig().make()
    renders = []
    render = env._physics.render
    env._physics.render = lambda **kw: renders.append(kw) or render(**kw)
    top = {"shape": [48, 64, 3], "dtype": "uint8"}
    env.declare_inputs({"observation.images.top": top, "observation.state": {}})
    values = {
        "camera.top.x": 0.05, "lighting.diffuse": 0.5, "lighting.headlight": 1.2,
        "object.offset_x": 0.02, "robot-base.left.y": -0.02, "robot-base.right.x": 0.01,
        "physics.damping": 0.3,
    }
    scenario = Scenario(
        seed=1, episode=0,
        values={k: AxisValue(value=v, source="scene")
                for k, v in values.items()},
    )
    reset = env.reset(seed=3, episode=0, scenario=scenario)
    out["not_applied"] = list(reset.not_applied)
    obs = env.observation()
    env.observation()
    out["keys"] = sorted(obs)
    out["top_shape"] = list(obs["observation.images.top"].shape)
    out["renders"] = [[r["camera_id"], r["height"], r["width"]] for r in renders]
    model = env._physics.model
    out["cam_x"] = float(model.cam_pos[model.name2id("top", "camera"), 0])
    out["light"] = float(model.light_diffuse[0, 0])
    out["left_base_y"] = float(model.body_pos[model.name2id("vx300s_left", "body"), 1])
    out["right_base_x"] = float(model.body_pos[model.name2id("vx300s_right", "body"), 0])
    plain = env.reset(seed=3, episode=1, scenario=Scenario(seed=1, episode=1))
    out["cube_shift"] = float(obs["privileged/state"][0] - env.observation()["privileged/state"][0])
    out["plain_light"] = float(model.light_diffuse[0, 0])
    env.declare_inputs({"observation.state": {}})
    out["no_camera_keys"] = sorted(env.observation())
    try:
        env.declare_inputs({"observation.images.cam_high": top})
    except MappingError as exc:
        out["error"] = str(exc)
    insertion = AlohaConfig(task_name="insertion").make()
    insertion.reset(seed=0, episode=0, scenario=Scenario(seed=0, episode=0))
    out["insertion_privileged"] = len(insertion.observation()["privileged/state"])
    print(json.dumps(out))
"""


def test_only_declared_cameras_render_and_variation_reaches_the_model() -> None:
    """A policy declaring the top camera at 48x64 gets it rendered once per step at that
    size and no other camera; each axis changes its model field; an axis ALOHA lacks is
    not applied; a camera the model lacks is an error naming the cameras it has."""
    done = _python(ENV_CHECKS)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["keys"] == [
        "observation.images.top",
        "observation.state",
        "privileged/episode",
        "privileged/state",
        "task",
    ]
    assert out["top_shape"] == [48, 64, 3]
    assert out["renders"] == [["top", 48, 64]]
    assert out["not_applied"] == ["physics.damping"]
    assert out["cam_x"] == pytest.approx(0.05)
    assert out["light"] == pytest.approx(0.15) and out["plain_light"] == pytest.approx(0.3)
    assert out["left_base_y"] == pytest.approx(0.48)
    assert out["right_base_x"] == pytest.approx(0.479, abs=1e-3)
    assert out["cube_shift"] == pytest.approx(0.02)
    assert "observation.images.top" not in out["no_camera_keys"]
    assert "'cam_high'" in out["error"] and "observation.images.angle" in out["error"]
    assert out["insertion_privileged"] == 20


def test_served_transfer_cube_expert_transfers_the_cube(tmp_path: Path) -> None:
    """policy:expert --policy.env aloha, served to one robot over the openpi door: the
    cube reaches the left gripper in the air, with every axis varied (the expert plans
    in a scene with the arm bases where the variation put them)."""
    out = tmp_path / "out"
    argv = ["eval", "env:aloha", "policy:expert", "--policy.env", "aloha", "--episodes", "1"]
    argv += ["--episode-time-s", "8", "--variation", "--variation.seed", "2"]
    done = _eval(*argv, "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    (episode,) = results["episodes"]
    assert results["run"]["policy"] == "expert-aloha"
    assert episode["success"], episode
    assert episode["scenario"]["not_applied"] == []
    assert len(episode["scenario"]["values"]) == 11


def test_two_robots_with_a_camera_policy_a_ticket_and_variation(tmp_path: Path) -> None:
    """Two robots, each rendering only the top camera at the mock's declared size, the
    mock's noise ticket on every episode, a few steps each (software rendering is slow)."""
    out = tmp_path / "out"
    policy = [*TOP_CAMERA_MOCK, "--policy.noise.seed", "4"]
    options = ["--robots", "2", "--episodes", "2", "--episode-time-s", "0.1", "--variation"]
    done = _eval("eval", "env:aloha", *policy, *options, "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    # Robots take episodes from one queue, so which robot runs which depends on the
    # machine's speed (a robot slow to start its renderer may run none).
    assert results["run"]["robots"] == 2 and len(results["episodes"]) == 2
    assert {e["robot"] for e in results["episodes"]} <= {"robot-0", "robot-1"}
    for episode in results["episodes"]:
        assert episode["num_steps"] == 5 and episode["num_request_errors"] == 0
        assert episode["ticket"]["served_sha256"] == [episode["ticket"]["sha256"]]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            ["--policy.image-keys", "observation.images.cam_high", "--policy.state-dim", "14"],
            "no camera 'cam_high'",
        ),
        (
            ["--policy.image-keys", "observation.images.top", "--policy.state-dim", "12"],
            "input 'observation.state': expected float32 (12), got float32 (14,)",
        ),
    ],
)
def test_a_mapping_mismatch_is_one_clear_error_before_start(
    tmp_path: Path, policy: list[str], expected: str
) -> None:
    """A camera ALOHA does not have, or a state of the wrong size: exit 2, one line."""
    argv = ["eval", "env:aloha", "policy:mock", "--policy.state-key", "observation.state"]
    argv += [*policy, "--policy.action-dim", "14", "--out", str(tmp_path / "out")]
    done = _eval(*argv)
    assert done.returncode == 2, done.stderr[-3000:]
    error = [line for line in done.stderr.splitlines() if line.startswith("armory: error")]
    assert len(error) == 1 and expected in error[0], done.stderr[-3000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(
    not (LEROBOT_PYTHON and Path(LEROBOT_PYTHON).exists()),
    reason="ARMORY_LEROBOT_PYTHON is unset or missing (build it with scripts/lerobot-env.sh)",
)
def test_recorded_episode_is_a_dataset_under_lerobots_aloha_names(tmp_path: Path) -> None:
    """--record.dir writes the ALOHA episode as LeRobot's ALOHA datasets name it: the top
    camera as an image feature at the declared size, 14-value state and action."""
    root = tmp_path / "dataset"
    policy = TOP_CAMERA_MOCK
    options = ["--episodes", "1", "--episode-time-s", "0.1", "--record.dir", str(root)]
    options += ["--record.lerobot-python", LEROBOT_PYTHON, "--out", str(tmp_path / "out")]
    done = _eval("eval", "env:aloha", *policy, *options, "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((root / "meta" / "info.json").read_text())
    features = info["features"]
    assert info["total_frames"] == 5
    assert features["observation.images.top"]["dtype"] == "image"
    assert features["observation.images.top"]["shape"] == [48, 64, 3]
    assert features["observation.state"]["shape"] == [14] == features["action"]["shape"]
