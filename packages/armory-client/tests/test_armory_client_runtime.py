"""RobotRuntime on virtual time: a fake clock, a fake robot and an in-process fake client.

Time only moves when the runtime sleeps (or a test's robot pretends to be slow),
so every count here is exact and the tests take milliseconds.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from armory_client import (
    ARMORY_KEY,
    CodecError,
    HandshakeRejected,
    RequestTimeout,
    RobotRuntime,
    RuntimeConfig,
    packb,
)

HZ = 100.0
PERIOD_S = 1 / HZ
E = 10


class FakeClock:
    """Virtual monotonic time; `sleep` fires due timers in order, then lands on its target."""

    def __init__(self, *, overshoot_s: Callable[[int], float] = lambda n: 0.0) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = 0
        # Extra time each sleep takes (as a real sleep oversleeps), by sleep number.
        self._overshoot_s = overshoot_s
        self.num_sleeps = 0

    def __call__(self) -> float:
        return self.now

    async def wait_until(self, t_s: float) -> None:
        """Block the calling task until virtual time reaches `t_s`."""
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (t_s, self._seq, future))
        self._seq += 1
        await future

    async def sleep(self, delay_s: float) -> None:
        target_s = self.now + delay_s + self._overshoot_s(self.num_sleeps)
        self.num_sleeps += 1
        while True:
            await _settle()
            if not self._timers or self._timers[0][0] > target_s:
                break
            t_s, _, future = heapq.heappop(self._timers)
            self.now = max(self.now, t_s)
            if not future.done():
                future.set_result(None)
        self.now = max(self.now, target_s)


async def _settle() -> None:
    """Let every ready task run until it blocks again."""
    for _ in range(20):
        await asyncio.sleep(0)


class FakeRobot:
    """Records every action it gets and the virtual time of every observation taken."""

    def __init__(self, clock: FakeClock, *, slow_ticks: dict[int, float] | None = None) -> None:
        self.clock = clock
        self.actions: list[float] = []
        self.observation_times_s: list[float] = []
        # Observation number -> virtual seconds that get_observation takes.
        self.slow_ticks = slow_ticks or {}
        self.image = np.zeros((4, 4, 3), np.uint8)

    def get_observation(self) -> dict[str, Any]:
        self.observation_times_s.append(self.clock.now)
        self.clock.now += self.slow_ticks.get(len(self.observation_times_s) - 1, 0.0)
        return {"image": self.image, "state": np.zeros(3, np.float32)}

    def send_action(self, action: np.ndarray) -> None:
        self.actions.append(float(action[0]))


class FakeClient:
    """An in-process Armory server: chunk values encode the request's action index."""

    def __init__(
        self,
        clock: FakeClock,
        *,
        delay_s: float = 0.0,
        armory: bool = True,
        next_after: int | None = None,
        horizon: int = 20,
    ) -> None:
        self.clock = clock
        self.delay_s = delay_s
        self.armory = armory
        # Directed: next_request_index = chunk start + next_after (None: not given).
        self.next_after = next_after
        self.horizon = horizon
        self.requests: list[dict[str, Any]] = []
        self.request_times_s: list[float] = []
        self.failures: list[Exception] = []
        self.silent = False
        self.num_deferred = 0
        """Answer this many of the next requests "deferred" (after ``delay_s``)."""
        self.deferred_requests: set[int] = set()
        """Answer these requests (0: the first) "deferred" (after ``delay_s``)."""
        self.connected = self.closed = False

    async def connect(self) -> FakeClient:
        self.connected = True
        return self

    async def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        state = obs[ARMORY_KEY]
        self.requests.append(state)
        self.request_times_s.append(self.clock.now)
        if self.silent:
            await asyncio.get_running_loop().create_future()
        await self.clock.wait_until(self.clock.now + self.delay_s)
        if self.failures:
            raise self.failures.pop(0)
        start = state["action_index"]
        if self.num_deferred > 0 or len(self.requests) - 1 in self.deferred_requests:
            self.num_deferred = max(self.num_deferred - 1, 0)
            deferred = {"version": 1, "chunk_start": start, "deferred": True}
            return {"actions": np.zeros((0, 2), np.float32), ARMORY_KEY: deferred}
        reply: dict[str, Any] = {"actions": chunk(start, self.horizon)}
        if self.armory:
            next_index = None if self.next_after is None else start + self.next_after
            reply[ARMORY_KEY] = {
                "version": 1,
                "chunk_start": start,
                "next_request_index": next_index,
            }
        return reply

    async def close(self) -> None:
        self.closed = True


