"""The real-time engine without sockets: sessions, the batch loop, the executor thread."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pytest
from armory_client import RobotState, attach
from server_harness import GatedPolicy, expected_actions, make_mock, make_obs

from armory.core.errors import (
    PolicyError,
    QueueStateError,
    RequestError,
    SessionClosed,
    Superseded,
)
from armory.core.latency_profile import LatencyProfile
from armory.engine.batch_loop import BatchLoop, ChunkResult
from armory.engine.config import PlainClientDefaults, ServerConfig
from armory.engine.executor import BatchOutcome
from armory.engine.queue_mirror import NO_CHUNK, QueueMirror, QueueReport, RobotLimits
from armory.engine.server_engine import Reply, ServerEngine
from armory.engine.session import RequestPlan, Session, directed_lead_s, directed_send_index
from armory.policies.base import Policy, PolicyMetadata
from armory.scheduling.base import Scheduler
from armory.scheduling.max_batch import MaxBatchScheduler
from armory.scheduling.registry import make_scheduler
from armory.scheduling.snapshot import Batch, Snapshot

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]], timeout_s: float = 10.0) -> T:
    """Run a coroutine on a fresh event loop, with a timeout."""

    async def main() -> T:
        async with asyncio.timeout(timeout_s):
            return await make()

    return asyncio.run(main())


def make_engine(
    policy: Policy | None = None,
    *,
    scheduler: str | Scheduler = "max-batch",
    clock: Callable[[], float] = time.monotonic,
    profile: LatencyProfile | None = None,
    **config: Any,
) -> ServerEngine:
    sched = make_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
    return ServerEngine(
        policy or make_mock(),
        sched,
        config=ServerConfig(**config),
        profile=profile,
        clock=clock,
    )


def armory_state(name: str, **fields: Any) -> RobotState:
    """A RobotState at 20 Hz, horizons 1..10, before any chunk (fields override)."""
    values: dict[str, Any] = {
        "robot_id": name,
        "action_index": 0,
        "actions_left": 0,
        "chunk_start": None,
        "control_hz": 20.0,
        "min_execution_horizon": 1,
        "max_execution_horizon": 10,
    }
    values.update(fields)
    return RobotState(**values)


# ---- sessions ---------------------------------------------------------------


def test_plain_client_is_assumed_waiting_with_an_empty_queue() -> None:
    """No __armory__ state: 0 actions left, the whole previous chunk executed, defaults;
    such a client asks once its chunk is played out (openpi's and GR00T's runtimes)."""
    session = Session(peer="test")
    defaults = PlainClientDefaults(control_hz=15.0, link_s=0.003)
    first = session.plan(None, received_s=1.0, defaults=defaults, action_horizon=10)
    assert first.report == QueueReport(action_index=0, actions_left=0, chunk_start=NO_CHUNK)
    assert first.limits == RobotLimits(
        control_hz=15.0,
        min_execution_horizon=1,
        max_execution_horizon=10,
        uplink_s=0.003,
        downlink_s=0.003,
        plays_out=True,
    )
    session.answered(0)
    second = session.plan(None, received_s=2.0, defaults=defaults, action_horizon=10)
    assert second.report == QueueReport(action_index=10, actions_left=0, chunk_start=0)


def test_every_tick_clients_stream_and_others_ask_at_their_own_moment() -> None:
    """An every-tick client (pipelined, or resending when deferred) keeps sending while it
    waits: the server picks the moment of its chunk. A threshold client and a plain one
    ask once per chunk when they choose."""
    defaults = PlainClientDefaults()

    def limits(state: RobotState | None) -> RobotLimits:
        return (
            Session(peer="test")
            .plan(state, received_s=0.0, defaults=defaults, action_horizon=10)
            .limits
        )

    assert limits(armory_state("a", pipelined=True)).streams
    assert limits(armory_state("a", defer_after_s=0.05)).streams
    assert not limits(armory_state("a")).streams
    assert not limits(armory_state("a", directed=True)).streams
    assert not limits(None).streams
    assert limits(None).plays_out
    assert not limits(armory_state("a")).plays_out


def test_armory_link_delay_is_round_trip_less_server_time() -> None:
    """The client's round trip minus the server's time on the previous request, halved."""
    session = Session(peer="test")
    defaults = PlainClientDefaults(link_s=0.002)
    plan = session.plan(armory_state("a"), received_s=0.0, defaults=defaults, action_horizon=10)
    assert plan.limits.uplink_s == 0.002  # nothing measured yet
    session.answered(0)
    session.reply_sent(received_s=0.0, sent_s=0.030)
    state = armory_state("a", action_index=5, actions_left=5, chunk_start=0, round_trip_s=0.040)
    plan = session.plan(state, received_s=0.5, defaults=defaults, action_horizon=10)
    assert plan.limits.uplink_s == pytest.approx(0.005)
    assert plan.limits.downlink_s == pytest.approx(0.005)
    assert plan.report == QueueReport(action_index=5, actions_left=5, chunk_start=0)
    assert session.reply_gap_s == pytest.approx(0.47)


def test_a_round_trip_named_by_step_is_set_against_that_requests_server_time() -> None:
    """Pipelined requests: the round trip of the request sent as step 0 is set against
    the server's time on step 0, not on the latest reply (step 1, deferred, or step 2);
    each measured request counts once."""
    session = Session(peer="test")
    defaults = PlainClientDefaults(link_s=0.002)
    for step in range(3):
        session.plan(
            armory_state("a", observation_step=step),
            received_s=0.0,
            defaults=defaults,
            action_horizon=10,
        )
    session.reply_sent(received_s=0.0, sent_s=0.100, observation_step=0)
    session.reply_sent(received_s=0.05, sent_s=0.101, chunk=False, observation_step=1)
    session.reply_sent(received_s=0.08, sent_s=0.300, observation_step=2)
    state = armory_state(
        "a", action_index=5, observation_step=3, round_trip_s=0.120, round_trip_step=0
    )
    plan = session.plan(state, received_s=0.4, defaults=defaults, action_horizon=10)
    assert plan.limits.uplink_s == pytest.approx(0.010)  # (0.120 - 0.100) / 2
    # The same measurement again (the next tick's request) does not count twice.
    again = armory_state(
        "a", action_index=6, observation_step=4, round_trip_s=0.120, round_trip_step=0
    )
    session.reply_sent(received_s=0.4, sent_s=0.5, observation_step=3)
    plan = session.plan(again, received_s=0.45, defaults=defaults, action_horizon=10)
    assert plan.limits.uplink_s == pytest.approx(0.010)
    # Step 2's round trip: 0.260 - 0.220 = 0.040 s, averaged in with weight 0.25.
    later = armory_state(
        "a", action_index=7, observation_step=5, round_trip_s=0.260, round_trip_step=2
    )
    plan = session.plan(later, received_s=0.5, defaults=defaults, action_horizon=10)
    assert plan.limits.uplink_s == pytest.approx((0.020 + 0.25 * (0.040 - 0.020)) / 2)


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        (armory_state("a"), None, "must carry __armory__ state, or none may"),
        (None, armory_state("a"), "must carry __armory__ state, or none may"),
        (armory_state("a"), armory_state("b"), "robot_id changed from 'a' to 'b'"),
        (armory_state("a", max_execution_horizon=11), None, "exceeds the policy's action horizon"),
    ],
)
def test_session_refuses_inconsistent_state(
    first: RobotState | None, second: RobotState | None, message: str
) -> None:
    """Mixing plain and Armory requests, renaming, or a horizon beyond the policy's fail."""
    session = Session(peer="test")
    defaults = PlainClientDefaults()
    with pytest.raises(QueueStateError, match=message):
        session.plan(first, received_s=0.0, defaults=defaults, action_horizon=10)
        session.plan(second, received_s=1.0, defaults=defaults, action_horizon=10)


