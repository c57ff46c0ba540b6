"""Servers, policies and robots for the engine and openpi-server tests.

Every server runs on its own event loop thread on an ephemeral 127.0.0.1 port
and is stopped by the context manager that started it. Observations are
deterministic per (seed, step), so a test can recompute the mock's chunk for
each request it sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from armory_client import AsyncPolicyClient, PolicyClient, RobotState
from armory_client.runtime import RobotRuntime, RuntimeConfig
from armory_client.runtime_stats import RuntimeSummary

from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.engine.server_engine import Reply
from armory.policies.base import Policy, PolicyMetadata
from armory.policies.mock import MockPolicy, MockPolicyConfig, mock_actions
from armory.scheduling.base import Scheduler
from armory.serve import ArmoryServer, ServerThread

FAST_LINEAR = LinearProfileConfig(intercept_s=0.015, slope_s=0.003)
"""A GPU-like line short enough for tests: 18 ms for one robot, 27 ms for four."""


@contextmanager
def armory_serve(
    *args: str, announce_lines: int
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """`armory serve ARGS` as a child process: yields it and its first announce lines
    (the policy, then one line per door); killed on exit if it is still running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "armory.cli", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = [proc.stdout.readline() for _ in range(announce_lines)]
        if "" in lines:  # the server ended before announcing every door: say why
            proc.kill()
            raise AssertionError(f"armory serve ended early: {lines}\n{proc.stderr.read()}")
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def make_mock(**overrides: Any) -> MockPolicy:
    """A mock policy on the FAST_LINEAR profile (overrides go to MockPolicyConfig)."""
    options: dict[str, Any] = {"latency_profile": "linear", "linear": FAST_LINEAR}
    options.update(overrides)
    return MockPolicy(MockPolicyConfig(**options))


def make_reply(actions: np.ndarray, **fields: Any) -> Reply:
    """The engine's reply carrying ``actions``: a plain client's, batch of 1, no timings
    (``fields`` override)."""
    values: dict[str, Any] = {
        "chunk_start": 0,
        "next_request_index": None,
        "is_armory": False,
        "batch_size": 1,
        "received_s": 0.0,
        "wait_s": 0.0,
        "forward_s": 0.0,
        "policy_s": 0.0,
        "prev_total_s": None,
    }
    values.update(fields)
    return Reply(actions=actions, **values)


def make_obs(
    seed: int, step: int = 0, *, config: MockPolicyConfig | None = None, prompt: str | None = None
) -> dict[str, Any]:
    """A valid observation for the mock's default inputs, distinct per (seed, step)."""
    config = config or MockPolicyConfig()
    rng = np.random.default_rng([seed, step])
    obs: dict[str, Any] = {
        key: rng.integers(0, 256, size=config.image_shape, dtype=np.uint8)
        for key in config.image_keys
    }
    obs[config.state_key] = rng.standard_normal(config.state_dim).astype(np.float32)
    if prompt is not None and config.prompt_key:
        obs[config.prompt_key] = prompt
    return obs


def expected_actions(policy: Policy, obs: Mapping[str, Any]) -> np.ndarray:
    """The chunk the mock computes for ``obs`` (``__armory__`` is not an input)."""
    meta = policy.metadata
    return mock_actions(obs, meta.inputs, meta.action_horizon, meta.action_dim)


@contextmanager
def running_server(
    policy: Policy | None = None,
    *,
    api_key: str | None = None,
    scheduler: Scheduler | None = None,
    **config: Any,
) -> Iterator[ServerThread]:
    """An ArmoryServer on an ephemeral port, in its own thread; stopped on exit."""
    server = ArmoryServer(
        policy or make_mock(),
        ServerConfig(**config),
        host="127.0.0.1",
        port=0,
        api_key=api_key,
        scheduler=scheduler,
    )
    thread = ServerThread(server).start()
    try:
        yield thread
    finally:
        thread.stop()


