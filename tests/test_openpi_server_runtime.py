"""The armory-client robot runtime against the real server: a mixed-rate fleet end to end."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from armory_client import AsyncPolicyClient
from armory_client.runtime import RobotRuntime, RuntimeConfig
from server_harness import RecordingRobot, make_mock, run_runtimes, running_server

RATES_HZ = [10.0, 20.0, 30.0, 15.0, 20.0, 30.0, 25.0, 40.0]


@pytest.mark.parametrize("mode", ["directed", "threshold"])
def test_runtime_fleet_within_capacity_does_not_starve(mode: str) -> None:
    """8 runtimes at 10-40 Hz in directed or threshold mode: no errors, (almost) no
    starved ticks, and the server batches their requests."""
    with running_server(make_mock(), max_batch_size=4) as server:
        summaries = run_runtimes(
            server.port,
            [
                RuntimeConfig(
                    robot_id=f"robot-{i}",
                    control_hz=hz,
                    max_execution_horizon=8,
                    min_execution_horizon=2,
                    request_mode=mode,
                    duration_s=1.5,
                )
                for i, hz in enumerate(RATES_HZ)
            ],
        )
        stats = server.stats()
    for summary in summaries:
        assert summary.num_request_errors == 0
        assert summary.num_chunks_applied >= 2
        assert summary.starvation < 0.1, summary
    assert stats.num_errors == 0
    assert stats.mean_batch_size > 1.0


class CameraRobot(RecordingRobot):
    """Sends 480x640 camera frames, which the runtime resizes and JPEG-encodes."""

    def get_observation(self) -> dict[str, Any]:
        obs = super().get_observation()
        rng = np.random.default_rng(self.step)
        for key in ("observation/image", "observation/wrist_image"):
            obs[key] = rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8)
        return obs


def test_runtime_sending_jpeg_images_is_served() -> None:
    """A runtime with jpeg_quality prepares 480x640 frames to the declared 224x224 and
    sends them as JPEG: served without errors, far fewer bytes than raw."""
    pytest.importorskip("PIL")
    with running_server(make_mock(), max_batch_size=2) as server:
        runtime = RobotRuntime(
            CameraRobot(0),
            AsyncPolicyClient("127.0.0.1", server.port),
            RuntimeConfig(
                robot_id="jpeg-robot",
                control_hz=20.0,
                max_execution_horizon=8,
                min_execution_horizon=2,
                request_mode="threshold",
                duration_s=1.0,
                jpeg_quality=80,
            ),
        )
        summary = asyncio.run(runtime.run())
        stats = server.stats()
    assert summary.num_request_errors == 0 and stats.num_errors == 0
    assert summary.num_chunks_applied >= 2
    raw_bytes = 2 * 224 * 224 * 3
    assert summary.bytes_sent / summary.num_requests < raw_bytes / 2