def test_directed_send_index_leaves_the_lead_and_respects_min_horizon() -> None:
    """Ask lead_s of motion before the chunk's end, never before start + min horizon."""
    limits = RobotLimits(control_hz=20.0, min_execution_horizon=2, max_execution_horizon=10)
    assert directed_send_index(100, limits, lead_s=0.12) == 107  # ceil(2.4) = 3 actions
    assert directed_send_index(100, limits, lead_s=0.0) == 110
    assert directed_send_index(100, limits, lead_s=5.0) == 102


def test_directed_lead_is_both_links_one_forward_pass_and_the_margin() -> None:
    """The forward pass at the recent batch size, rounded and capped at the max batch."""
    limits = RobotLimits(
        control_hz=20.0,
        min_execution_horizon=2,
        max_execution_horizon=10,
        uplink_s=0.004,
        downlink_s=0.006,
    )
    profile = LatencyProfile.from_preset("l40s-pi05")
    assert directed_lead_s(limits, profile, 1.0, 4, 0.01) == pytest.approx(0.010 + 0.070 + 0.01)
    assert directed_lead_s(limits, profile, 2.6, 4, 0.0) == pytest.approx(0.010 + 0.195)
    assert directed_lead_s(limits, profile, 7.0, 4, 0.0) == pytest.approx(0.010 + 0.250)