@contextmanager
def one_slot_server() -> Iterator[tuple[GatedPolicy, ServerThread, PolicyClient, PolicyClient]]:
    """A server of one executor slot (max batch 1, nothing decided ahead) whose policy
    runs a batch only when allowed (:class:`GatedPolicy`), and two clients of it, a and b
    (closed on exit)."""
    policy = GatedPolicy(make_mock())
    with running_server(policy, max_batch_size=1, decide_ahead_s=0.0) as server:
        a = PolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
        b = PolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
        try:
            yield policy, server, a, b
        finally:
            a.close()
            b.close()


async def hold_the_slot(
    policy: GatedPolicy, client: PolicyClient, observation: Mapping[str, Any]
) -> asyncio.Future[dict[str, Any]]:
    """Send ``observation`` from ``client`` and return once its batch holds the executor
    (the future is its reply, once the policy is allowed to run)."""
    reply = asyncio.ensure_future(asyncio.to_thread(client.infer, observation))
    await asyncio.to_thread(policy.next_batch)
    return reply


class LeRobotCheckpointMock(MockPolicy):
    """The mock, declaring itself LeRobot's ``act`` served from the folder ``checkpoint``
    (what a ``policy:lerobot --policy.path`` declares)."""

    def __init__(self, config: MockPolicyConfig, checkpoint: str) -> None:
        super().__init__(config)
        self.checkpoint = checkpoint

    @property
    def metadata(self) -> PolicyMetadata:
        extra = {"lerobot_type": "act", "lerobot_checkpoint": self.checkpoint}
        return dataclasses.replace(super().metadata, name="lerobot-act", extra=extra)


class GatedPolicy(Policy):
    """Wraps a policy; each forward pass announces itself, then waits for a permit.

    :meth:`next_batch` returns the observations of the next batch that started;
    :meth:`allow` lets that many batches (waiting or future) run.
    """

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self._permits = threading.Semaphore(0)
        self._started: queue.Queue[list[Mapping[str, Any]]] = queue.Queue()

    @property
    def metadata(self) -> PolicyMetadata:
        return self.inner.metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        self._started.put(list(observations))
        if not self._permits.acquire(timeout=10):
            raise TimeoutError("GatedPolicy got no permit")
        return self.inner.infer_batch(observations)

    def next_batch(self, timeout_s: float = 5.0) -> list[Mapping[str, Any]]:
        return self._started.get(timeout=timeout_s)

    def allow(self, num_batches: int = 1) -> None:
        for _ in range(num_batches):
            self._permits.release()


class RecordingRobot:
    """A robot for runtimes: deterministic observations per (seed, step), cycling through
    ``cycle`` steps (None: never repeating); keeps a copy of every action it is sent."""

    def __init__(self, seed: int, *, cycle: int | None = 8) -> None:
        self.seed = seed
        self.cycle = cycle
        self.step = 0
        self.actions: list[np.ndarray] = []

    def get_observation(self) -> dict[str, Any]:
        self.step += 1
        return make_obs(self.seed, self.step if self.cycle is None else self.step % self.cycle)

    def send_action(self, action: np.ndarray) -> None:
        self.actions.append(np.array(action))


def every_tick_state(
    name: str,
    index: int,
    *,
    chunk_start: int | None = None,
    defer_after_s: float | None = None,
    pipelined: bool = False,
) -> RobotState:
    """An every-tick robot's queue state at 20 Hz, horizons 2..8, with an empty queue."""
    return RobotState(
        robot_id=name,
        action_index=index,
        actions_left=0,
        chunk_start=chunk_start,
        control_hz=20.0,
        min_execution_horizon=2,
        max_execution_horizon=8,
        defer_after_s=defer_after_s,
        pipelined=pipelined,
    )


def run_runtimes(
    port: int, configs: Sequence[RuntimeConfig], *, api_key: str | None = None
) -> list[RuntimeSummary]:
    """One RobotRuntime per config (a RecordingRobot seeded by its position, its own
    AsyncPolicyClient, sending ``api_key``) against 127.0.0.1:``port``, all at once; their
    summaries."""

    async def fleet() -> list[RuntimeSummary]:
        runtimes = [
            RobotRuntime(
                RecordingRobot(i), AsyncPolicyClient("127.0.0.1", port, api_key=api_key), config
            )
            for i, config in enumerate(configs)
        ]
        return await asyncio.gather(*(r.run() for r in runtimes))

    return asyncio.run(fleet())
