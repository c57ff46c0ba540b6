"""policy:lerobot: real LeRobot 0.6.1 models (tiny, random weights, CPU) in a worker under
LeRobot's own interpreter ($ARMORY_LEROBOT_PYTHON, set by scripts/test.sh).

Batching must change nothing: a robot's chunk from a batch of 8 equals its chunk served
alone. Nothing is downloaded (ACT's resnet18 gets no pretrained weights)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_workers import serve_robots

from armory.policies.lerobot import PYTHON_ENV_VAR, LeRobotPolicyConfig
from armory.policies.noise import NoiseConfig, make_noise
from armory.policies.worker_policy import WorkerOptions, WorkerPolicy
from armory.workers.errors import WorkerStartError

PYTHON = os.environ.get(PYTHON_ENV_VAR, "")
needs_lerobot = pytest.mark.skipif(
    not PYTHON,
    reason=f"${PYTHON_ENV_VAR} is not set: build LeRobot's environment with "
    "scripts/lerobot-env.sh (scripts/test.sh sets it)",
)
SRC = Path(__file__).resolve().parents[1] / "src"

TINY_ACT = {
    "dim_model": 64,
    "n_heads": 2,
    "dim_feedforward": 128,
    "n_encoder_layers": 1,
    "n_decoder_layers": 1,
    "chunk_size": 10,
    "n_action_steps": 10,
    "use_vae": False,
}
TINY_DIFFUSION = {
    "n_obs_steps": 2,
    "horizon": 8,
    "n_action_steps": 4,
    "down_dims": [32, 64],
    "diffusion_step_embed_dim": 32,
    "spatial_softmax_num_keypoints": 8,
    "crop_shape": [80, 80],
    "num_inference_steps": 4,
    "noise_scheduler_type": "DDIM",
}
FAST_WATCHDOG = WorkerOptions(start_timeout_s=300.0)


def act_config(**overrides: Any) -> LeRobotPolicyConfig:
    """A tiny ACT with random weights: two 96x96 cameras, 6-dim state and actions."""
    options: dict[str, Any] = {
        "type": "act",
        "random_weights": True,
        "overrides": json.dumps(TINY_ACT),
        "python": PYTHON,
        "worker": FAST_WATCHDOG,
    }
    options.update(overrides)
    return LeRobotPolicyConfig(**options)


@pytest.fixture(scope="module")
def act() -> Iterator[WorkerPolicy]:
    """One ACT worker for the module; always stopped."""
    if not PYTHON:
        pytest.skip(f"${PYTHON_ENV_VAR} is not set (scripts/lerobot-env.sh)")
    policy = act_config().make()
    try:
        yield policy
    finally:
        policy.close()


def make_obs(policy: WorkerPolicy, seed: int, task: str = "pick the cube") -> dict[str, Any]:
    """Random inputs of the policy's declared shapes (uint8 images as robots send them)."""
    rng = np.random.default_rng(seed)
    obs: dict[str, Any] = {}
    for key, spec in policy.metadata.inputs.items():
        if spec.is_text:
            obs[key] = task
        elif spec.dtype == "uint8":
            obs[key] = rng.integers(0, 256, spec.shape, dtype=np.uint8)  # type: ignore[arg-type]
        else:
            obs[key] = rng.standard_normal(spec.shape).astype(np.float32)  # type: ignore[arg-type]
    return obs


def assert_batching_changes_nothing(policy: WorkerPolicy, num_robots: int = 8) -> np.ndarray:
    """Each robot's chunk from one batch equals its chunk served alone; returns the batch."""
    observations = [make_obs(policy, seed, task=f"task {seed}") for seed in range(num_robots)]
    batched = np.stack(policy.infer_batch(observations))
    alone = np.stack([policy.infer_batch([obs])[0] for obs in observations])
    meta = policy.metadata
    assert batched.shape == (num_robots, meta.action_horizon, meta.action_dim)
    np.testing.assert_allclose(batched, alone, rtol=1e-4, atol=1e-5)
    assert np.ptp(batched, axis=0).max() > 1e-3  # robots get different chunks
    return batched


# ---- ACT -----------------------------------------------------------------------------------


@needs_lerobot
def test_act_declares_lerobot_feature_names(act: WorkerPolicy) -> None:
    """Inputs are the policy's input_features under their LeRobot names, images as HxWxC
    uint8, plus an optional task; the chunk is (chunk_size, action_dim)."""
    meta = act.metadata
    assert meta.name == "lerobot-act"
    assert (meta.action_horizon, meta.action_dim) == (10, 6)
    inputs = {key: (spec.dtype, spec.shape, spec.required) for key, spec in meta.inputs.items()}
    assert inputs == {
        "observation.images.front": ("uint8", (96, 96, 3), True),
        "observation.images.wrist": ("uint8", (96, 96, 3), True),
        "observation.state": ("float32", (6,), True),
        "task": ("str", (), False),
    }
    assert meta.latency_points is not None and meta.latency_points[1] > 0
    assert meta.noise_sha256 is None
    assert meta.extra["lerobot_type"] == "act"
    assert "lerobot_checkpoint" not in meta.extra  # built from scratch: no checkpoint


@needs_lerobot
def test_act_batch_of_8_equals_each_robot_alone(act: WorkerPolicy) -> None:
    """ACT through the worker: batching changes no robot's chunk."""
    assert_batching_changes_nothing(act)