def test_mirror_update_limits_keeps_the_queue_and_eligibility_matches_snapshot() -> None:
    """update_limits changes rate and horizons in place; is_eligible agrees with snapshot."""
    mirror = QueueMirror()
    limits = RobotLimits(control_hz=10.0, min_execution_horizon=2, max_execution_horizon=8)
    mirror.add(1, limits, now_s=0.0)
    assert not mirror.is_eligible(1)  # no observation yet
    mirror.observe(1, QueueReport(action_index=0, actions_left=4), now_s=0.0)
    assert mirror.is_eligible(1) and mirror.deadline_of(1) == pytest.approx(0.4)
    assert mirror.dispatch(1, land_s=0.1) == 0
    assert not mirror.is_eligible(1) and mirror.last_chunk_start_of(1) == 0
    mirror.update_limits(
        1, RobotLimits(control_hz=20.0, min_execution_horizon=1, max_execution_horizon=8)
    )
    mirror.observe(1, QueueReport(action_index=2, actions_left=6, chunk_start=0), now_s=0.2)
    assert mirror.is_eligible(1)
    assert mirror.deadline_of(1) == pytest.approx(0.2 + 6 / 20)
    snapshot = mirror.snapshot(0.2, np.zeros(2), 1)
    assert snapshot.eligible.tolist() == [True]
    assert snapshot.control_hz.tolist() == [20.0]


# ---- engine -----------------------------------------------------------------


def test_engine_answers_every_robot_with_its_own_chunk_in_shared_batches() -> None:
    """Six robots submitted together share batches; each gets the chunk of its observation."""
    policy = make_mock()

    async def scenario() -> list[Reply]:
        engine = make_engine(policy, max_batch_size=4)
        await engine.start()
        sessions = [engine.open_session(peer=f"p{i}") for i in range(6)]
        replies = await asyncio.gather(
            *(
                engine.infer(s, make_obs(i), received_s=engine.clock())
                for i, s in enumerate(sessions)
            )
        )
        await engine.stop()
        return replies

    replies = run(scenario)
    for i, reply in enumerate(replies):
        np.testing.assert_array_equal(reply.actions, expected_actions(policy, make_obs(i)))
        assert reply.next_request_index is None and not reply.is_armory
    assert sorted(policy.batch_sizes, reverse=True)[0] == 4
    assert sum(policy.batch_sizes) == 6


def test_engine_learns_the_measured_forward_time() -> None:
    """A profile seeded at 1 s per pass learns the mock's ~18 ms from measured batches."""
    policy = make_mock()
    profile = LatencyProfile({1: 1.0})

    async def scenario() -> dict[int, float]:
        engine = make_engine(policy, profile=profile)
        await engine.start()
        session = engine.open_session(peer="p")
        for step in range(3):
            await engine.infer(session, make_obs(0, step), received_s=engine.clock())
        await engine.stop()
        return engine.stats().latency_points_s

    points = run(scenario)
    assert 0.015 <= points[1] < 0.1


class _WaitForTwo(Scheduler):
    """Holds a lone robot until ``hold_until_s``; serves as soon as two are eligible."""

    name = "wait-for-two"

    def __init__(self, hold_until_s: float) -> None:
        self.hold_until_s = hold_until_s
        self.calls: list[tuple[float, int]] = []

    def schedule(self, snapshot: Snapshot) -> Batch:
        ids = tuple(int(i) for i in snapshot.robot_id[snapshot.eligible])
        self.calls.append((snapshot.now_s, len(ids)))
        if len(ids) < 2 and snapshot.now_s < self.hold_until_s:
            return Batch((), wait_until_s=self.hold_until_s)
        return Batch(ids[: snapshot.max_batch_size])


