"""The policy:lerobot examples of docs/workers.md build and serve as written (LeRobot
0.6.1 under $ARMORY_LEROBOT_PYTHON; skipped without it)."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import tyro
from test_lerobot_policy import make_obs
from test_vla_lerobot import has_vla_extras

from armory.policies.lerobot import PYTHON_ENV_VAR, LeRobotPolicyConfig
from armory.policies.worker_policy import WorkerOptions

PYTHON = os.environ.get(PYTHON_ENV_VAR, "")
DOC = Path(__file__).resolve().parents[1] / "docs" / "workers.md"
PREFIX = "armory serve policy:lerobot "

pytestmark = pytest.mark.skipif(
    not PYTHON,
    reason=f"${PYTHON_ENV_VAR} is not set: build LeRobot's environment with "
    "scripts/lerobot-env.sh (scripts/test.sh sets it)",
)


def doc_commands() -> list[str]:
    """Every ``armory serve policy:lerobot`` command of the doc, continuation lines joined."""
    text = DOC.read_text(encoding="utf-8").replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip().startswith(PREFIX)]


def parse(command: str) -> LeRobotPolicyConfig:
    """The policy config a command line gives (its --policy.* options)."""
    args = [re.sub(r"^--policy\.", "--", arg) for arg in shlex.split(command[len(PREFIX) :])]
    return tyro.cli(LeRobotPolicyConfig, args=args)


def test_the_random_weights_act_example_serves() -> None:
    """The doc's random-weights ACT example builds and returns chunks of its chunk_size."""
    (command,) = [c for c in doc_commands() if "--policy.random-weights" in c and " act " in c]
    config = parse(command)
    config = dataclasses.replace(config, python=PYTHON, worker=WorkerOptions(start_timeout_s=300.0))
    policy = config.make()
    try:
        (chunk,) = policy.infer_batch([make_obs(policy, 0)])
        assert chunk.shape == (policy.metadata.action_horizon, config.action_dim)
        assert np.isfinite(chunk).all()
    finally:
        policy.close()


def test_the_offline_vla_example_serves() -> None:
    """The doc's pi0.5 example with a locally built tiny backbone builds offline and
    returns chunks of its chunk_size."""
    if not has_vla_extras("pi05"):
        pytest.skip("LeRobot's environment lacks lerobot[pi]: rebuild scripts/lerobot-env.sh")
    (command,) = [c for c in doc_commands() if "--policy.backbone" in c]
    config = parse(command)
    config = dataclasses.replace(config, python=PYTHON, worker=WorkerOptions(start_timeout_s=300.0))
    policy = config.make()
    try:
        (chunk,) = policy.infer_batch([make_obs(policy, 0)])
        assert chunk.shape == (10, config.action_dim)
        assert np.isfinite(chunk).all()
    finally:
        policy.close()