def chunk(start: int, horizon: int) -> np.ndarray:
    """Row r holds start + r: the action index the row belongs to."""
    return np.repeat(np.arange(start, start + horizon, dtype=np.float32)[:, None], 2, axis=1)


def make_config(**overrides: Any) -> RuntimeConfig:
    fields: dict[str, Any] = {
        "robot_id": "r0",
        "control_hz": HZ,
        "max_execution_horizon": E,
        "min_execution_horizon": 1,
        "request_mode": "every-tick",
        "threshold_margin_s": 0.0,
        "duration_s": 1.0,
    }
    return RuntimeConfig(**{**fields, **overrides})


def run_runtime(
    clock: FakeClock, robot: FakeRobot, client: FakeClient, config: RuntimeConfig
) -> tuple[RobotRuntime, Any]:
    runtime = RobotRuntime(robot, client, config, clock=clock, sleep=clock.sleep)
    return runtime, asyncio.run(runtime.run())


def assert_actions_match_indices(robot: FakeRobot) -> None:
    """The n-th action executed came from row (n - start) of a chunk started at start."""
    assert robot.actions == list(range(len(robot.actions)))


def test_ticks_stay_on_grid_despite_oversleeping() -> None:
    """Ticks run at t0 + n/f: sleeps that overshoot by up to 40% of a period never add up."""
    clock = FakeClock(overshoot_s=lambda n: 0.4 * PERIOD_S * ((n * 7) % 5) / 4)
    robot = FakeRobot(clock)
    client = FakeClient(clock)
    _, summary = run_runtime(clock, robot, client, make_config())
    assert summary.num_ticks == 100 and summary.num_missed_ticks == 0
    for n, t_s in enumerate(robot.observation_times_s):
        assert n / HZ - 1e-12 <= t_s <= n / HZ + 0.4 * PERIOD_S + 1e-12
    assert summary.elapsed_s == pytest.approx(1.0)


def test_missed_ticks_are_skipped_not_bursted() -> None:
    """Tick 5 overruns by 2.5 periods (to 7.5): slot 6 is skipped, slot 7 runs at once
    (late by half a period), and slot 8 is back on the grid."""
    clock = FakeClock()
    robot = FakeRobot(clock, slow_ticks={5: 2.5 * PERIOD_S})
    client = FakeClient(clock)
    _, summary = run_runtime(clock, robot, client, make_config())
    assert summary.num_missed_ticks == 1
    assert summary.num_ticks + summary.num_missed_ticks == 100
    times = robot.observation_times_s
    assert times[6] == pytest.approx(7.5 * PERIOD_S)
    assert times[7] == pytest.approx(8 * PERIOD_S)
    assert times[-1] == pytest.approx(99 * PERIOD_S)
    assert_actions_match_indices(robot)