class _RecordingExecutor:
    """Stands in for the executor: records each batch handed to it, computes nothing
    (``finish`` hands the n-th batch its outcome, as the worker would). Like the worker
    it runs batches in order: one is started once every batch before it has finished,
    and only one not started can be taken back."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self._done: list[Callable[[BatchOutcome], None]] = []
        self._finished: set[int] = set()
        self._handles: list[_Handle] = []

    def start(
        self, observations: Sequence[Mapping[str, Any]], on_done: Callable[[BatchOutcome], None]
    ) -> _Handle:
        self.batches.append(len(observations))
        self._done.append(on_done)
        self._handles.append(_Handle(self, len(self.batches) - 1))
        return self._handles[-1]

    def finish(self, n: int, outcome: BatchOutcome) -> None:
        """Batch n ends with ``outcome`` (one taken back never runs: nothing happens)."""
        self._finished.add(n)
        if not self._handles[n].cancelled:
            asyncio.get_running_loop().call_soon(self._done[n], outcome)

    def started(self, n: int) -> bool:
        return all(i in self._finished for i in range(n))

    def shutdown(self) -> None:
        pass


class _Handle:
    def __init__(self, executor: _RecordingExecutor, n: int) -> None:
        self.executor = executor
        self.n = n
        self.cancelled = False

    def cancel(self) -> bool:
        if self.executor.started(self.n):
            return False
        self.cancelled = True
        return True


def _recording_loop(
    *,
    max_batch_size: int,
    decide_ahead_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    latency_s: float = 0.05,
) -> tuple[_RecordingExecutor, BatchLoop]:
    """A max-batch loop over a recording executor (50 ms forward passes by default)."""
    executor = _RecordingExecutor()
    loop = BatchLoop(
        executor,  # type: ignore[arg-type]
        make_scheduler("max-batch"),
        LatencyProfile({1: latency_s}),
        max_batch_size=max_batch_size,
        clock=clock,
        decide_ahead_s=decide_ahead_s,
    )
    return executor, loop


_LIMITS = RobotLimits(
    control_hz=20.0, min_execution_horizon=1, max_execution_horizon=10, downlink_s=0.004
)


def _one_action_plan(action_index: int = 0, actions_left: int = 0) -> RequestPlan:
    return RequestPlan(
        limits=_LIMITS,
        report=QueueReport(action_index=action_index, actions_left=actions_left),
        reset=False,
    )


def _chunk_outcome(policy_s: float) -> BatchOutcome:
    return BatchOutcome(chunks=[np.zeros((10, 7), np.float32)], policy_s=policy_s, ok=True)


def test_dispatch_hands_the_batch_to_the_worker_before_the_loop_turns() -> None:
    """The worker gets a batch in the same step as the decision that chose it, not when a
    task created for it first runs (the loop may have frames to read in between)."""

    async def scenario() -> list[int]:
        executor, loop = _recording_loop(max_batch_size=4)
        loop.submit(7, _one_action_plan(), make_obs(0), received_s=time.monotonic())
        loop._decide(loop.clock(), ahead=False)  # no await before the check
        handed = list(executor.batches)
        assert loop._running is not None
        loop._running.cancel()
        return handed

    assert run(scenario) == [1]


def test_the_next_batch_starts_as_the_previous_one_ends() -> None:
    """When a batch's results come back, the next batch goes to the worker in that same
    step, before anything the results wake (the replies) runs."""

    async def scenario() -> list[int]:
        executor, loop = _recording_loop(max_batch_size=1)
        loop.start()
        first = loop.submit(7, _one_action_plan(), make_obs(0), received_s=time.monotonic())
        loop.submit(8, _one_action_plan(), make_obs(1), received_s=time.monotonic())
        while not executor.batches:
            await asyncio.sleep(0)
        seen_by_the_reply: list[int] = []
        first.add_done_callback(lambda _: seen_by_the_reply.append(len(executor.batches)))
        chunk = np.zeros((10, 7), np.float32)
        executor.finish(0, BatchOutcome(chunks=[chunk], policy_s=0.05, ok=True))
        await first
        while len(executor.batches) < 2:
            await asyncio.sleep(0)
        executor.finish(1, BatchOutcome(chunks=[chunk], policy_s=0.05, ok=True))
        await loop.stop()
        return seen_by_the_reply

    assert run(scenario) == [2]


# Forward passes expected to take 0.5 s, decided 0.49 s ahead: the loop decides ahead
# 10 ms after a batch starts, and would take a queued batch back only after 0.99 s.
_AHEAD: dict[str, Any] = {"latency_s": 0.5, "decide_ahead_s": 0.49, "clock": lambda: 100.0}


def test_the_next_batch_is_decided_ahead_and_queued_behind_the_running_one() -> None:
    """decide_ahead_s before the running batch should end, the loop decides the next one as
    if that end were now and hands it to the worker, which runs it as the first ends: its
    chunk is expected one forward pass after that end. Nothing more is decided when the
    first ends, and the profile learns the worker's own times."""

    async def scenario() -> tuple[list[tuple[int, float]], int, float]:
        executor, loop = _recording_loop(max_batch_size=1, **_AHEAD)
        loop.start()
        first = loop.submit(7, _one_action_plan(), make_obs(0), received_s=100.0)
        second = loop.submit(8, _one_action_plan(), make_obs(1), received_s=100.0)
        while len(executor.batches) < 2:  # 100.5 - 0.49: 10 ms from the first dispatch
            await asyncio.sleep(0.001)
        assert not first.done()
        expected = loop.mirror.pending_of(8)
        executor.finish(0, _chunk_outcome(0.05))
        await first
        await asyncio.sleep(0.02)  # past the next ahead decision: nothing is waiting
        handed = len(executor.batches)
        executor.finish(1, _chunk_outcome(0.08))
        await second
        await loop.stop()
        return expected, handed, loop.profile.latency_s(1)

    expected, handed, learned = run(scenario)
    assert expected == [(0, pytest.approx(100.0 + 0.5 + 0.5 + 0.004))]
    assert handed == 2
    assert learned == pytest.approx(0.065)  # median of the worker's 0.05 and 0.08


