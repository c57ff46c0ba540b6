"""LeRobot's own, unmodified RobotClient (lerobot 0.6.1, Python 3.12, its own venv) drives
a mock robot against Armory's LeRobot door and executes the mock policy's actions."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from server_harness import FAST_LINEAR

from armory.engine.config import ServerConfig
from armory.policies.mock import MockPolicyConfig
from armory.serve import ArmoryServer, ServerThread
from armory.transports.lerobot_grpc import LeRobotDoorConfig

SCRIPT = Path(__file__).resolve().parent / "lerobot_client" / "run_robot_client.py"
LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON")


@pytest.mark.skipif(
    not LEROBOT_PYTHON,
    reason="ARMORY_LEROBOT_PYTHON is unset: build the env with scripts/lerobot-env.sh",
)
def test_unmodified_lerobot_robot_client_runs_against_armory(tmp_path: Path) -> None:
    """The client's handshake and instructions go through, its observations are served
    in batches, and the robot executes actions: 7 joint values per action."""
    policy = MockPolicyConfig(latency_profile="linear", linear=FAST_LINEAR, state_dim=7).make()
    door = LeRobotDoorConfig(port=0, allow_unsafe_pickle_on_untrusted_networks=True)
    server = ArmoryServer(
        policy, ServerConfig(max_batch_size=4), port=None, doors=[door.door("127.0.0.1")]
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
                    "4",
                    "--calibration-dir",
                    str(tmp_path / "calibration"),
                ],
                capture_output=True,
                text=True,
                timeout=180,
                cwd=tmp_path,
            )
        except subprocess.TimeoutExpired as exc:  # run() killed the child
            pytest.fail(f"RobotClient did not finish: {exc}")
        stats = thread.stats()
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["started"] is True
    assert summary["num_observations"] > 10
    assert len(summary["actions"]) > 30, summary["num_observations"]
    assert all(len(action) == 7 for action in summary["actions"])
    assert stats.num_errors == 0 and stats.num_replies >= 3