def test_every_tick_instant_server_one_request_per_tick() -> None:
    """every-tick with an instant server: one request per tick, no starvation, each
    request reporting its exact queue state."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock)
    _, summary = run_runtime(clock, robot, client, make_config())
    # The last tick's observation is still unsent when the run ends (cancelled).
    assert summary.num_ticks == summary.num_requests + 1 == 100
    assert summary.num_starved_ticks == 0 and summary.starvation == 0.0
    assert summary.num_counted_ticks == 99  # tick 0 is start-up
    assert summary.actions_per_s == pytest.approx(HZ)
    assert_actions_match_indices(robot)
    first, second = client.requests[:2]
    assert (first["action_index"], first["actions_left"], first["chunk_start"]) == (0, 0, None)
    assert (second["action_index"], second["actions_left"], second["chunk_start"]) == (1, 9, 0)
    assert [r["observation_step"] for r in client.requests] == list(range(99))
    assert client.connected and client.closed


def test_every_tick_slow_server_sends_newest_on_reply() -> None:
    """every-tick with 2.5-period replies: the newest observation waits and goes out the
    moment the reply lands, with the queue state after that reply, once the robot is
    min_execution_horizon actions into its chunk."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    _, summary = run_runtime(clock, robot, client, make_config())
    # The first reply lands before the robot has executed anything of its chunk: the
    # next request waits for tick 3. From then on one per reply, never two in flight.
    assert summary.num_requests == 40
    gaps = np.diff(client.request_times_s)
    assert gaps[0] == pytest.approx(3 * PERIOD_S)
    assert np.allclose(gaps[1:], 2.5 * PERIOD_S)
    assert summary.num_starved_ticks == 0
    assert_actions_match_indices(robot)
    # Sent at tick 3 (one action into the first chunk), then at 5.5 periods: tick 5's
    # observation, with the queue as it is once the second chunk (from index 1) landed.
    queue_states = [
        (r["action_index"], r["chunk_start"], r["actions_left"]) for r in client.requests
    ]
    assert queue_states[:3] == [(0, None, 0), (1, 0, 9), (3, 1, 8)]


def test_every_tick_deferred_reply_is_replaced_by_a_fresh_observation_at_once() -> None:
    """Each request asks to be deferred after two ticks; a deferred reply (0.3 periods
    after sending) is followed at once, not at the next tick, by a fresh observation."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=0.3 * PERIOD_S)
    client.num_deferred = 2
    _, summary = run_runtime(clock, robot, client, make_config())
    assert [r["defer_after_s"] for r in client.requests] == pytest.approx(
        [2 * PERIOD_S] * len(client.requests)
    )
    assert summary.num_deferred_replies == 2
    # Requests at 0, 0.3 and 0.6 periods, each with an observation taken then, all at
    # action index 0; the third is answered with a chunk.
    periods = np.asarray(client.request_times_s[:4]) / PERIOD_S
    assert periods == pytest.approx([0, 0.3, 0.6, 1.0])
    assert np.asarray(robot.observation_times_s[:3]) / PERIOD_S == pytest.approx([0, 0.3, 0.6])
    assert [r["action_index"] for r in client.requests[:3]] == [0, 0, 0]
    assert summary.num_starved_ticks == 0
    assert_actions_match_indices(robot)


@pytest.mark.parametrize("limit", [8, 2])
def test_every_tick_pipelines_when_the_server_allows_it(limit: int) -> None:
    """A server whose metadata allows pipelining gets every tick's observation at once,
    while earlier requests (2.5 periods each) are still in flight, up to its limit; the
    rest of a tick's observations wait for a reply as one request at a time does."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    client.metadata = {"armory": {"pipelining": True, "max_pipelined_requests": limit}}
    runtime, summary = run_runtime(clock, robot, client, make_config())
    assert all(r["pipelined"] and r["defer_after_s"] is None for r in client.requests)
    periods = np.asarray(client.request_times_s[:5]) / PERIOD_S
    if limit == 8:
        assert periods == pytest.approx([0, 1, 2, 3, 4])  # three in flight at a time
        # Each request names the latest round trip measured and the request it was
        # measured on (replies land at 2.5, 3.5, ...).
        measured = [(r["round_trip_step"], r["round_trip_s"]) for r in client.requests[:5]]
        assert measured[:3] == [(None, None)] * 3
        assert measured[3:] == [
            (0, pytest.approx(2.5 * PERIOD_S)),
            (1, pytest.approx(2.5 * PERIOD_S)),
        ]
    else:
        # Ticks 0 and 1 go out; tick 2's observation waits, and when the first chunk
        # lands (2.5) it is too early in that chunk (min horizon 1) to go; tick 5's
        # waits for the reply at 5.5.
        assert periods == pytest.approx([0, 1, 3, 4, 5.5])
    assert summary.num_starved_ticks == 0
    assert not runtime.in_flight
    assert_actions_match_indices(robot)