def test_a_slow_scheduler_is_asked_ahead_by_its_recent_decision_time() -> None:
    """The loop learns how long the scheduler takes to decide and asks that much earlier,
    so a slow decision (a scheduler rolling the fleet forward) still has the next batch
    queued when the running one ends."""

    class Slow(Scheduler):
        name = "slow"

        def schedule(self, snapshot: Snapshot) -> Batch:
            time.sleep(0.05)
            return Batch((int(snapshot.robot_id[0]),))

    async def scenario() -> tuple[float, float]:
        loop = BatchLoop(
            _RecordingExecutor(),  # type: ignore[arg-type]
            Slow(),
            LatencyProfile({1: 0.5}),
            max_batch_size=1,
            clock=lambda: 100.0,
            decide_ahead_s=0.01,
        )
        loop.submit(7, _one_action_plan(), make_obs(0), received_s=100.0)
        loop._decide(100.0, ahead=False)  # starts a batch expected to end at 100.5
        learned = loop.recent_decision_s
        assert loop._timer is not None
        delay_s = loop._timer.when() - asyncio.get_running_loop().time()
        loop._cancel_timer()
        assert loop._running is not None
        loop._running.cancel()
        return learned, delay_s

    learned, delay_s = run(scenario)
    assert learned >= 0.2 * 0.05  # a fifth of the first 50 ms decision
    # The timer fires the decision-ahead margin plus the learned decision time early.
    assert delay_s == pytest.approx(0.5 - 0.01 - learned, abs=0.02)


async def _one_robot_in_two_batches(
    executor: _RecordingExecutor, loop: BatchLoop, robot_id: int, *, newer_index: int
) -> tuple[asyncio.Future[ChunkResult], asyncio.Future[ChunkResult]]:
    """Start ``loop``; a pipelined robot's observation at index 0 goes into batch 0, its
    newer one (at ``newer_index``) into batch 1, decided ahead behind it."""
    loop.start()
    older = loop.submit(
        robot_id, _one_action_plan(0, 5), make_obs(robot_id), received_s=100.0, pipelined=True
    )
    while not executor.batches:
        await asyncio.sleep(0)
    newer = loop.submit(
        robot_id,
        _one_action_plan(newer_index, 5 - newer_index),
        make_obs(robot_id, newer_index),
        received_s=100.0,
        pipelined=True,
    )
    while len(executor.batches) < 2:
        await asyncio.sleep(0.001)
    return older, newer


def test_a_pipelined_robot_in_the_running_and_the_queued_batch_keeps_both_requests() -> None:
    """A pipelined robot's newer observation is queued behind the batch that computes its
    older one: each request is its own; a disconnect fails both and drops both chunks."""

    async def scenario() -> tuple[list[int], int]:
        executor, loop = _recording_loop(max_batch_size=1, **_AHEAD)
        older, newer = await _one_robot_in_two_batches(executor, loop, 7, newer_index=2)
        starts = [start for start, _ in loop.mirror.pending_of(7)]
        loop.remove(7)
        for request in (older, newer):
            with pytest.raises(SessionClosed):
                await request
        executor.finish(0, _chunk_outcome(0.05))
        executor.finish(1, _chunk_outcome(0.05))
        await loop.stop()
        return starts, loop.stats().num_dropped_chunks

    starts, dropped = run(scenario)
    assert starts == [0, 2]
    assert dropped == 2


def test_a_batch_decided_ahead_is_taken_back_when_the_running_one_overruns() -> None:
    """Robot 8 is queued 40 ms before batch 0 should end (at 100.05); batch 0 is still
    running 40 ms after that, so the queued batch is taken back: robot 8's newer
    observation replaces the queued one, and robot 9, which asked meanwhile, rides the
    next batch with it, decided when batch 0 ends."""

    async def scenario() -> tuple[list[int], list[int], int]:
        executor, loop = _recording_loop(max_batch_size=4, decide_ahead_s=0.04, clock=lambda: 100.0)
        loop.start()
        loop.submit(7, _one_action_plan(), make_obs(0), received_s=100.0)
        while not executor.batches:
            await asyncio.sleep(0)
        queued = loop.submit(
            8, _one_action_plan(0, 5), make_obs(1), received_s=100.0, pipelined=True
        )
        while len(executor.batches) < 2:
            await asyncio.sleep(0.001)
        newer = loop.submit(
            8, _one_action_plan(1, 4), make_obs(1, 1), received_s=100.0, pipelined=True
        )
        late = loop.submit(9, _one_action_plan(), make_obs(2), received_s=100.0)
        while not queued.done():  # taken back 80 ms after batch 0 started
            await asyncio.sleep(0.001)
        with pytest.raises(Superseded):
            queued.result()
        assert len(executor.batches) == 2
        executor.finish(0, _chunk_outcome(0.15))
        while len(executor.batches) < 3:
            await asyncio.sleep(0.001)
        starts = [start for start, _ in loop.mirror.pending_of(8)]
        executor.finish(2, BatchOutcome([np.zeros((10, 7), np.float32)] * 2, 0.05, True))
        await asyncio.gather(newer, late)
        await loop.stop()
        return executor.batches, starts, loop.stats().num_taken_back

    batches, starts, taken_back = run(scenario)
    assert batches == [1, 1, 2]
    assert starts == [1]  # the taken-back chunk from index 0 is no longer expected
    assert taken_back == 1


