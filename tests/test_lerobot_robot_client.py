"""LeRobot's own, unmodified RobotClient (lerobot 0.6.1, Python 3.12, its own venv) drives
a mock robot against Armory's LeRobot door and executes the mock policy's actions."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from server_harness import FAST_LINEAR, LeRobotCheckpointMock

from armory.engine.config import ServerConfig
from armory.engine.server_engine import EngineStats
from armory.policies.mock import MockPolicyConfig
from armory.serve import ArmoryServer, ServerThread
from armory.transports.lerobot_grpc import LeRobotDoorConfig

SCRIPT = Path(__file__).resolve().parent / "lerobot_client" / "run_robot_client.py"
LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON")


needs_lerobot = pytest.mark.skipif(
    not LEROBOT_PYTHON,
    reason="ARMORY_LEROBOT_PYTHON is unset: build the env with scripts/lerobot-env.sh",
)


CHECKPOINT = "/srv/checkpoints/user/act_cube"


def _run_robot_client(
    tmp_path: Path,
    seconds: float,
    *,
    action_dim: int = 7,
    checkpoint: str | None = None,
    client_args: tuple[str, ...] = (),
    **door_options: Any,
) -> tuple[subprocess.CompletedProcess[str], EngineStats]:
    """LeRobot's RobotClient (``client_args`` added to its command line) for ``seconds``
    against a server whose only door is the LeRobot one (pickle on, key ``fleet-key``,
    ``door_options``) and a mock policy for 7 joints with ``action_dim`` values per
    action (declaring itself LeRobot's act from ``CHECKPOINT`` if ``checkpoint``); its
    output and the engine's counters."""
    config = MockPolicyConfig(
        latency_profile="linear", linear=FAST_LINEAR, state_dim=7, action_dim=action_dim
    )
    policy = LeRobotCheckpointMock(config, CHECKPOINT) if checkpoint else config.make()
    door = LeRobotDoorConfig(port=0, allow_unsafe_pickle_on_untrusted_networks=True, **door_options)
    server = ArmoryServer(
        policy,
        ServerConfig(max_batch_size=4),
        port=None,
        doors=[door.door("127.0.0.1", api_key="fleet-key")],
    )
    with ServerThread(server) as thread:
        port = server.doors[0].port  # type: ignore[attr-defined]
        try:
            out = subprocess.run(
                [
                    str(LEROBOT_PYTHON),
                    str(SCRIPT),
                    "--server",
                    f"127.0.0.1:{port}",
                    "--seconds",
                    str(seconds),
                    "--calibration-dir",
                    str(tmp_path / "calibration"),
                    *client_args,
                ],
                capture_output=True,
                text=True,
                timeout=180,
                cwd=tmp_path,
            )
        except subprocess.TimeoutExpired as exc:  # run() killed the child
            pytest.fail(f"RobotClient did not finish: {exc}")
        return out, thread.stats()


@needs_lerobot
def test_unmodified_lerobot_robot_client_runs_against_armory(tmp_path: Path) -> None:
    """The client's handshake and instructions go through, its observations are served
    in batches, and the robot executes actions: 7 joint values per action. The server
    has an API key, which the client cannot send: its address is allowlisted."""
    out, stats = _run_robot_client(tmp_path, 4, allowed_networks=("127.0.0.1/32",))
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["started"] is True
    assert summary["num_observations"] > 10
    assert len(summary["actions"]) > 30, summary["num_observations"]
    assert all(len(action) == 7 for action in summary["actions"])
    assert stats.num_errors == 0, stats.errors_by_door  # the kinds, should one ever come
    assert stats.num_replies >= 3


@needs_lerobot
def test_unmodified_lerobot_robot_client_is_refused_without_key_or_allowlist(
    tmp_path: Path,
) -> None:
    """With a key set and the robot's address not allowlisted, its handshake fails and
    the server opens no session for it."""
    out, stats = _run_robot_client(tmp_path, 1, allowed_networks=("10.0.0.0/8",))
    assert out.returncode == 1, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["started"] is False
    assert "StatusCode.UNAUTHENTICATED" in out.stderr
    assert stats.num_sessions == 0 and stats.num_replies == 0


@needs_lerobot
def test_unmodified_lerobot_robot_client_is_told_when_actions_are_too_short(
    tmp_path: Path,
) -> None:
    """A policy with 6 values per action for the robot's 7 joints: the client's
    SendPolicyInstructions fails with the reason, before any observation, instead of an
    IndexError in its control loop later."""
    out, stats = _run_robot_client(tmp_path, 1, action_dim=6, allowed_networks=("127.0.0.1/32",))
    assert out.returncode == 1, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["started"] is False
    assert "actions of 6 values but the robot has 7 joints" in out.stderr
    assert "IndexError" not in out.stderr
    assert stats.num_replies == 0


@needs_lerobot
def test_unmodified_lerobot_robot_client_asking_for_another_checkpoint_is_refused(
    tmp_path: Path,
) -> None:
    """The robot asks for pretrained_name_or_path 'armory/mock' from a server of the
    checkpoint /srv/checkpoints/user/act_cube: its SendPolicyInstructions fails naming
    what is served, before any observation; asking for 'user/act_cube' it runs."""
    allow = ("127.0.0.1/32",)
    out, stats = _run_robot_client(tmp_path, 1, checkpoint=CHECKPOINT, allowed_networks=allow)
    assert out.returncode == 1, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["started"] is False
    assert f"serves the LeRobot checkpoint {CHECKPOINT!r}" in out.stderr
    assert "not 'armory/mock'" in out.stderr
    assert stats.num_replies == 0
    named = ("--pretrained-name-or-path", "user/act_cube")
    out, stats = _run_robot_client(
        tmp_path, 2, checkpoint=CHECKPOINT, client_args=named, allowed_networks=allow
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["started"] is True
    assert stats.num_errors == 0 and stats.num_replies >= 1