def test_chunk_fraction_streams_only_while_the_queue_is_short() -> None:
    """chunk-fraction at 0.3 of a 10-action chunk, a server that answers in 2.5 periods and
    allows pipelining: every tick's observation goes out at once while the robot holds at
    most 3 actions, none while it holds more; it pipelines as every-tick does."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    client.metadata = {"armory": {"pipelining": True, "max_pipelined_requests": 8}}
    config = make_config(request_mode="chunk-fraction", chunk_size_threshold=0.3)
    _, summary = run_runtime(clock, robot, client, config)
    lefts = [r["actions_left"] for r in client.requests]
    assert all(r["pipelined"] for r in client.requests)
    assert lefts[0] == 0 and max(lefts[1:]) <= 3 and 3 in lefts[1:]
    # Fewer observations than ticks: none while the queue holds 4 or more.
    assert summary.num_requests < summary.num_ticks - 1
    assert summary.num_starved_ticks == 0
    assert_actions_match_indices(robot)


def test_every_tick_sends_one_request_at_a_time_without_the_servers_leave() -> None:
    """No ``pipelining`` in the metadata (or ``RuntimeConfig.pipelining=False``): one
    request at a time, each asking to be deferred after two ticks."""
    for metadata, pipelining in (({"armory": {"version": 1}}, True), (None, False)):
        clock = FakeClock()
        robot = FakeRobot(clock)
        client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
        if metadata is not None:
            client.metadata = metadata
        else:
            client.metadata = {"armory": {"pipelining": True, "max_pipelined_requests": 8}}
        run_runtime(clock, robot, client, make_config(pipelining=pipelining))
        # The first reply (2.5) lands too early in its chunk to send at once (min
        # horizon 1): tick 3 sends; tick 4's observation waits for that reply (5.5).
        periods = np.asarray(client.request_times_s[:3]) / PERIOD_S
        assert periods == pytest.approx([0, 3, 5.5])
        assert not any(r["pipelined"] for r in client.requests)
        assert client.requests[0]["defer_after_s"] == pytest.approx(2 * PERIOD_S)


def test_threshold_sends_once_per_chunk_and_never_starves() -> None:
    """threshold (margin 0) with a 2.5-period server sends when <= 2 actions remain."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    config = make_config(request_mode="threshold")
    _, summary = run_runtime(clock, robot, client, config)
    assert summary.num_starved_ticks == 0
    assert_actions_match_indices(robot)
    assert [r["actions_left"] for r in client.requests[2:]] == [2] * (len(client.requests) - 2)
    # Each chunk adds E - 3 actions (3 executed during the round trip and its tick).
    assert 100 / (E - 2) - 2 <= summary.num_requests <= 100 / (E - 3) + 2
    assert summary.mean_round_trip_s == pytest.approx(2.5 * PERIOD_S)


class ReconnectingClient(FakeClient):
    """A FakeClient that counts its connections; its third request reconnects first,
    which takes `reconnect_s` before the request is even sent."""

    def __init__(self, clock: FakeClock, *, reconnect_s: float, **kwargs: Any) -> None:
        super().__init__(clock, **kwargs)
        self.reconnect_s = reconnect_s
        self.num_connections = 0

    async def connect(self) -> FakeClient:
        self.num_connections += 1
        return await super().connect()

    async def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        if len(self.requests) == 2:
            await self.clock.wait_until(self.clock.now + self.reconnect_s)
            self.num_connections += 1
        return await super().infer(obs)