def test_a_pipelined_robots_request_is_taken_back_from_behind_its_own_running_one() -> None:
    """A pipelined robot has one request in the running batch and its next in the batch
    decided ahead; the running batch overruns, so the queued one is taken back: that
    request waits again (the robot's running request stays in flight, told apart from it
    by identity, not by comparing observations) and rides the next batch."""

    async def scenario() -> tuple[list[int], int]:
        executor, loop = _recording_loop(max_batch_size=4, decide_ahead_s=0.04, clock=lambda: 100.0)
        first, second = await _one_robot_in_two_batches(executor, loop, 0, newer_index=1)
        async with asyncio.timeout(5.0):
            while loop.stats().num_taken_back == 0:  # 80 ms after batch 0 started
                await asyncio.sleep(0.001)
        executor.finish(0, _chunk_outcome(0.15))
        await first
        async with asyncio.timeout(5.0):
            while len(executor.batches) < 3:
                await asyncio.sleep(0.001)
        executor.finish(2, _chunk_outcome(0.05))
        async with asyncio.timeout(5.0):
            await second
        await loop.stop()
        return executor.batches, loop.stats().num_taken_back

    batches, taken_back = run(scenario)
    assert batches == [1, 1, 1]
    assert taken_back == 1


def test_the_engine_sets_the_switch_interval_while_it_runs() -> None:
    async def scenario() -> float:
        engine = make_engine(switch_interval_s=0.0007)
        await engine.start()
        running = sys.getswitchinterval()
        await engine.stop()
        return running

    before = sys.getswitchinterval()
    assert run(scenario) == pytest.approx(0.0007)
    assert sys.getswitchinterval() == before


def test_a_fault_taking_back_one_robots_request_fails_that_robot_only() -> None:
    """Robots 8 and 9 ride the batch decided ahead, which is taken back when batch 0
    overruns; putting robot 8's request back fails (a fault injected in the mirror): its
    request is answered with an error, and robot 9's waits again and rides the next batch."""

    async def scenario() -> tuple[BaseException | None, list[int]]:
        executor, loop = _recording_loop(max_batch_size=4, decide_ahead_s=0.04, clock=lambda: 100.0)
        undispatch = loop.mirror.undispatch

        def faulty(robot_id: int, chunk_start: int, land_s: float) -> None:
            if robot_id == 8:
                raise RuntimeError("injected")
            undispatch(robot_id, chunk_start, land_s)

        loop.mirror.undispatch = faulty  # type: ignore[method-assign]
        loop.start()
        loop.submit(7, _one_action_plan(), make_obs(0), received_s=100.0)
        while not executor.batches:
            await asyncio.sleep(0)
        eight = loop.submit(8, _one_action_plan(), make_obs(1), received_s=100.0)
        nine = loop.submit(9, _one_action_plan(), make_obs(2), received_s=100.0)
        async with asyncio.timeout(5.0):
            while not eight.done():  # taken back 80 ms after batch 0 started
                await asyncio.sleep(0.001)
        executor.finish(0, _chunk_outcome(0.15))
        async with asyncio.timeout(5.0):
            while len(executor.batches) < 3:
                await asyncio.sleep(0.001)
            executor.finish(2, _chunk_outcome(0.05))
            await nine
        await loop.stop()
        return eight.exception(), executor.batches

    error, batches = run(scenario)
    assert isinstance(error, RequestError)
    assert batches == [1, 2, 1]


def test_engines_stopped_in_any_order_put_the_switch_interval_back() -> None:
    """Two engines in one process (replicas in a test): while any runs, the shortest
    interval either asks for holds; once both stopped, in the order they started, the
    process has its own interval again."""

    async def scenario() -> list[float]:
        first = make_engine(switch_interval_s=0.0007)
        second = make_engine(switch_interval_s=0.0009)
        seen = []
        await first.start()
        await second.start()
        seen.append(sys.getswitchinterval())
        await first.stop()
        seen.append(sys.getswitchinterval())
        await second.stop()
        await second.stop()  # twice: nothing more
        return seen

    before = sys.getswitchinterval()
    assert run(scenario) == [pytest.approx(0.0007), pytest.approx(0.0009)]
    assert sys.getswitchinterval() == before


def test_server_config_checks_the_executor_options() -> None:
    with pytest.raises(ValueError, match=r"--server\.decide-ahead-s must be >= 0"):
        ServerConfig(decide_ahead_s=-0.001)
    with pytest.raises(ValueError, match=r"--server\.switch-interval-s must be in \(0, 1\]"):
        ServerConfig(switch_interval_s=0.0)
    assert ServerConfig(switch_interval_s=None).switch_interval_s is None


