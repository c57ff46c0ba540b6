"""Noise tickets refuse LeRobot configurations they cannot make reproducible.

The unit tests read LeRobot-like configs (plain namespaces) and need nothing else; the
worker tests run LeRobot 0.6.1 itself under $ARMORY_LEROBOT_PYTHON and are skipped
without it: a DDPM diffusion policy gives different chunks for the same observation
and the same ticket, so a ticket refuses it at start-up, naming the setting."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_lerobot_policy import TINY_DIFFUSION, make_obs

from armory.policies.lerobot import PYTHON_ENV_VAR, LeRobotPolicyConfig
from armory.policies.noise import NoiseConfig
from armory.policies.worker_policy import WorkerOptions
from armory.workers.backends.lerobot import ticket_blockers
from armory.workers.errors import WorkerStartError

PYTHON = os.environ.get(PYTHON_ENV_VAR, "")
needs_lerobot = pytest.mark.skipif(
    not PYTHON,
    reason=f"${PYTHON_ENV_VAR} is not set: build LeRobot's environment with "
    "scripts/lerobot-env.sh (scripts/test.sh sets it)",
)


def config(policy_type: str, **fields: Any) -> SimpleNamespace:
    return SimpleNamespace(type=policy_type, **fields)


def test_ddpm_diffusion_is_refused_naming_the_setting() -> None:
    """DDPM (LeRobot's default for diffusion) adds noise at every step: refused, naming
    noise_scheduler_type and the value that works; DDIM passes."""
    (reason,) = ticket_blockers(config("diffusion", noise_scheduler_type="DDPM"))
    assert "noise_scheduler_type 'DDPM'" in reason and "'DDIM'" in reason
    assert ticket_blockers(config("diffusion", noise_scheduler_type="DDIM")) == []


def test_a_compiled_model_is_refused() -> None:
    """A compiled flow policy is refused, naming compile_model; uncompiled passes."""
    (reason,) = ticket_blockers(config("pi05", compile_model=True))
    assert "compile_model" in reason
    assert ticket_blockers(config("pi05", compile_model=False)) == []
    assert ticket_blockers(config("act")) == []


def diffusion(scheduler: str, noise: NoiseConfig) -> LeRobotPolicyConfig:
    """A tiny random-weights diffusion policy with the given sampler and noise."""
    return LeRobotPolicyConfig(
        type="diffusion",
        random_weights=True,
        overrides=json.dumps({**TINY_DIFFUSION, "noise_scheduler_type": scheduler}),
        noise=noise,
        python=PYTHON,
        worker=WorkerOptions(start_timeout_s=300.0),
    )


@needs_lerobot
def test_a_ticket_refuses_ddpm_diffusion_at_start_up() -> None:
    """DDPM diffusion without a ticket serves, and the same observation twice differs
    (why a ticket cannot pin it); with a ticket it does not start, and the error names
    the setting to change."""
    policy = diffusion("DDPM", NoiseConfig()).make()
    try:
        obs = make_obs(policy, 0)
        first, again = (policy.infer_batch([obs])[0] for _ in range(2))
        assert np.abs(first - again).max() > 1e-3
    finally:
        policy.close()
    with pytest.raises(WorkerStartError, match="noise_scheduler_type 'DDPM'"):
        diffusion("DDPM", NoiseConfig(seed=3)).make()
