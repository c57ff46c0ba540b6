"""The VLAs of LeRobot 0.6.1 (SmolVLA, pi0, pi0.5, GR00T N1.7) served offline with random weights at
a reduced size.

The backbone is built locally (``--policy.backbone tiny``: a tokenizer trained here and
a reduced config of the real architecture), nothing comes from the hub (the worker runs
with HF_HUB_OFFLINE=1). With a noise ticket, the same batch gives bit-identical chunks in
two workers, and a robot's chunk alone equals its chunk inside a batch of 4 within
float32 tolerance (rtol 1e-4, atol 1e-5; the observed gap is under 1e-6, from padding
the prompts to the batch's longest). Needs LeRobot's environment with the smolvla, pi and
groot extras ($ARMORY_LEROBOT_PYTHON)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tyro
from server_harness import running_server
from test_lerobot_policy import FAST_WATCHDOG, PYTHON, make_obs, needs_lerobot

from armory.cli import Command, Serve
from armory.policies.lerobot import LeRobotPolicyConfig
from armory.policies.noise import NoiseConfig, make_noise
from armory.policies.worker_policy import WorkerPolicy
from armory.workers.backends.lerobot import local_backbone

ROOT = Path(__file__).resolve().parents[1]
OPENPI_PYTHON = ROOT / ".venv-openpi" / "bin" / "python"
CHUNK = {"chunk_size": 10, "n_action_steps": 10}
TINY: dict[str, tuple[int, dict[str, Any]]] = {
    "smolvla": (64, {**CHUNK, "num_steps": 4}),
    "pi05": (56, {**CHUNK, "num_inference_steps": 4}),
    "pi0": (56, {**CHUNK, "num_inference_steps": 4}),
    "groot": (64, {**CHUNK, "num_inference_timesteps": 4}),
}
"""Per type: the camera side the tiny backbone takes, and a 10-action chunk in 4
denoising steps (the backbone's size comes from --policy.backbone)."""
TICKET_SHAPES = {"smolvla": (10, 32), "pi05": (10, 32), "pi0": (10, 32), "groot": (16, 132)}
"""Per type: the model's own noise shape; GR00T denoises its action head's whole 16-step
horizon over N1.7's 132 action slots, and serves the chunk's first 10 rows."""
EXTRAS = {
    "smolvla": "transformers, num2words, tokenizers",
    "pi05": "transformers, tokenizers, scipy",
    "pi0": "transformers, tokenizers, scipy",
    "groot": "transformers, tokenizers, diffusers, peft, tree",
}
"""Per type: the modules its LeRobot extra installs."""


def serve_args(policy_type: str) -> list[str]:
    """An `armory serve` command line for the tiny ``policy_type`` with noise seed 5."""
    side, overrides = TINY[policy_type]
    return [
        *("serve", "--port", "0", "policy:lerobot", "--policy.type", policy_type),
        *("--policy.random-weights", "--policy.backbone", "tiny"),
        *("--policy.image-size", str(side), str(side)),
        *("--policy.overrides", json.dumps(overrides), "--policy.noise.seed", "5"),
        *("--policy.python", PYTHON, "--policy.worker.start-timeout-s", "300"),
        *("--policy.cpu-threads", "1"),
    ]


def vla_config(policy_type: str) -> LeRobotPolicyConfig:
    """What ``armory serve`` makes of serve_args(policy_type)."""
    side, overrides = TINY[policy_type]
    return LeRobotPolicyConfig(
        type=policy_type,
        random_weights=True,
        backbone="tiny",
        image_size=(side, side),
        overrides=json.dumps(overrides),
        noise=NoiseConfig(seed=5),
        python=PYTHON,
        worker=FAST_WATCHDOG,
        cpu_threads=1,
    )


def has_vla_extras(policy_type: str) -> bool:
    """Whether LeRobot's environment has ``policy_type``'s extra."""
    probe = subprocess.run(
        [PYTHON, "-c", f"import {EXTRAS[policy_type]}"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.fixture(scope="module", params=sorted(TINY))
def vla(request: pytest.FixtureRequest) -> Iterator[WorkerPolicy]:
    """One tiny worker per VLA type, for the module; always stopped."""
    if not PYTHON:
        pytest.skip("$ARMORY_LEROBOT_PYTHON is not set (scripts/lerobot-env.sh)")
    if not has_vla_extras(request.param):
        pytest.skip(
            f"LeRobot's environment lacks the modules of {request.param} ({EXTRAS[request.param]}):"
            " rebuild scripts/lerobot-env.sh"
        )
    policy = vla_config(request.param).make()
    try:
        yield policy
    finally:
        policy.close()


def type_of(policy: WorkerPolicy) -> str:
    return str(policy.metadata.extra["lerobot_type"])


def batch_of(policy: WorkerPolicy, seeds: range) -> list[dict[str, Any]]:
    """Robots with different images, states and prompts of different lengths."""
    return [make_obs(policy, seed, task="pick up the cube " * (1 + seed % 3)) for seed in seeds]


@needs_lerobot
def test_vla_declares_its_inputs_and_the_ticket(vla: WorkerPolicy) -> None:
    """Two cameras, a 6-float state and an optional task; (10, 6) chunks; the ticket is
    the model's own noise shape (chunk_size or the action head's horizon, max_action_dim)."""
    meta = vla.metadata
    side = TINY[type_of(vla)][0]
    assert meta.name == f"lerobot-{type_of(vla)}"
    assert (meta.action_horizon, meta.action_dim) == (10, 6)
    inputs = {key: (spec.dtype, spec.shape, spec.required) for key, spec in meta.inputs.items()}
    assert inputs == {
        "observation.images.front": ("uint8", (side, side, 3), True),
        "observation.images.wrist": ("uint8", (side, side, 3), True),
        "observation.state": ("float32", (6,), True),
        "task": ("str", (), False),
    }
    ticket = make_noise(NoiseConfig(seed=5), TICKET_SHAPES[type_of(vla)])
    assert ticket is not None and meta.noise_sha256 == ticket.sha256


@needs_lerobot
def test_vla_batch_of_4_equals_each_robot_alone(vla: WorkerPolicy) -> None:
    """Batching robots with different prompts changes no chunk beyond float32 tolerance,
    and robots get chunks that differ by more than ten times that tolerance."""
    observations = batch_of(vla, range(4))
    batched = np.stack(vla.infer_batch(observations))
    alone = np.stack([vla.infer_batch([obs])[0] for obs in observations])
    np.testing.assert_allclose(batched, alone, rtol=1e-4, atol=1e-5)
    assert np.ptp(batched, axis=0).max() > 1e-4


@needs_lerobot
def test_vla_same_ticket_is_bit_identical_across_workers(vla: WorkerPolicy) -> None:
    """A second worker from the same options (same seeded weights, same ticket) answers
    the same batch, and each robot alone, with bit-identical chunks; the first worker
    repeats itself bit for bit."""
    observations = batch_of(vla, range(10, 14))
    first = np.stack(vla.infer_batch(observations))
    np.testing.assert_array_equal(first, np.stack(vla.infer_batch(observations)))
    other = vla_config(type_of(vla)).make()
    try:
        np.testing.assert_array_equal(first, np.stack(other.infer_batch(observations)))
        for obs in observations[:2]:
            np.testing.assert_array_equal(vla.infer_batch([obs])[0], other.infer_batch([obs])[0])
    finally:
        other.close()


_OPENPI_SCRIPT = """
import json, sys
import numpy as np
from openpi_client import websocket_client_policy

with np.load(sys.argv[2], allow_pickle=False) as arrays:
    obs = {key: arrays[key] for key in arrays.files}
obs["task"] = sys.argv[3]
policy = websocket_client_policy.WebsocketClientPolicy(host="127.0.0.1", port=int(sys.argv[1]))
metadata = policy.get_server_metadata()
reply = policy.infer(obs)
print(json.dumps({"noise_sha256": metadata.get("noise_sha256"),
                  "actions": reply["actions"].tolist()}))
"""


@needs_lerobot
def test_armory_serve_vla_answers_the_unmodified_openpi_client(
    vla: WorkerPolicy, tmp_path: Path
) -> None:
    """`armory serve ... policy:lerobot --policy.type <type> --policy.backbone tiny`
    parses to the module's configuration; served, PyPI's openpi-client (numpy<2, a
    float64 state) gets the chunk the policy gives that observation alone, bit for bit,
    and the ticket's SHA-256."""
    if not OPENPI_PYTHON.exists():
        pytest.skip(".venv-openpi is missing (scripts/test.sh creates it)")
    command = tyro.cli(Command, args=serve_args(type_of(vla)))  # type: ignore[call-overload]
    assert isinstance(command, Serve) and command.policy == vla_config(type_of(vla))
    obs = make_obs(vla, 99, task="pick up the cube")
    arrays = {key: value for key, value in obs.items() if key != "task"}
    arrays["observation.state"] = arrays["observation.state"].astype(np.float64)
    np.savez(tmp_path / "obs.npz", **arrays)
    expected = vla.infer_batch([obs])[0]
    with running_server(vla) as server:
        done = subprocess.run(
            [
                str(OPENPI_PYTHON),
                "-c",
                _OPENPI_SCRIPT,
                str(server.port),
                str(tmp_path / "obs.npz"),
                obs["task"],
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    assert reply["noise_sha256"] == vla.metadata.noise_sha256
    np.testing.assert_array_equal(np.asarray(reply["actions"], dtype=np.float32), expected)


# ---- refusals that need no LeRobot environment -------------------------------------------


def test_a_backbone_for_a_type_without_one_is_refused(tmp_path: Path) -> None:
    """Only types with a local backbone take --policy.backbone; the error lists them."""
    refused = r"no local backbone for LeRobot type 'act'; types with one: groot, pi0, pi05, smolvla"
    with pytest.raises(ValueError, match=refused), local_backbone("act", "tiny", tmp_path):
        pass


def test_backbone_options_are_checked_when_parsed() -> None:
    """An unknown backbone size, a backbone with a checkpoint path or for a type without
    one, and no CPU threads, are refused when the options are parsed, naming the option."""
    with pytest.raises(ValueError, match=r"--policy\.backbone 'huge' is not a size"):
        LeRobotPolicyConfig(type="pi05", random_weights=True, backbone="huge")
    with pytest.raises(ValueError, match=r"add --policy\.type"):
        LeRobotPolicyConfig(path=Path("/ckpt"), backbone="tiny")
    with pytest.raises(ValueError, match=r"no local backbone for --policy\.type act; types"):
        LeRobotPolicyConfig(type="act", random_weights=True, backbone="tiny")
    with pytest.raises(ValueError, match=r"--policy\.cpu-threads must be >= 1, got 0"):
        LeRobotPolicyConfig(type="pi05", random_weights=True, cpu_threads=0)


_FIXED_NOISE_SCRIPT = """
import torch
from armory.workers.backends.reduced_groot import FixedNoise

tile = torch.arange(6.0).reshape(2, 3)
with FixedNoise(tile) as fixed:
    keyword = torch.randn(size=(4, 2, 3), dtype=torch.float64)
    positional = torch.randn((1, 2, 3))
    other_shape = torch.randn(2, 3)
    vector = torch.randn(5)
assert fixed.used == 2, fixed.used
assert keyword.dtype == torch.float64 and keyword.shape == (4, 2, 3)
assert all(torch.equal(sample, tile.double()) for sample in keyword)
assert torch.equal(positional[0], tile)
assert other_shape.shape == (2, 3) and not torch.equal(other_shape, tile)
assert vector.shape == (5,)
print("ok")
"""


@needs_lerobot
def test_fixed_noise_answers_only_the_draw_of_its_shape() -> None:
    """GR00T's fixed noise: a draw of shape (batch, *tile) gets the tile for every sample
    (in the dtype asked), counted once per draw; draws of any other shape stay random."""
    assert_script_ok(_FIXED_NOISE_SCRIPT, timeout_s=120)


def assert_script_ok(script: str, *, timeout_s: float) -> None:
    """Run ``script`` in LeRobot's environment (Armory's source on its path, the hub
    offline); it must print ``ok`` and exit 0."""
    done = subprocess.run(
        [PYTHON, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