def test_wait_until_is_honoured() -> None:
    """An empty batch with wait_until_s: the loop asks again at that time, not before."""
    policy = make_mock()

    async def scenario() -> tuple[float, _WaitForTwo]:
        start = time.monotonic()
        scheduler = _WaitForTwo(hold_until_s=start + 0.15)
        engine = make_engine(policy, scheduler=scheduler)
        await engine.start()
        reply = await engine.infer(engine.open_session(peer="a"), make_obs(0), received_s=start)
        await engine.stop()
        return reply.wait_s, scheduler

    wait_s, scheduler = run(scenario)
    assert 0.13 < wait_s < 0.3
    assert [n for _, n in scheduler.calls] == [1, 1]


def test_new_request_cuts_a_wait_short() -> None:
    """A request arriving during a wait wakes the loop at once."""
    policy = make_mock()

    async def scenario() -> list[Reply]:
        start = time.monotonic()
        engine = make_engine(policy, scheduler=_WaitForTwo(hold_until_s=start + 5.0))
        await engine.start()
        first = asyncio.ensure_future(
            engine.infer(engine.open_session(peer="a"), make_obs(0), received_s=start)
        )
        await asyncio.sleep(0.05)
        second = engine.infer(engine.open_session(peer="b"), make_obs(1), received_s=start)
        replies = list(await asyncio.gather(first, second))
        await engine.stop()
        return replies

    replies = run(scenario)
    assert [r.batch_size for r in replies] == [2, 2]
    assert replies[0].wait_s < 0.5


def test_disconnect_mid_batch_drops_only_that_chunk() -> None:
    """A session closed while its batch computes: the others are answered, its chunk dropped."""
    policy = GatedPolicy(make_mock())

    async def scenario() -> tuple[list[Any], dict[str, Any]]:
        engine = make_engine(policy, max_batch_size=4)
        await engine.start()
        sessions = [engine.open_session(peer=f"p{i}") for i in range(3)]
        tasks = [
            asyncio.ensure_future(engine.infer(s, make_obs(i), received_s=engine.clock()))
            for i, s in enumerate(sessions)
        ]
        first = await asyncio.to_thread(policy.next_batch)
        assert first[0]["observation/state"][0] == make_obs(0)["observation/state"][0]
        # Close a robot of the running batch.
        engine.close_session(sessions[0])
        policy.allow(10)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # The engine keeps serving the others.
        again = await engine.infer(sessions[1], make_obs(1, 1), received_s=engine.clock())
        results.append(again)
        stats = engine.stats()
        await engine.stop()
        return results, {"dropped": stats.num_dropped_chunks, "sessions": stats.num_sessions}

    results, stats = run(scenario)
    assert isinstance(results[0], SessionClosed)
    for i in (1, 2):
        np.testing.assert_array_equal(results[i].actions, expected_actions(policy, make_obs(i)))
    np.testing.assert_array_equal(results[3].actions, expected_actions(policy, make_obs(1, 1)))
    assert stats == {"dropped": 1, "sessions": 2}


class _Fragile(Policy):
    """The mock, but raises on any batch holding an observation whose state starts at 999."""

    def __init__(self) -> None:
        self.inner = make_mock()
        self.lock = threading.Lock()

    @property
    def metadata(self) -> PolicyMetadata:
        return self.inner.metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        if any(obs["observation/state"][0] == 999 for obs in observations):
            raise ValueError("state out of range")
        return self.inner.infer_batch(observations)


def test_policy_failure_costs_only_the_offending_robot() -> None:
    """A batch that raises is retried one by one: only the bad observation gets an error."""
    policy = _Fragile()
    bad = make_obs(9)
    bad["observation/state"] = np.full(8, 999, np.float32)

    async def scenario() -> list[Any]:
        engine = make_engine(policy, max_batch_size=4, scheduler=_WaitForTwo(time.monotonic() + 5))
        await engine.start()
        good_session, bad_session = (engine.open_session(peer=p) for p in "ab")
        results = await asyncio.gather(
            engine.infer(good_session, make_obs(0), received_s=engine.clock()),
            engine.infer(bad_session, bad, received_s=engine.clock()),
            return_exceptions=True,
        )
        await engine.stop()
        return results

    good, error = run(scenario)
    np.testing.assert_array_equal(good.actions, expected_actions(policy, make_obs(0)))
    assert isinstance(error, PolicyError)
    assert "ValueError: state out of range" in str(error)
    assert "Traceback" not in str(error)


