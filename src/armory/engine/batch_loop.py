"""The real-time batch loop: the scheduler decides, the executor computes, futures answer.

It decides through the same :class:`~armory.engine.decision_step.DecisionStep` as
the simulator (``sim/simulator.py``): whenever the executor is free and some robot
is eligible, the step snapshots the mirror, asks the scheduler, checks the batch
and dispatches each robot with its expected landing time (now + learned latency +
downlink); after the forward pass it feeds the measured seconds to the profile and
the scheduler. An empty batch with ``wait_until_s`` is honoured by
sleeping until then or until something changes (a request arrives, a robot
leaves, a batch finishes), whichever comes first.

With ``decide_ahead_s`` (the server's default is 2 ms) the executor is "free" that
long, plus the scheduler's recent decision time, before the running batch should
end: the loop decides then, with ``now`` the expected end, and queues the batch
behind the running one, so the worker goes from one forward pass to the next
without waiting for the loop, however long the scheduler takes to decide. If the running
batch overruns its expected end by as much again, the queued one is taken back
(unless the worker has started it) and decided afresh when the running one ends.
The seconds fed to the profile are the worker's own for each batch.

Everything here runs on the event loop except the forward pass (see
:mod:`armory.engine.executor`). Time comes from one injectable ``clock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from armory.core.errors import (
    PolicyError,
    QueueStateError,
    RequestError,
    RequestTimeout,
    ServerClosing,
    SessionClosed,
    Superseded,
)
from armory.core.latency_profile import LatencyProfile
from armory.engine.batch_observer import BatchObserver
from armory.engine.decision_step import DecisionStep
from armory.engine.executor import BatchOutcome, Executor
from armory.engine.queue_mirror import QueueMirror, check_limits, check_report
from armory.engine.session import RequestPlan
from armory.scheduling.base import Scheduler
from armory.scheduling.rule_changes import RuleChanges
from armory.scheduling.snapshot import Batch

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
"""Seconds on the server's clock; advances with real time (time.monotonic by default)."""

_MIN_WAIT_S = 0.001
"""Shortest sleep when a scheduler asks to be woken at a time already past."""

_DECISION_SMOOTHING = 0.2
"""Weight of the newest decision in the moving average of decision times."""

_CULPRIT = (
    "the scheduler failed on this robot's queue state, so this request was refused (the "
    "other robots were served); send a new observation"
)
_NOT_SCHEDULED = "the server failed to schedule this request"


@dataclass(frozen=True)
class ChunkResult:
    """One robot's answer from one batch."""

    actions: np.ndarray
    """(action_horizon, action_dim) float32."""
    chunk_start: int
    """Action index the chunk starts at (the index of the observation behind it)."""
    batch_size: int
    """Robots in the forward pass that computed it."""
    wait_s: float
    """Seconds from submission to dispatch, less the decision that dispatched it."""
    decision_s: float
    """Seconds spent taking the snapshot, scheduling and checking the batch."""
    intake_s: float
    """Seconds from the request's arrival until :meth:`BatchLoop.submit` held it (decode,
    validation, queue state)."""
    forward_s: float
    """Seconds from dispatch until the chunks were back on the event loop."""
    policy_s: float
    """Seconds the worker spent inside ``infer_batch``."""


@dataclass(frozen=True)
class LoopStats:
    """Counters of the batch loop since it started."""

    num_batches: int
    batch_size_counts: dict[int, int]
    """Forward passes per batch size."""
    num_dropped_chunks: int
    """Chunks computed for robots that disconnected before they could be answered."""
    busy_s: float
    """Seconds the executor spent on forward passes."""
    num_decisions: int
    """Calls to ``scheduler.schedule`` (empty batches included)."""
    decision_s: float
    """Seconds spent in those calls (snapshot and check included)."""
    decision_cpu_s: float
    """Processor seconds of the event loop's thread in those calls."""
    num_taken_back: int
    """Batches decided ahead and taken back because the batch before them overran."""
    num_scheduler_faults: int = 0
    """Decisions on which the scheduler raised (taken without the robot that caused it,
    or by the safe rule)."""
    decisions_by_rule: dict[str, int] = field(default_factory=dict)
    """Decisions by the rule that made them (``Batch.rule``; waits included)."""
    rule_changes: dict[str, RuleChanges] = field(default_factory=dict)
    """Per rule, what it changed against the base rule alone (when explained)."""

    @property
    def mean_batch_size(self) -> float:
        total = sum(self.batch_size_counts.values())
        if not total:
            return 0.0
        return sum(b * n for b, n in self.batch_size_counts.items()) / total