def test_a_reconnect_is_not_a_round_trip() -> None:
    """A request that waited 4.98 s for a reconnect teaches neither the round-trip
    estimate nor the server (round_trip_s of later requests), nor the summary's mean;
    its record says it reconnected."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = ReconnectingClient(clock, reconnect_s=4.98, delay_s=2.5 * PERIOD_S)
    config = make_config(request_mode="threshold", duration_s=7.0)
    runtime, summary = run_runtime(clock, robot, client, config)
    assert runtime.round_trip.value_s == pytest.approx(2.5 * PERIOD_S)
    reported = [r["round_trip_s"] for r in client.requests if r["round_trip_s"] is not None]
    assert len(reported) > 10 and reported == pytest.approx([2.5 * PERIOD_S] * len(reported))
    assert summary.mean_round_trip_s == pytest.approx(2.5 * PERIOD_S)
    records = list(runtime.stats.requests)
    assert [r.reconnected for r in records[:4]] == [False, False, True, False]
    assert records[2].round_trip_s == pytest.approx(4.98 + 2.5 * PERIOD_S)


def test_directed_sends_exactly_at_named_indices() -> None:
    """directed sends at the index the last reply named: 0, 7, 14, ... with an instant server."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, next_after=7)
    config = make_config(request_mode="directed")
    _, summary = run_runtime(clock, robot, client, config)
    indices = [r["action_index"] for r in client.requests]
    assert indices == list(range(0, 7 * len(indices), 7))
    assert summary.num_starved_ticks == 0
    assert summary.num_requests == len(robot.observation_times_s) == math.ceil(99 / 7)
    assert_actions_match_indices(robot)


def test_directed_falls_back_to_threshold_on_plain_openpi() -> None:
    """Against a server that sends no __armory__ key directed behaves as threshold."""
    runs = {}
    for mode in ("directed", "threshold"):
        robot = FakeRobot(clock := FakeClock())
        client = FakeClient(clock, delay_s=2.5 * PERIOD_S, armory=False)
        run_runtime(clock, robot, client, make_config(request_mode=mode))
        runs[mode] = ([r["action_index"] for r in client.requests], robot.actions)
        assert_actions_match_indices(robot)
    assert runs["directed"] == runs["threshold"]


def test_directed_deferred_reply_is_followed_at_once_by_a_fresh_observation() -> None:
    """A directed robot whose observation the server answers "deferred" (as it does when
    the robot runs dry before any batch took it) sends a fresh one at once, not at the
    next named index, and plays on from that one's chunk."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=0.3 * PERIOD_S, next_after=7)
    client.deferred_requests = {1}
    _, summary = run_runtime(clock, robot, client, make_config(request_mode="directed"))
    assert summary.num_deferred_replies == 1
    # Sent at index 7, deferred 0.3 periods later, sent again then: still at index 7.
    assert [r["action_index"] for r in client.requests[:4]] == [0, 7, 7, 14]
    gaps = np.diff(client.request_times_s[:3]) / PERIOD_S
    assert gaps[1] == pytest.approx(0.3)
    assert robot.observation_times_s[2] == pytest.approx(client.request_times_s[2])
    assert_actions_match_indices(robot)


def test_directed_index_past_queue_end_sends_when_dry() -> None:
    """A named index the queue cannot reach: the robot sends when its queue runs dry."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, next_after=E + 5)
    _, summary = run_runtime(clock, robot, client, make_config(request_mode="directed"))
    assert [r["action_index"] for r in client.requests[:3]] == [0, E, 2 * E]
    assert summary.num_requests > 5


def test_stop_ends_run_promptly_and_cancels_request() -> None:
    """stop() mid-sleep ends run within the tick; the silent request is cancelled and
    the client closed."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock)
    client.silent = True
    runtime = RobotRuntime(
        robot, client, make_config(duration_s=None), clock=clock, sleep=clock.sleep
    )

    async def scenario() -> Any:
        task = asyncio.create_task(runtime.run())
        while clock.now < 0.05:
            await asyncio.sleep(0)
        runtime.stop()
        return await asyncio.wait_for(task, 1.0)

    summary = asyncio.run(scenario())
    assert 5 <= summary.num_ticks <= 7
    assert summary.num_requests == 1 and not runtime.in_flight
    assert client.closed
    with pytest.raises(RuntimeError, match="runs once"):
        asyncio.run(runtime.run())


def test_request_errors_are_counted_and_the_robot_carries_on() -> None:
    """A timed-out request is recorded; the next request succeeds and play resumes."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    client.failures = [RequestTimeout("no reply")]
    runtime, summary = run_runtime(clock, robot, client, make_config(request_mode="threshold"))
    assert summary.num_request_errors == 1
    assert runtime.stats.last_error == "RequestTimeout: no reply"
    first = runtime.stats.requests[0]
    assert (first.outcome, first.round_trip_s, first.actions_gained) == ("error", None, 0)
    assert summary.num_chunks_applied == summary.num_requests - 1
    assert_actions_match_indices(robot)