def test_request_before_min_horizon_is_refused() -> None:
    """An observation only 1 action into its chunk, with min horizon 3, cannot be served."""

    async def scenario() -> None:
        engine = make_engine()
        await engine.start()
        session = engine.open_session(peer="a")
        reply = await engine.infer(
            session, attach(make_obs(0), armory_state("a")), received_s=engine.clock()
        )
        state = armory_state(
            "a",
            action_index=reply.chunk_start + 1,
            actions_left=9,
            chunk_start=reply.chunk_start,
            min_execution_horizon=3,
        )
        try:
            with pytest.raises(QueueStateError, match="min_execution_horizon is 3"):
                await engine.infer(
                    session, attach(make_obs(0, 1), state), received_s=engine.clock()
                )
        finally:
            await engine.stop()

    run(scenario)


def test_armory_reply_carries_chunk_start_and_next_request_index() -> None:
    """The chunk starts at the reported index; the next index follows the directed rule."""

    async def scenario() -> list[Reply]:
        engine = make_engine(directed_margin_s=0.0)
        await engine.start()
        session = engine.open_session(peer="a")
        replies = []
        state = armory_state("a", action_index=0)
        for step in range(3):
            reply = await engine.infer(
                session, attach(make_obs(0, step), state), received_s=engine.clock()
            )
            replies.append(reply)
            index = reply.next_request_index
            state = armory_state(
                "a",
                action_index=index,
                actions_left=reply.chunk_start + 10 - index,
                chunk_start=reply.chunk_start,
            )
        await engine.stop()
        return replies

    replies = run(scenario)
    assert [r.chunk_start for r in replies] == [
        0,
        replies[0].next_request_index,
        replies[1].next_request_index,
    ]
    for reply in replies:
        # lead: links (2 x 2 ms) + a forward pass of ~18 ms: ~22 ms = 1 action at 20 Hz.
        assert reply.chunk_start + 8 <= reply.next_request_index <= reply.chunk_start + 9


def test_a_directed_robot_the_scheduler_holds_is_told_to_hold_less() -> None:
    """A directed robot the scheduler serves only part of its ticks is told the lead its
    share is worth (here none: send once dry, at the chunk's end); a robot that is not
    directed keeps the usual lead."""

    class Holding(MaxBatchScheduler):
        def held_shares(self, snapshot: Snapshot) -> np.ndarray:
            directed = snapshot.directed
            return np.full(snapshot.num_robots, 1.0 if directed is None else 0.5)

    async def scenario(directed: bool) -> Reply:
        engine = make_engine(scheduler=Holding(), directed_margin_s=0.0)
        await engine.start()
        try:
            session = engine.open_session(peer="a")
            state = armory_state("a", directed=directed)
            return await engine.infer(
                session, attach(make_obs(0), state), received_s=engine.clock()
            )
        finally:
            await engine.stop()

    held = run(lambda: scenario(True))
    assert held.next_request_index == held.chunk_start + 10
    free = run(lambda: scenario(False))
    assert free.chunk_start + 8 <= free.next_request_index <= free.chunk_start + 9


def test_new_episode_restarts_the_indices() -> None:
    """A new episode id may restart the action index at 0."""

    async def scenario() -> list[int]:
        engine = make_engine()
        await engine.start()
        session = engine.open_session(peer="a")
        starts = []
        for episode, index in [(0, 0), (0, 10), (1, 0)]:
            state = armory_state(
                "a",
                action_index=index,
                chunk_start=None if index == 0 else 0,
                episode_id=episode,
            )
            reply = await engine.infer(
                session, attach(make_obs(0, index), state), received_s=engine.clock()
            )
            starts.append(reply.chunk_start)
        await engine.stop()
        return starts

    assert run(scenario) == [0, 10, 0]


def test_newer_connection_of_the_same_robot_replaces_the_older() -> None:
    """A second session reporting the same robot id evicts the first."""
    evicted: list[str] = []

    async def scenario() -> bool:
        engine = make_engine()
        await engine.start()
        old = engine.open_session(peer="a", evict=evicted.append)
        new = engine.open_session(peer="b")
        await engine.infer(old, attach(make_obs(0), armory_state("arm")), received_s=engine.clock())
        await engine.infer(new, attach(make_obs(1), armory_state("arm")), received_s=engine.clock())
        await engine.stop()
        return old.closed

    assert run(scenario)
    assert evicted == ["replaced by a newer connection of robot 'arm'"]


def test_engine_reads_time_from_its_clock() -> None:
    """Deadlines live on the injected clock: a plain client's deadline is its arrival."""
    offset = 1000.0

    async def scenario() -> float:
        engine = make_engine(clock=lambda: time.monotonic() + offset, default_link_s=0.0)
        await engine.start()
        session = engine.open_session(peer="a")
        received = engine.clock()
        policy_gate = asyncio.ensure_future(engine.infer(session, make_obs(0), received_s=received))
        await policy_gate
        # After the answer the mirror expects the chunk to last 10 actions at 20 Hz.
        deadline = engine.loop.mirror.deadline_of(session.engine_id)
        await engine.stop()
        return deadline - received

    assert 0.5 <= run(scenario) < 0.7
