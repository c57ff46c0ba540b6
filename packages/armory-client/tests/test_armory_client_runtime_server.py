"""RobotRuntime with a real AsyncPolicyClient against an in-test fake Armory server.

Real sockets on an ephemeral loopback port and real time, so the bounds are
generous: exact counts are checked on virtual time in test_armory_client_runtime.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from armory_client import ARMORY_KEY, AsyncPolicyClient, RobotRuntime, RuntimeConfig, packb, unpackb
from websockets.asyncio.server import ServerConnection, serve

HZ = 100.0
E = 20
DURATION_S = 1.5
"""Long against the start-up (connection, first reply), which a loaded machine stretches."""
TICKS = int(DURATION_S * HZ)


class FakeArmoryServer:
    """Metadata frame, then per request a chunk whose row r holds action_index + r."""

    def __init__(
        self, *, delay_s: float = 0.0, armory: bool = True, next_after: int | None = None
    ) -> None:
        self.delay_s = delay_s
        # Whether replies carry __armory__ (False: a plain openpi server).
        self.armory = armory
        # next_request_index = chunk start + next_after (None: not given).
        self.next_after = next_after
        self.states: list[dict[str, Any]] = []
        self.port = 0
        self.num_closed = 0

    async def handle(self, ws: ServerConnection) -> None:
        await ws.send(packb({"action_horizon": 30}))
        try:
            async for frame in ws:
                state = unpackb(frame)[ARMORY_KEY]
                self.states.append(state)
                if self.delay_s:
                    # The "inference": returns early (no reply) if the client goes away.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(ws.wait_closed(), self.delay_s)
                        return
                start = state["action_index"]
                rows = np.arange(start, start + 30, dtype=np.float32)
                reply: dict[str, Any] = {
                    "actions": np.repeat(rows[:, None], 7, axis=1),
                    "server_timing": {"infer_ms": 0.0},
                }
                if self.armory:
                    next_index = None if self.next_after is None else start + self.next_after
                    reply[ARMORY_KEY] = {
                        "version": 1,
                        "chunk_start": start,
                        "next_request_index": next_index,
                    }
                await ws.send(packb(reply))
        finally:
            self.num_closed += 1


@contextlib.asynccontextmanager
async def serving(server: FakeArmoryServer) -> AsyncIterator[FakeArmoryServer]:
    """Serve on an ephemeral 127.0.0.1 port until the block ends."""
    async with serve(server.handle, "127.0.0.1", 0, compression=None) as running:
        server.port = running.sockets[0].getsockname()[1]
        yield server


class CameraRobot:
    """Two small camera images and a state vector; records the actions it executes."""

    def __init__(self) -> None:
        self.actions: list[float] = []
        self.images = [np.full((64, 64, 3), i, np.uint8) for i in range(2)]

    def get_observation(self) -> dict[str, Any]:
        return {
            "observation/image": self.images[0],
            "observation/wrist_image": self.images[1],
            "observation/state": np.zeros(8, np.float32),
            "prompt": "stack the blocks",
        }

    def send_action(self, action: np.ndarray) -> None:
        assert action.shape == (7,) and np.all(action == action[0])
        self.actions.append(float(action[0]))


def make_config(mode: str, **overrides: Any) -> RuntimeConfig:
    fields: dict[str, Any] = {
        "robot_id": "r0",
        "control_hz": HZ,
        "max_execution_horizon": E,
        "min_execution_horizon": 2,
        "request_mode": mode,
        "duration_s": DURATION_S,
    }
    return RuntimeConfig(**{**fields, **overrides})


def run_against(server: FakeArmoryServer, config: RuntimeConfig) -> tuple[Any, CameraRobot]:
    """Run one robot against `server` for the config's duration."""
    robot = CameraRobot()

    async def scenario() -> Any:
        async with serving(server):
            client = AsyncPolicyClient(port=server.port, request_timeout_s=2.0)
            return await RobotRuntime(robot, client, config).run()

    return asyncio.run(scenario()), robot


