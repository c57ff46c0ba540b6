"""Every-tick over openpi's one-request-per-connection loop: an observation no batch took
within its ``defer_after_s`` is answered "deferred" (no chunk), so the robot's next,
fresher observation can take its place."""

from __future__ import annotations

import asyncio

import numpy as np
from armory_client import ARMORY_KEY, AsyncPolicyClient, PolicyClient, RobotState, attach
from armory_client.runtime import RobotRuntime, RuntimeConfig
from server_harness import GatedPolicy, expected_actions, make_mock, make_obs, running_server


def every_tick_state(name: str, index: int, *, defer_after_s: float | None) -> RobotState:
    return RobotState(
        robot_id=name,
        action_index=index,
        actions_left=0,
        chunk_start=None,
        control_hz=20.0,
        min_execution_horizon=2,
        max_execution_horizon=8,
        defer_after_s=defer_after_s,
    )


def test_an_observation_waiting_past_defer_after_is_answered_deferred() -> None:
    """Robot a holds the only executor slot; robot b's every-tick observation is answered
    "deferred" with no actions, and b's next observation is the one served."""
    policy = GatedPolicy(make_mock())
    with running_server(policy, max_batch_size=1) as server:
        a = PolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
        b = PolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)

        async def robot_a() -> dict:
            return await asyncio.to_thread(
                a.infer, attach(make_obs(0), every_tick_state("a", 0, defer_after_s=None))
            )

        async def scenario() -> tuple[dict, dict, dict]:
            task_a = asyncio.ensure_future(robot_a())
            await asyncio.to_thread(policy.next_batch)  # a's batch holds the executor
            first = await asyncio.to_thread(
                b.infer, attach(make_obs(1, 0), every_tick_state("b", 0, defer_after_s=0.05))
            )
            policy.allow(2)
            second = await asyncio.to_thread(
                b.infer, attach(make_obs(1, 1), every_tick_state("b", 1, defer_after_s=5.0))
            )
            return await task_a, first, second

        reply_a, first, second = asyncio.run(scenario())
        stats = server.stats()
        a.close()
        b.close()
    assert first[ARMORY_KEY]["deferred"] is True
    assert first[ARMORY_KEY]["chunk_start"] == 0 and first["actions"].shape == (0, 7)
    assert second[ARMORY_KEY]["deferred"] is False
    np.testing.assert_array_equal(second["actions"], expected_actions(policy, make_obs(1, 1)))
    np.testing.assert_array_equal(reply_a["actions"], expected_actions(policy, make_obs(0)))
    assert stats.num_deferred == 1 and stats.num_errors == 0


def test_every_tick_runtimes_under_load_get_deferrals_and_keep_playing() -> None:
    """Six every-tick runtimes against a one-robot batch: the server defers what it cannot
    take within a tick, no request fails, and every robot keeps receiving chunks."""
    with running_server(make_mock(), max_batch_size=1) as server:

        async def fleet() -> list:
            runtimes = [
                RobotRuntime(
                    _Robot(i),
                    AsyncPolicyClient("127.0.0.1", server.port),
                    RuntimeConfig(
                        robot_id=f"robot-{i}",
                        control_hz=30.0,
                        max_execution_horizon=10,
                        min_execution_horizon=2,
                        request_mode="every-tick",
                        duration_s=1.5,
                    ),
                )
                for i in range(6)
            ]
            return await asyncio.gather(*(r.run() for r in runtimes))

        summaries = asyncio.run(fleet())
        stats = server.stats()
    assert stats.num_errors == 0 and stats.num_deferred > 0
    # A reply the server sent as a robot stopped is not counted by that robot (its
    # request was cancelled): at most one per robot.
    counted = sum(s.num_deferred_replies for s in summaries)
    assert 0 < counted <= stats.num_deferred <= counted + len(summaries)
    for summary in summaries:
        assert summary.num_request_errors == 0
        assert summary.num_chunks_applied >= 2, summary


class _Robot:
    def __init__(self, seed: int) -> None:
        self.seed, self.step = seed, 0

    def get_observation(self) -> dict:
        self.step += 1
        return make_obs(self.seed, self.step % 4)

    def send_action(self, action: np.ndarray) -> None:
        pass