@needs_lerobot
def test_act_serves_four_robots_through_the_server(act: WorkerPolicy) -> None:
    """Four openpi clients at once: each gets the chunk its observation gets alone."""
    observations = [make_obs(act, 50 + robot) for robot in range(4)]
    expected = [act.infer_batch([obs])[0] for obs in observations]
    replies = serve_robots(act, [[obs] for obs in observations])
    for index in range(4):
        np.testing.assert_allclose(replies[index][0], expected[index], rtol=1e-4, atol=1e-5)


@needs_lerobot
def test_killed_act_worker_comes_back_with_the_same_model(act: WorkerPolicy) -> None:
    """After SIGKILL the worker is restarted with the same (seeded) weights: the next batch
    is served and equals what the first worker answered."""
    obs = make_obs(act, 7)
    before = act.infer_batch([obs])[0]
    first_pid = act.pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    process = act._process
    assert process is not None
    deadline = time.monotonic() + 5
    while process.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    after = act.infer_batch([obs])[0]
    assert act.pid != first_pid
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)


@needs_lerobot
def test_act_checkpoint_from_save_pretrained(act: WorkerPolicy, tmp_path: Path) -> None:
    """A checkpoint written by LeRobot's save_pretrained serves through --policy.path,
    declares its folder and answers like the seeded model it was saved from; a broken
    one fails make() saying why."""
    checkpoint = tmp_path / "act"
    script = (
        "import json, sys\n"
        "from armory.workers.backends.lerobot import make_backend\n"
        "backend = make_backend(json.loads(sys.argv[1]))\n"
        "backend.policy.save_pretrained(sys.argv[2])\n"
    )
    options = {"type": "act", "overrides": TINY_ACT}
    subprocess.run(
        [PYTHON, "-c", script, json.dumps(options), str(checkpoint)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=True,
        capture_output=True,
    )
    assert {"config.json", "model.safetensors"} <= {p.name for p in checkpoint.iterdir()}
    policy = LeRobotPolicyConfig(path=checkpoint, python=PYTHON, worker=FAST_WATCHDOG).make()
    try:
        # What the LeRobot door compares a robot's pretrained_name_or_path with.
        assert policy.metadata.extra["lerobot_checkpoint"] == str(checkpoint.resolve())
        obs = make_obs(act, 3)
        np.testing.assert_allclose(
            policy.infer_batch([obs])[0], act.infer_batch([obs])[0], rtol=1e-4, atol=1e-5
        )
    finally:
        policy.close()
    (checkpoint / "config.json").write_text('{"type": "no-such-policy"}')
    with pytest.raises(WorkerStartError, match="could not start: cannot build the 'lerobot'"):
        LeRobotPolicyConfig(path=checkpoint, python=PYTHON, worker=FAST_WATCHDOG).make()


# ---- a diffusion policy with fixed noise ---------------------------------------------------


def _has_diffusers() -> bool:
    if not PYTHON:
        return False
    probe = subprocess.run([PYTHON, "-c", "import diffusers"], capture_output=True, check=False)
    return probe.returncode == 0


@needs_lerobot
def test_diffusion_with_fixed_noise_batch_of_8_equals_each_robot_alone() -> None:
    """Diffusion (DDIM, 2-step history, random weights) with a noise seed: the same tile
    for every sample, so batching changes nothing; the metadata names the ticket."""
    if not _has_diffusers():
        pytest.skip(
            "LeRobot's environment lacks diffusers (lerobot[diffusion]): add it to "
            "envs/lerobot/requirements.txt and rebuild with scripts/lerobot-env.sh"
        )
    noise = NoiseConfig(seed=11)
    config = LeRobotPolicyConfig(
        type="diffusion",
        random_weights=True,
        overrides=json.dumps(TINY_DIFFUSION),
        python=PYTHON,
        noise=noise,
        worker=FAST_WATCHDOG,
    )
    policy = config.make()
    try:
        ticket = make_noise(noise, (8, 6))  # (horizon, action_dim)
        assert ticket is not None
        assert policy.metadata.noise_sha256 == ticket.sha256
        assert (policy.metadata.action_horizon, policy.metadata.action_dim) == (4, 6)
        first = assert_batching_changes_nothing(policy)
        again = np.stack(policy.infer_batch([make_obs(policy, s, f"task {s}") for s in range(8)]))
        np.testing.assert_array_equal(first, again)  # fixed noise: the same chunks again
    finally:
        policy.close()


# ---- start-up failures that need no LeRobot environment ------------------------------------


def test_missing_lerobot_package_says_how_to_get_it() -> None:
    """Under an interpreter without lerobot (the server's own), make() fails naming the
    missing package and scripts/lerobot-env.sh."""
    config = act_config(python=sys.executable)
    with pytest.raises(WorkerStartError) as info:
        config.make()
    text = str(info.value)
    assert "is not installed for" in text and "scripts/lerobot-env.sh" in text


def test_path_without_config_json_fails_before_any_worker(tmp_path: Path) -> None:
    """A directory that is no checkpoint is refused by make() at once."""
    with pytest.raises(ValueError, match="is not a LeRobot checkpoint"):
        LeRobotPolicyConfig(path=tmp_path, python=sys.executable).make()


def test_config_checks_name_the_bad_option() -> None:
    """Path and type are exclusive; a type needs --policy.random-weights; overrides are JSON."""
    with pytest.raises(ValueError, match="exactly one of"):
        LeRobotPolicyConfig()
    with pytest.raises(ValueError, match="random-weights"):
        LeRobotPolicyConfig(type="act")
    with pytest.raises(ValueError, match="not JSON"):
        LeRobotPolicyConfig(type="act", random_weights=True, overrides="{")
