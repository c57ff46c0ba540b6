"""Robot runtimes against the mock server through a loopback link with delay and jitter.

Below capacity a robot never starves once its first chunk landed; with real-time
chunking (``rtc``) the trajectory it executes has no jump larger than the mock
policy's own step-to-step change, where the ``replace`` rule shows the seams.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from armory_client import AsyncPolicyClient
from armory_client.runtime import RobotRuntime, RuntimeConfig
from armory_client.runtime_stats import RuntimeSummary
from server_harness import RecordingRobot, make_mock, running_server

from armory.fleet.delay_proxy import DelayProxy
from armory.fleet_spec import DelaySpec
from armory.policies.mock import MOCK_MAX_STEP

LINK = DelaySpec(median_s=0.02, jitter_s=0.01)
"""Each way: 10 to 30 ms, drawn per piece of data."""
RATES_HZ = [10.0, 15.0, 20.0, 20.0]
DIRECTED_MARGIN_S = 2 * LINK.jitter_s + 0.02
"""The server's directed lead margin: both links' jitter, and 20 ms for a machine busy with
other tests (the default, 10 ms, is for links that do not swing by 20 ms between the
robot's send and its chunk; with it one tick of a 20 Hz robot starved now and then)."""


def run_fleet(merge_rule: str, *, duration_s: float) -> list[tuple[RecordingRobot, RuntimeSummary]]:
    """Four runtimes (10-20 Hz, directed mode) through one delaying proxy each way."""
    with running_server(
        make_mock(), max_batch_size=4, directed_margin_s=DIRECTED_MARGIN_S
    ) as server:

        async def fleet() -> list[tuple[RecordingRobot, RuntimeSummary]]:
            async with DelayProxy(
                "127.0.0.1", server.port, uplink=LINK, downlink=LINK, seed=7
            ) as proxy:
                robots = [RecordingRobot(i, cycle=None) for i in range(len(RATES_HZ))]
                runtimes = [
                    RobotRuntime(
                        robot,
                        AsyncPolicyClient("127.0.0.1", proxy.port),
                        RuntimeConfig(
                            robot_id=f"robot-{i}",
                            control_hz=hz,
                            max_execution_horizon=10,
                            min_execution_horizon=2,
                            merge_rule=merge_rule,
                            rtc_margin_ticks=2,
                            duration_s=duration_s,
                        ),
                    )
                    for i, (robot, hz) in enumerate(zip(robots, RATES_HZ, strict=True))
                ]
                summaries = await asyncio.gather(*(r.run() for r in runtimes))
                return list(zip(robots, summaries, strict=True))

        results = asyncio.run(fleet())
        assert server.stats().num_errors == 0
    return results


def largest_jump(actions: list[np.ndarray]) -> float:
    """Largest change of any action value from one executed tick to the next."""
    return float(np.abs(np.diff(np.stack(actions), axis=0)).max())


@pytest.fixture(scope="module")
def rtc_fleet() -> list[tuple[RecordingRobot, RuntimeSummary]]:
    return run_fleet("rtc", duration_s=3.0)


def test_below_capacity_no_tick_starves_despite_delay_and_jitter(
    rtc_fleet: list[tuple[RecordingRobot, RuntimeSummary]],
) -> None:
    """20 +- 10 ms each way, 4 robots at 10-20 Hz against a 4-robot batch: every tick
    after the first chunk plays an action, and each robot got several chunks."""
    for _, summary in rtc_fleet:
        assert summary.num_request_errors == 0
        assert summary.num_chunks_applied >= 4, summary
        assert summary.num_starved_ticks == 0, summary


def test_rtc_joins_chunks_without_a_seam(
    rtc_fleet: list[tuple[RecordingRobot, RuntimeSummary]],
) -> None:
    """With rtc (the mock inpaints the frozen prefix) no executed step changes an action
    value by more than the policy's own largest step."""
    for robot, summary in rtc_fleet:
        assert len(robot.actions) > 20, summary
        assert largest_jump(robot.actions) <= MOCK_MAX_STEP + 1e-5


def test_replace_shows_the_seams_rtc_removes() -> None:
    """The same fleet with the replace rule jumps at chunk boundaries: the rtc test above
    is not passing by accident."""
    results = run_fleet("replace", duration_s=1.5)
    assert max(largest_jump(robot.actions) for robot, _ in results) > 5 * MOCK_MAX_STEP