def assert_actions_match_indices(robot: CameraRobot) -> None:
    """The n-th action executed is row (n - s) of a chunk computed at index s."""
    assert robot.actions == list(range(len(robot.actions)))
    assert len(robot.actions) > TICKS // 2


def test_every_tick_fast_server() -> None:
    """every-tick: about one request per tick (each once the robot is one action into the
    chunk the last reply brought), zero starvation, values on their indices."""
    server = FakeArmoryServer()
    summary, robot = run_against(server, make_config("every-tick", min_execution_horizon=1))
    assert_actions_match_indices(robot)
    assert summary.num_starved_ticks == 0
    assert TICKS // 3 <= summary.num_requests <= summary.num_ticks
    assert summary.num_chunks_applied >= summary.num_requests - 1
    assert summary.bytes_sent > summary.num_requests * 2 * 64 * 64 * 3
    assert 0 < summary.mean_round_trip_s < 0.5
    assert server.num_closed == 1


def test_every_tick_slow_server_one_request_per_reply() -> None:
    """every-tick against a 35 ms server sends one request per reply, never two at once."""
    server = FakeArmoryServer(delay_s=0.035)
    summary, robot = run_against(server, make_config("every-tick"))
    assert_actions_match_indices(robot)
    assert 3 <= summary.num_requests <= DURATION_S / 0.035 + 2
    assert summary.mean_round_trip_s >= 0.035
    steps = [state["observation_step"] for state in server.states]
    assert steps == list(range(len(steps)))


def test_directed_about_one_request_per_chunk() -> None:
    """directed (next request 10 actions after each chunk's start): ~1 request per 10
    actions, each at a named index, zero starvation, far fewer bytes than every-tick."""
    server = FakeArmoryServer(next_after=10)
    summary, robot = run_against(server, make_config("directed"))
    assert_actions_match_indices(robot)
    assert summary.num_starved_ticks == 0
    indices = [state["action_index"] for state in server.states]
    assert indices[0] == 0 and all(b - a >= 10 for a, b in itertools.pairwise(indices))
    assert summary.num_executed / 10 - 2 <= summary.num_requests <= summary.num_executed / 10 + 2
    every_tick, _ = run_against(FakeArmoryServer(), make_config("every-tick"))
    assert 0 < summary.bytes_sent_per_s < every_tick.bytes_sent_per_s / 4
    assert summary.bytes_sent_per_s == summary.bytes_sent / summary.elapsed_s


def test_directed_against_plain_openpi_server_uses_threshold() -> None:
    """With no __armory__ in replies the robot sends on the threshold and never starves."""
    server = FakeArmoryServer(armory=False)
    summary, robot = run_against(server, make_config("directed"))
    assert_actions_match_indices(robot)
    assert summary.num_starved_ticks == 0
    assert 2 <= summary.num_requests <= summary.num_ticks / 4
    for state in server.states[1:]:
        # Sent only once at least min_execution_horizon actions into the chunk.
        assert state["action_index"] - state["chunk_start"] >= 2


def test_stop_from_another_task_closes_everything() -> None:
    """stop() ends an open-ended run at once; the request in flight is cancelled and the
    connection closed."""
    server = FakeArmoryServer(delay_s=10.0)
    robot = CameraRobot()

    async def scenario() -> tuple[Any, float]:
        async with serving(server):
            client = AsyncPolicyClient(port=server.port)
            runtime = RobotRuntime(robot, client, make_config("every-tick", duration_s=None))
            task = asyncio.create_task(runtime.run())
            await asyncio.sleep(0.2)
            start_s = time.monotonic()
            runtime.stop()
            summary = await asyncio.wait_for(task, 2.0)
            stop_s = time.monotonic() - start_s
            for _ in range(100):
                if server.num_closed:
                    break
                await asyncio.sleep(0.01)
            return summary, stop_s

    summary, stop_s = asyncio.run(scenario())
    assert stop_s < 1.0
    assert summary.num_requests == 1 and summary.num_chunks_applied == 0
    assert summary.num_ticks >= 5 and summary.starvation == 1.0
    assert server.num_closed == 1