@dataclass(eq=False)
class _Request:
    """One robot's observation waiting for, or riding, a batch. Requests are told apart by
    identity (a robot may have several in flight; observations hold arrays)."""

    robot_id: int
    observation: Mapping[str, Any]
    future: asyncio.Future[ChunkResult]
    received_s: float
    submitted_s: float
    chunk_start: int = 0
    land_s: float = 0.0
    """When the mirror expects its chunk to land (set at dispatch)."""


@dataclass
class _Queued:
    """A batch decided ahead, waiting on the worker behind the running one."""

    handled: asyncio.Future[None]
    requests: list[_Request]
    latency_s: float
    handle: Future[None]
    """The worker's future for it: ``cancel()`` takes it back if not started."""


@dataclass
class _Counters:
    num_batches: int = 0
    batch_sizes: Counter[int] = field(default_factory=Counter)
    num_dropped_chunks: int = 0
    busy_s: float = 0.0
    num_taken_back: int = 0


class BatchLoop:
    """Owns the mirror, the scheduler, the learned profile and the executor's queue."""

    def __init__(
        self,
        executor: Executor,
        scheduler: Scheduler,
        profile: LatencyProfile,
        *,
        max_batch_size: int,
        clock: Clock = time.monotonic,
        check_invariants: bool = True,
        idle_poll_s: float = 0.05,
        decide_ahead_s: float = 0.0,
        request_timeout_s: float | None = None,
        observer: BatchObserver | None = None,
        explain: bool = False,
    ) -> None:
        self.step = DecisionStep(
            QueueMirror(),
            scheduler,
            profile,
            max_batch_size=max_batch_size,
            check_invariants=check_invariants,
            explain=explain,
        )
        """Snapshot, schedule, check and dispatch, as in the simulator."""
        self.executor = executor
        self.clock = clock
        self.idle_poll_s = idle_poll_s
        """Re-ask a scheduler that returned an empty batch without ``wait_until_s`` after this."""
        self.decide_ahead_s = decide_ahead_s
        """Decide the next batch this long (plus the recent decision time) before the
        running one should end, and queue it behind it (0: when it ends)."""
        self.recent_decision_s = 0.0
        """Moving average of the scheduler's time per decision (added to the lead)."""
        self.request_timeout_s = request_timeout_s
        """A request no batch has taken this long after its arrival is withdrawn and
        fails with RequestTimeout (None: requests wait as long as it takes)."""
        self.observer = observer
        """Told of every decision and forward pass (metrics, decision logs)."""
        self._held_shares: dict[int, float] = {}
        """Robots the scheduler keeps waiting dry, with the share of their ticks it means
        to serve them, as of batch ``_held_shares_batch``."""
        self._held_shares_batch = -1
        self._waiting: dict[int, _Request] = {}
        self._inflight: dict[int, list[_Request]] = {}
        """Requests handed to the worker, per robot (a pipelined robot may have one in the
        running batch and one in the batch queued behind it)."""
        self._counters = _Counters()
        self._wake = asyncio.Event()
        self._running: asyncio.Future[None] | None = None
        """Done when the batch on the executor is handled (None: the executor is free)."""
        self._running_end_s = 0.0
        """When the running batch is expected to end (learned latency from its start)."""
        self._queued: _Queued | None = None
        """A batch decided ahead and queued behind the running one."""
        self._timer: asyncio.TimerHandle | None = None
        """Decides ahead while no batch is queued; takes the queued one back after."""
        self._task: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        """Sweeps waiting requests past the request timeout."""
        self._closing = False

    @property
    def mirror(self) -> QueueMirror:
        return self.step.mirror

    @property
    def scheduler(self) -> Scheduler:
        return self.step.scheduler

    @property
    def profile(self) -> LatencyProfile:
        return self.step.profile

    @property
    def max_batch_size(self) -> int:
        return self.step.max_batch_size

    @property
    def recent_batch_size(self) -> float:
        """Moving average of batch sizes (used to tell robots when to ask again)."""
        return self.step.recent_batch_size

    # ---- lifecycle -----------------------------------------------------

    def start(self) -> None:
        """Start the loop task on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="armory-batch-loop")
        if self.request_timeout_s is not None:
            self._schedule_expiry()

    async def stop(self) -> None:
        """Refuse new requests, fail waiting ones, let a running batch finish, stop the worker."""
        self._closing = True
        if self._expiry is not None:
            self._expiry.cancel()
        for request in list(self._waiting.values()):
            _fail(request.future, ServerClosing("the server is shutting down"))
        self._waiting.clear()
        self._cancel_timer()
        for handled in (self._running, self._queued.handled if self._queued else None):
            if handled is not None:
                with contextlib.suppress(Exception):
                    await handled
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self.executor.shutdown)

    # ---- requests ------------------------------------------------------

    def submit(
        self,
        robot_id: int,
        plan: RequestPlan,
        observation: Mapping[str, Any],
        *,
        received_s: float,
        pipelined: bool = False,
    ) -> asyncio.Future[ChunkResult]:
        """Hold ``observation`` as the robot's request; the future resolves with its chunk.

        Raises QueueStateError when the request can never be served, or when the robot
        already has a request waiting or being computed. A ``pipelined`` robot (every-tick,
        sending without waiting for replies) instead replaces its request still waiting
        (that one's future fails with Superseded), may send while its chunk is computed,
        and an observation too early to serve waits, not eligible, until a newer one
        replaces it.
        """
        if self._closing:
            raise ServerClosing("the server is shutting down")
        try:  # before anything changes: no observation is ever half applied
            check_limits(plan.limits)
            check_report(plan.report)
        except ValueError as exc:
            raise QueueStateError(f"queue state out of range: {exc}") from None
        if not pipelined and (robot_id in self._waiting or self._inflight.get(robot_id)):
            raise QueueStateError(
                "this connection sent a request before the reply to its previous one; send "
                "one at a time (an Armory client in every-tick mode may pipeline)"
            )
        replaced = self._waiting.pop(robot_id, None)
        if replaced is not None:
            _fail(replaced.future, Superseded("a newer observation of the robot replaced it"))
        mirror = self.mirror
        if plan.reset and robot_id in mirror:
            mirror.remove(robot_id)
        if robot_id in mirror:
            mirror.update_limits(robot_id, plan.limits)
        else:
            mirror.add(robot_id, plan.limits, received_s)
        if not mirror.observe(robot_id, plan.report, received_s):
            # Indices went back without a new episode id: the robot restarted its count.
            mirror.remove(robot_id)
            mirror.add(robot_id, plan.limits, received_s)
            mirror.observe(robot_id, plan.report, received_s)
        if not mirror.is_eligible(robot_id) and not pipelined:
            last = mirror.last_chunk_start_of(robot_id)
            need = plan.limits.min_execution_horizon
            raise QueueStateError(
                f"observation at action index {plan.report.action_index} is only "
                f"{plan.report.action_index - last} actions past the start of the last chunk "
                f"({last}); min_execution_horizon is {need}: send it at index >= {last + need}"
            )
        future: asyncio.Future[ChunkResult] = asyncio.get_running_loop().create_future()
        # A robot that left, or a request replaced, may never read its failure.
        future.add_done_callback(_observe_failure)
        self._waiting[robot_id] = _Request(
            robot_id=robot_id,
            observation=observation,
            future=future,
            received_s=received_s,
            submitted_s=self.clock(),
        )
        self._wake.set()
        return future

    def withdraw(self, robot_id: int, *, superseded: str | None = None) -> bool:
        """Take back the robot's waiting request before any batch took it; False when it is
        already in a batch, or gone. Its future is cancelled (every-tick deferral), or with
        ``superseded`` fails with Superseded (its robot is answered "deferred")."""
        request = self._waiting.pop(robot_id, None)
        if request is None:
            return False
        if superseded is None:
            request.future.cancel()
        else:
            _fail(request.future, Superseded(superseded))
        if robot_id in self.mirror:
            self.mirror.release(robot_id)
        return True

    def _schedule_expiry(self) -> None:
        assert self.request_timeout_s is not None
        period_s = min(1.0, self.request_timeout_s / 4)
        self._expiry = asyncio.get_running_loop().call_later(period_s, self._expire)

    def _expire(self) -> None:
        """Timer: withdraw every waiting request older than the request timeout (its
        future fails with RequestTimeout); then again in a while. No cost per request."""
        assert self.request_timeout_s is not None
        timeout_s = self.request_timeout_s
        oldest_s = self.clock() - timeout_s
        for robot_id, request in list(self._waiting.items()):
            if request.received_s < oldest_s:
                del self._waiting[robot_id]
                if robot_id in self.mirror:
                    self.mirror.release(robot_id)
                _fail(
                    request.future,
                    RequestTimeout(
                        f"no batch took this request within {timeout_s:g} s "
                        "(--server.request-timeout-s): its queue state put it behind every "
                        "other robot; send a new observation"
                    ),
                )
        self._schedule_expiry()

    def remove(self, robot_id: int) -> None:
        """Forget a robot whose connection closed; a chunk being computed for it is dropped."""
        waiting = self._waiting.pop(robot_id, None)
        for request in [waiting, *self._inflight.pop(robot_id, [])]:
            if request is not None:
                _fail(request.future, SessionClosed("the robot's connection closed"))
        if robot_id in self.mirror:
            self.mirror.remove(robot_id)
            self._wake.set()

    def held_share(self, robot_id: int) -> float:
        """The share of its ticks the scheduler means to serve this directed robot,
        below 1 where it will keep it waiting dry between chunks
        (``Scheduler.held_shares``), asked once per batch: its next observation should then
        be taken holding fewer actions than the usual lead, or once dry."""
        if self._held_shares_batch != self._counters.num_batches:
            try:
                self._held_shares = self.step.held_shares(self.clock())
            except Exception:
                # Only advice: robots are then told to send with the usual lead.
                logger.exception("the scheduler's held_shares failed; no robot is held")
                self._held_shares = {}
            self._held_shares_batch = self._counters.num_batches
        return self._held_shares.get(robot_id, 1.0)

    def stats(self) -> LoopStats:
        c, d = self._counters, self.step.counters
        return LoopStats(
            num_batches=c.num_batches,
            batch_size_counts=dict(sorted(c.batch_sizes.items())),
            num_dropped_chunks=c.num_dropped_chunks,
            busy_s=c.busy_s,
            num_decisions=d.num_decisions,
            decision_s=d.decision_s,
            decision_cpu_s=d.decision_cpu_s,
            num_taken_back=c.num_taken_back,
            num_scheduler_faults=d.num_scheduler_faults,
            decisions_by_rule=dict(d.decisions_by_rule),
            rule_changes=dict(d.rule_changes),
        )

    # ---- the loop ------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            timeout_s = self._decide_if_free()
            if timeout_s is None:
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_s):
                        await self._wake.wait()

    def _decide_if_free(self) -> float | None:
        """Decide when the executor is free and requests wait; how long to sleep before
        asking again (None: until something changes)."""
        if self._running is not None or not self._waiting:
            return None
        return self._decide_or_fail(self.clock(), ahead=False)

    def _decide_ahead(self) -> None:
        """Timer, shortly before the running batch should end: decide the next batch as
        if that end were now, and queue it behind the running one."""
        self._timer = None
        if self._running is None or self._queued is not None or not self._waiting:
            return
        self._decide_or_fail(max(self._running_end_s, self.clock()), ahead=True)

    def _decide_or_fail(self, now_s: float, *, ahead: bool) -> float | None:
        """:meth:`_decide`; a failing scheduler fails the waiting requests."""
        try:
            return self._decide(now_s, ahead=ahead)
        except Exception:
            logger.exception("scheduling failed; failing the waiting requests")
            for request in self._waiting.values():
                _fail(request.future, RequestError(_NOT_SCHEDULED))
            self._waiting.clear()
            return None

    def _decide(self, now_s: float, *, ahead: bool) -> float | None:
        """Ask the scheduler at ``now_s``; start a batch (``ahead``: queue it behind the
        running one), or return how long to sleep before asking again (None: until
        something changes)."""
        decision = self.step.decide(now_s)
        if decision is None:
            return None
        for robot_id in decision.refused:  # the scheduler failed on its queue state
            request = self._waiting.pop(robot_id, None)
            if request is not None:
                _fail(request.future, QueueStateError(_CULPRIT))
        batch, decision_s = decision.batch, decision.decision_s
        self.recent_decision_s += _DECISION_SMOOTHING * (decision_s - self.recent_decision_s)
        if self.observer is not None:
            self.observer.decided(batch, decision_s)
        if not batch.robot_ids:
            if batch.wait_until_s is None:
                return self.idle_poll_s
            return max(batch.wait_until_s - now_s, _MIN_WAIT_S)
        self._dispatch(batch, now_s, decision_s, ahead=ahead)
        return None

    def _dispatch(self, batch: Batch, now_s: float, decision_s: float, *, ahead: bool) -> None:
        """Hand ``batch``, which starts at ``now_s``, to the worker: at once, or (``ahead``)
        queued behind the running batch."""
        latency_s = self.step.planned_latency_s(len(batch.robot_ids))
        requests = []
        for dispatched in self.step.dispatch(batch, now_s):
            robot_id = dispatched.robot_id
            request = self._waiting.pop(robot_id)
            request.land_s = dispatched.land_s
            request.chunk_start = dispatched.chunk_start
            self._inflight.setdefault(robot_id, []).append(request)
            requests.append(request)
        # The worker gets the batch in the step that chose it, and its outcome is handled
        # in the step that wakes for it: the GPU never waits for other work queued on the
        # loop (frames to read, replies to send).
        dispatched_s = self.clock()
        handled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            handle = self.executor.start(
                [r.observation for r in requests],
                functools.partial(
                    self._batch_done, batch, requests, handled, dispatched_s, decision_s
                ),
            )
        except Exception:
            self._fail_batch(requests)
            raise
        if ahead:
            self._queued = _Queued(handled, requests, latency_s, handle)
            # Taken back if the running batch overruns its expected end by as much again.
            delay_s = max(self._running_end_s + self.decide_ahead_s - self.clock(), 0.0)
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._take_back)
        else:
            self._start_running(handled, dispatched_s + latency_s)

    def _take_back(self) -> None:
        """Timer: the running batch overran, so the batch queued behind it was decided on
        a wrong ``now``. Unless the worker has started it, its requests wait again (a
        robot's newer observation, if one came, replaces its own) and the next batch is
        decided when the running one ends, with everyone who asked meanwhile."""
        self._timer = None
        queued = self._queued
        if queued is None or not queued.handle.cancel():
            return
        self._queued = None
        for request in queued.requests:
            try:
                self._wait_again(request)
            except Exception:
                # A fault here must not leave the robot's request unanswered for good.
                logger.exception("taking back robot %d's request failed", request.robot_id)
                _fail(request.future, RequestError(_NOT_SCHEDULED))
        queued.handled.set_result(None)
        self._counters.num_taken_back += 1

    def _wait_again(self, request: _Request) -> None:
        """A request of a batch taken back waits again (unless its robot left, was refused,
        or sent a newer observation meanwhile)."""
        self._leave_inflight(request)
        if request.future.done():  # the robot left
            return
        robot_id = request.robot_id
        if robot_id not in self.mirror:  # refused meanwhile
            _fail(request.future, QueueStateError(_CULPRIT))
            return
        self.mirror.undispatch(robot_id, request.chunk_start, request.land_s)
        if robot_id in self._waiting:
            _fail(request.future, Superseded("a newer observation of the robot replaced it"))
        else:
            self._waiting[robot_id] = request

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start_running(self, handled: asyncio.Future[None], end_s: float) -> None:
        """``handled`` is now the batch on the executor, expected to end at ``end_s``; the
        next one is decided ``decide_ahead_s`` before that."""
        self._running = handled
        self._running_end_s = end_s
        if self._closing or not self.decide_ahead_s:
            return
        lead_s = self.decide_ahead_s + self.recent_decision_s
        delay_s = max(end_s - lead_s - self.clock(), 0.0)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._decide_ahead)

    def _batch_done(
        self,
        batch: Batch,
        requests: list[_Request],
        handled: asyncio.Future[None],
        dispatched_s: float,
        decision_s: float,
        outcome: BatchOutcome | BaseException,
    ) -> None:
        """Called on the loop with a batch's outcome: answer its robots, learn its time,
        and make sure the next batch is on the executor."""
        try:
            if isinstance(outcome, BaseException):
                raise outcome
            forward_s = max(self.clock() - dispatched_s, 1e-9)
            size = len(requests)
            if self.observer is not None:
                self.observer.batch_done(batch, outcome.policy_s, self.step.planned_latency_s(size))
            # The worker's own time: a batch queued behind another waited for it first.
            self.step.batch_done(batch, outcome.policy_s, learn=outcome.ok)
            c = self._counters
            c.num_batches += 1
            c.batch_sizes[size] += 1
            c.busy_s += outcome.policy_s
            for request, chunk in zip(requests, outcome.chunks, strict=True):
                self._leave_inflight(request)
                if request.future.done():
                    c.num_dropped_chunks += 1
                elif isinstance(chunk, PolicyError):
                    request.future.set_exception(chunk)
                else:
                    request.future.set_result(
                        ChunkResult(
                            actions=chunk,
                            chunk_start=request.chunk_start,
                            batch_size=size,
                            wait_s=max(dispatched_s - request.submitted_s - decision_s, 0.0),
                            decision_s=decision_s,
                            intake_s=max(request.submitted_s - request.received_s, 0.0),
                            forward_s=forward_s,
                            policy_s=outcome.policy_s,
                        )
                    )
        except BaseException as exc:
            self._fail_batch(requests)
            if isinstance(exc, Exception):
                logger.exception("a batch failed")
        finally:
            handled.set_result(None)
            self._next_after(handled)

    def _next_after(self, handled: asyncio.Future[None]) -> None:
        """The batch ``handled`` is done: a batch queued behind it is running now; else the
        next one is decided now, before the loop turns to the replies and the frames that
        came in meanwhile (a scheduler that asks to wait is asked again by the loop task).
        The worker runs batches in the order it got them, so ``handled`` is the running one."""
        self._cancel_timer()
        self._running = None
        if self._queued is not None:
            queued = self._queued
            self._queued = None
            self._start_running(queued.handled, self.clock() + queued.latency_s)
        else:
            self._decide_if_free()
        self._wake.set()

    def _leave_inflight(self, request: _Request) -> None:
        requests = self._inflight.get(request.robot_id)
        if requests is not None and request in requests:
            requests.remove(request)
            if not requests:
                del self._inflight[request.robot_id]

    def _fail_batch(self, requests: list[_Request]) -> None:
        """A batch that could not be computed: each of its robots gets an error."""
        for request in requests:
            self._leave_inflight(request)
            _fail(request.future, RequestError("the server failed to compute this chunk"))


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _observe_failure(future: asyncio.Future[Any]) -> None:
    """Mark a request's failure as read (asyncio logs failures nobody reads)."""
    if not future.cancelled():
        future.exception()