def test_wrong_chunk_start_is_never_applied() -> None:
    """A reply naming another chunk start is a protocol error: counted, not applied."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock)
    original = client.infer

    async def lying_infer(obs: dict[str, Any]) -> dict[str, Any]:
        reply = await original(obs)
        if len(client.requests) == 3:
            reply[ARMORY_KEY]["chunk_start"] -= 1
        return reply

    client.infer = lying_infer  # type: ignore[method-assign]
    _, summary = run_runtime(clock, robot, client, make_config())
    assert summary.num_request_errors == 1
    assert summary.num_chunks_applied == summary.num_requests - 1
    assert_actions_match_indices(robot)


def test_new_episode_discards_stale_reply_and_restarts_index() -> None:
    """A reply to an observation of the previous episode is discarded when it lands."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    runtime = RobotRuntime(
        robot, client, make_config(request_mode="threshold"), clock=clock, sleep=clock.sleep
    )

    async def scenario() -> Any:
        task = asyncio.create_task(runtime.run())
        while clock.now < 0.3:
            await asyncio.sleep(0)
        while not runtime.in_flight:
            await asyncio.sleep(0)
        executed = len(robot.actions)
        runtime.new_episode()
        return executed, await task

    executed, summary = asyncio.run(scenario())
    assert summary.num_stale_episode_replies == 1
    assert robot.actions[:executed] == list(range(executed))
    # The new episode's queue is dry until its first chunk: the last action is held.
    tail = robot.actions[executed:]
    num_held = next(i for i, a in enumerate(tail) if a != robot.actions[executed - 1])
    assert num_held >= 1
    assert tail[num_held:] == list(range(len(tail) - num_held))
    second_episode = [r for r in client.requests if r["episode_id"] == 1]
    assert second_episode[0]["action_index"] == 0
    assert second_episode[0]["observation_step"] == 0


def test_bytes_sent_is_the_packed_observation_size() -> None:
    """bytes_sent adds up each packed observation (queue state included); per second too."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, next_after=5)
    runtime, summary = run_runtime(clock, robot, client, make_config(request_mode="directed"))
    obs = robot.get_observation()
    expected = sum(len(packb({**obs, ARMORY_KEY: state})) for state in client.requests)
    assert summary.bytes_sent == expected
    assert summary.bytes_sent_per_s == pytest.approx(expected / summary.elapsed_s)
    assert [r.bytes_sent for r in runtime.stats.requests] == [
        len(packb({**obs, ARMORY_KEY: state})) for state in client.requests
    ]


def test_unencodable_observation_stops_the_runtime() -> None:
    """An observation the codec refuses cannot fix itself: run raises CodecError."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    robot.image = np.array([object()])
    client = FakeClient(clock)
    with pytest.raises(CodecError, match="object"):
        run_runtime(clock, robot, client, make_config())
    assert client.closed


def test_refused_handshake_stops_the_runtime() -> None:
    """A handshake refused (e.g. a wrong API key) raises from run, the client closed."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock)
    client.failures = [HandshakeRejected(401, "ws://x")]
    with pytest.raises(HandshakeRejected):
        run_runtime(clock, robot, client, make_config())
    assert client.closed


def test_no_chunk_ever_means_full_starvation() -> None:
    """A robot that never receives a chunk is starved on every tick (as the simulator counts)."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock)
    client.silent = True
    _, summary = run_runtime(clock, robot, client, make_config(duration_s=0.1))
    assert (summary.num_ticks, summary.num_starved_ticks, summary.starvation) == (10, 10, 1.0)
    assert summary.actions_per_s == 0.0 and summary.mean_round_trip_s is None


def test_chunks_shorter_than_min_horizon_keep_the_robot_asking() -> None:
    """threshold with 1-row chunks and min horizon 2: the empty queue asks anyway."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, horizon=1)
    _, summary = run_runtime(clock, robot, client, make_config(request_mode="threshold"))
    assert summary.num_requests >= 49
    assert summary.num_executed >= 49
    assert_actions_match_indices(robot)
