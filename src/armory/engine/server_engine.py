"""The engine every front door talks to: sessions in, chunks out, whatever the protocol.

A transport decodes a frame into an observation map and calls
:meth:`ServerEngine.infer` with the robot's session; the engine splits off the
Armory queue state, validates the observation against the policy's declared
inputs, enters it into the mirror, waits for the batch loop to compute its chunk
and returns a :class:`Reply`. Any :class:`~armory.core.errors.RequestError` it
raises concerns that robot alone.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from armory_client.wire import ARMORY_KEY, RobotState

from armory.core.errors import ObservationError, QueueStateError, SessionClosed, Superseded
from armory.core.latency_profile import LatencyProfile
from armory.engine.batch_loop import BatchLoop, ChunkResult, Clock, LoopStats
from armory.engine.config import ServerConfig
from armory.engine.executor import Executor
from armory.engine.session import (
    RequestPlan,
    Session,
    directed_defer_s,
    directed_lead_s,
    directed_send_index,
)
from armory.observe.batch_watch import BatchWatch
from armory.observe.metrics import EngineReading, ServerMetrics
from armory.observe.robot_activity import RobotActivity, RobotRow
from armory.observe.robot_log import log_connect, log_disconnect
from armory.policies.base import (
    CONTEXT_CHUNK_START,
    CONTEXT_KEYS,
    CONTEXT_ROBOT,
    Policy,
    PolicyMetadata,
    conform_observation,
)
from armory.scheduling.base import Scheduler
from armory.scheduling.rule_changes import RuleChanges

_OVERHEAD_WINDOW = 4096
"""Most recent requests whose server-added time the stats keep."""
_GONE_ROBOTS = 16
"""Disconnected robots still shown (marked) in ``/stats`` and the dashboard."""
_MOVING = "the robot is moving to another replica"


class _SwitchInterval:
    """The process's thread switch interval while engines run: the shortest any running
    engine asks for; Python's own again once the last of them stops (engines may start
    and stop in any order, e.g. several replicas in one test process, each engine on its
    own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held_s: dict[int, float] = {}
        self._before_s = 0.0

    def hold(self, holder: int, interval_s: float) -> None:
        with self._lock:
            if not self._held_s:
                self._before_s = sys.getswitchinterval()
            self._held_s[holder] = interval_s
            sys.setswitchinterval(min(self._held_s.values()))

    def release(self, holder: int) -> None:
        with self._lock:
            if self._held_s.pop(holder, None) is None:
                return
            sys.setswitchinterval(min(self._held_s.values(), default=self._before_s))


_switch_interval = _SwitchInterval()


@dataclass(frozen=True)
class Reply:
    """The answer to one request, before a transport encodes it."""

    actions: np.ndarray
    """(action_horizon, action_dim) float32, computed from this request's observation."""
    chunk_start: int
    """Action index the chunk starts at."""
    next_request_index: int | None
    """Armory clients: the action index at which to send the next observation in directed
    mode. None for plain clients."""
    is_armory: bool
    """The request carried ``__armory__`` queue state."""
    batch_size: int
    received_s: float
    """Server clock when the request's frame arrived."""
    wait_s: float
    """Seconds the request waited for the scheduler's choice and a free executor."""
    forward_s: float
    """Seconds of its batch's forward pass as the server waited on it."""
    policy_s: float
    """Seconds the policy itself took for the batch."""
    prev_total_s: float | None
    """Server time (arrival to reply sent) of the same connection's previous request."""
    noise_sha256: str | None = None
    """The policy's fixed action noise (``PolicyMetadata.noise_sha256``), sent with each reply."""
    deferred: bool = False
    """Every-tick: no batch took the observation within its ``defer_after_s``; ``actions``
    is empty and the robot sends a newer observation."""
    steps_s: float = 0.0
    """Seconds of the request's own steps so far: intake (decode, validation, queue
    state) and the decision that dispatched its batch."""
    observation_step: int | None = None
    """The request's ``observation_step`` (Armory clients)."""


@dataclass(frozen=True)
class AcceptedRequest:
    """A request the batch loop holds (:meth:`ServerEngine.accept`), awaiting its reply."""

    session: Session
    state: RobotState | None
    """Its ``__armory__`` queue state; None from a plain openpi client."""
    plan: RequestPlan
    future: asyncio.Future[ChunkResult]
    received_s: float
    prev_total_s: float | None
    """Server time (arrival to reply sent) of the connection's previous request."""
    defer_at_s: float | None = None
    """Server time at which, if no batch has taken it, the request is answered "deferred"
    (every-tick: its ``defer_after_s`` after arrival; directed: when the robot runs dry,
    :func:`~armory.engine.session.directed_defer_s`); None: it waits for its chunk."""


@dataclass(frozen=True)
class EngineStats:
    """Counters of the engine since it started (``dataclasses.asdict`` makes them JSON)."""

    num_sessions: int
    """Connections open now."""
    num_requests: int
    num_replies: int
    num_errors: int
    """Requests answered with an error (each to its own robot)."""
    num_deferred: int
    """Requests answered without a chunk because no batch took them in time: every-tick
    within their ``defer_after_s``, directed before their robot ran dry."""
    num_superseded: int
    """Pipelined every-tick requests answered without a chunk because a newer observation
    of the robot replaced them before any batch took them."""
    num_batches: int
    batch_size_counts: dict[int, int]
    mean_batch_size: float
    num_dropped_chunks: int
    """Chunks computed for robots that were gone when they were ready."""
    num_taken_back: int
    """Batches decided ahead and taken back because the batch before them overran."""
    num_scheduler_faults: int
    """Decisions on which the scheduler raised (taken without the robot that caused it,
    or by the safe rule; the server log has each)."""
    busy_s: float
    decision_ms_mean: float
    """Mean time of one scheduling decision (snapshot, schedule, check)."""
    decision_cpu_ms_mean: float
    """The same in processor time of the event loop's thread: what the decision costs,
    apart from other processes' turns on a shared machine's cores."""
    overhead_ms_p50: float | None
    """Server-added time per request (decode, validate, schedule, encode, send): median."""
    overhead_ms_p99: float | None
    steps_ms_p50: float | None
    """The request's own steps (decode, validate, schedule, encode), apart from waiting
    and the event loop: median over recent chunk replies of transports that time their
    encode."""
    steps_ms_p99: float | None
    latency_points_s: dict[int, float]
    """The learned forward-pass seconds per batch size."""
    decisions_by_rule: dict[str, int] = field(default_factory=dict)
    """Scheduling decisions by the rule that made them (``armory fleet --explain``)."""
    rule_changes: dict[str, RuleChanges] = field(default_factory=dict)
    """Per rule, what it changed against the scheduler's base rule alone on the same
    snapshots (``--server.explain-rules``; empty without)."""
    scheduler: str = ""
    policy: str = ""
    max_batch_size: int = 0
    uptime_s: float = 0.0
    requests_by_door: dict[str, int] = field(default_factory=dict)
    errors_by_door: dict[str, dict[str, int]] = field(default_factory=dict)
    """Requests answered with an error, by door, then by the error's kind."""
    num_worker_restarts: int = 0
    """Restarts of the policy's worker process (policies run in one)."""
    robots: list[RobotRow] = field(default_factory=list)
    """Connected robots, earliest first, then the last few that left (with
    ``--server.metrics``; empty without)."""


class ServerEngine:
    """Sessions, validation and the batch loop behind every transport."""

    def __init__(
        self,
        policy: Policy,
        scheduler: Scheduler,
        *,
        config: ServerConfig | None = None,
        profile: LatencyProfile | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """``profile`` seeds the learned latency; default: ``config.latency_profile``, else the
        policy's declared points, else the ``l40s-pi05`` preset."""
        config = config or ServerConfig()
        self.policy = policy
        self.config = config
        self.scheduler_name = getattr(scheduler, "name", type(scheduler).__name__)
        self.metadata: PolicyMetadata = policy.metadata
        self._plain_defaults = config.plain_defaults()
        if profile is None:
            points = self.metadata.latency_points
            if config.latency_profile is not None:
                profile = LatencyProfile.from_preset(config.latency_profile)
            elif points:
                profile = LatencyProfile(points)
            else:
                profile = LatencyProfile.from_preset("l40s-pi05")
        self.clock = clock
        self._started_s = clock()
        self.metrics = (
            ServerMetrics(
                max_batch_size=config.max_batch_size,
                max_robot_labels=config.metrics_max_robots,
            )
            if config.metrics
            else None
        )
        self.loop = BatchLoop(
            Executor(policy),
            scheduler,
            profile,
            max_batch_size=config.max_batch_size,
            clock=clock,
            check_invariants=config.check_invariants,
            decide_ahead_s=config.decide_ahead_s,
            request_timeout_s=config.request_timeout_s,
            observer=BatchWatch(self.metrics, name_of=self._name_of, scheduler=self.scheduler_name),
            explain=config.explain_rules,
        )
        self._sessions: dict[int, Session] = {}
        self._by_name: dict[str, Session] = {}
        self._num_requests = 0
        self._num_replies = 0
        self._num_errors = 0
        self._num_deferred = 0
        self._num_superseded = 0
        self._overheads_s: deque[float] = deque(maxlen=_OVERHEAD_WINDOW)
        self._steps_s: deque[float] = deque(maxlen=_OVERHEAD_WINDOW)
        self._requests_by_door: Counter[str] = Counter()
        self._replies_by_door: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._errors_by_door: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._activity: dict[int, RobotActivity] = {}
        """Connected robots' activity (with ``config.metrics``), in order of connection."""
        self._gone: deque[RobotActivity] = deque(maxlen=_GONE_ROBOTS)

    # ---- lifecycle -----------------------------------------------------

    async def start(self) -> None:
        if self.config.switch_interval_s is not None:
            # Process-wide (put back when the last engine stops): a forward pass's results
            # wait for the interpreter lock while the event loop decodes frames, up to
            # one interval.
            _switch_interval.hold(id(self), self.config.switch_interval_s)
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        _switch_interval.release(id(self))

    # ---- sessions ------------------------------------------------------

    def open_session(
        self, *, peer: str, evict: Callable[[str], None] | None = None, door: str = "openpi"
    ) -> Session:
        """Called when a robot connects through ``door``."""
        session = Session(peer=peer, evict=evict, door=door)
        self._sessions[session.engine_id] = session
        if self.metrics is not None:
            self._activity[session.engine_id] = RobotActivity(
                door=door, peer=peer, name=session.robot_name, connected_s=self.clock()
            )
        return session

    def move_robot(self, robot_name: str, reason: str) -> bool:
        """The cluster moves robot ``robot_name`` to another replica: its connection closes
        with ``reason`` after a reply that leaves none of its requests waiting (its next
        reply; a pipelined robot's further observations are answered "deferred" at once),
        so that no request is lost, and the robot's client reconnects through the front
        door, which sends it to its new replica. Only a robot on Armory's client through
        the openpi door can be moved (its client reconnects on its own); False for any
        other, or for a name not connected here."""
        session = self._by_name.get(robot_name)
        if session is None or session.closed or session.door != "openpi" or not session.is_armory:
            return False
        session.move_reason = reason
        return True

    def close_session(self, session: Session) -> None:
        """Called when a robot's connection closes (idempotent). A request it has waiting
        is dropped; a chunk being computed for it is thrown away when ready."""
        if session.closed:
            return
        session.closed = True
        self._sessions.pop(session.engine_id, None)
        if self._by_name.get(session.robot_name) is session:
            del self._by_name[session.robot_name]
        self.loop.remove(session.engine_id)
        activity = self._activity.pop(session.engine_id, None)
        if activity is not None:
            activity.closed_s = self.clock()
            self._gone.append(activity)
        if session.num_requests:
            log_disconnect(
                session.robot_name,
                door=session.door,
                num_requests=session.num_requests,
                starvation=None if activity is None else activity.starvation(),
            )

    def count_error(self, door: str, kind: str, *, session: Session | None = None) -> None:
        """Called by a transport for each request it answers with an error: its door, the
        kind of error (the exception's class name) and the robot's session if it has one."""
        self._num_errors += 1
        self._errors_by_door[door][kind] += 1
        activity = None if session is None else self._activity.get(session.engine_id)
        if activity is not None:
            activity.num_errors += 1

    # ---- requests ------------------------------------------------------

    async def infer(
        self,
        session: Session,
        observation: Mapping[str, Any],
        *,
        received_s: float,
        planning_start: int | None = None,
    ) -> Reply:
        """Serve one observation map (as decoded, ``__armory__`` key included).

        Raises RequestError (to be sent to this robot) or SessionClosed.
        """
        return await self.answer(
            self.accept(session, observation, received_s=received_s, planning_start=planning_start)
        )

    def accept(
        self,
        session: Session,
        observation: Mapping[str, Any],
        *,
        received_s: float,
        planning_start: int | None = None,
    ) -> AcceptedRequest:
        """Take one observation in, at once: validate it, update the mirror and hand it to
        the batch loop. :meth:`answer` then waits for its reply.

        ``planning_start``: the action index the policy is told its chunk starts at
        (``armory/chunk_start``) where the door numbers the chunk's rows from another index
        than the engine's chunk start (the LeRobot door: the observation's own index, which
        the door's queue state ages by the ticks the observation waited); None: the
        engine's chunk start. The mirror schedules with its own index either way.

        Raises RequestError (to be sent to this robot) or SessionClosed.
        """
        if session.closed:
            raise SessionClosed("the session is closed")
        self._num_requests += 1
        self._requests_by_door[session.door] += 1
        obs, state = _split_state(observation)
        obs = conform_observation(obs, self.metadata.inputs)
        try:
            self.policy.check_observation(obs)
        except ValueError as exc:
            raise ObservationError(str(exc)) from None
        plan = session.plan(
            state,
            received_s=received_s,
            defaults=self._plain_defaults,
            action_horizon=self.metadata.action_horizon,
        )
        chunk_start = plan.report.action_index if planning_start is None else planning_start
        _add_context(obs, self.metadata.context_keys, session, chunk_start)
        if state is not None:
            self._claim_name(session)
        activity = self._activity.get(session.engine_id)
        if activity is not None:
            _note_request(activity, session, plan, state, received_s)
        if session.num_requests == 1:
            log_connect(
                session.robot_name,
                door=session.door,
                peer=session.peer,
                is_armory=bool(session.is_armory),
                control_hz=plan.limits.control_hz,
                weight=plan.limits.weight,
            )
        pipelined = state is not None and state.pipelined
        if pipelined and session.move_reason is not None:
            # Moving to another replica: a pipelined robot's observations still coming are
            # answered "deferred" at once (it sends one each tick), and so is its request
            # no batch took yet (too early to serve, it would wait for a newer observation
            # that never reaches the loop now), so that the replies it waits for run out
            # and its connection closes after the last of them.
            self.loop.withdraw(session.engine_id, superseded=_MOVING)
            future: asyncio.Future[ChunkResult] = asyncio.get_running_loop().create_future()
            future.set_exception(Superseded(_MOVING))
            future.exception()  # read (a request cancelled before its answer logs nothing)
        else:
            future = self.loop.submit(
                session.engine_id, plan, obs, received_s=received_s, pipelined=pipelined
            )
        defer_at_s = None
        if state is not None and state.defer_after_s is not None:
            defer_at_s = received_s + state.defer_after_s
        elif state is not None and plan.limits.directed:
            defer_at_s = directed_defer_s(
                plan.limits,
                plan.report,
                dry_s=self.loop.mirror.deadline_of(session.engine_id),
                received_s=received_s,
                deferred_chunk_start=session.deferred_chunk_start,
            )
        return AcceptedRequest(
            session=session,
            state=state,
            plan=plan,
            future=future,
            received_s=received_s,
            prev_total_s=session.last_total_s,
            defer_at_s=defer_at_s,
        )

    async def answer(self, request: AcceptedRequest) -> Reply:
        """The reply to an accepted request: its chunk, or "deferred" (Armory clients) when
        no batch took it by its ``defer_at_s`` (every-tick: within its ``defer_after_s``;
        directed: before the robot ran dry) or a newer observation replaced it.

        Raises RequestError (to be sent to this robot) or SessionClosed.
        """
        state, plan, future = request.state, request.plan, request.future
        robot_id = request.session.engine_id
        try:
            if request.defer_at_s is not None and await self._withdrawn(
                robot_id, future, request.defer_at_s
            ):
                if plan.limits.directed:
                    request.session.deferred_chunk_start = plan.report.chunk_start
                return self._deferred_reply(request)
            result = await future
        except Superseded:
            self._num_superseded += 1
            return self._deferred_reply(request)
        request.session.answered(result.chunk_start)
        next_index = None
        if state is not None:
            # A directed robot the scheduler keeps waiting dry is told to hold fewer
            # actions when it sends, or none (only directed robots follow the index, so
            # only they ask the scheduler).
            share = self.loop.held_share(robot_id) if plan.limits.directed else 1.0
            lead_s = self._lead_s(plan, held_share=share)
            next_index = directed_send_index(result.chunk_start, plan.limits, lead_s)
        return Reply(
            actions=result.actions,
            chunk_start=result.chunk_start,
            next_request_index=next_index,
            is_armory=state is not None,
            batch_size=result.batch_size,
            received_s=request.received_s,
            wait_s=result.wait_s,
            forward_s=result.forward_s,
            policy_s=result.policy_s,
            prev_total_s=request.prev_total_s,
            noise_sha256=self.metadata.noise_sha256,
            steps_s=result.intake_s + result.decision_s,
            observation_step=None if state is None else state.observation_step,
        )

    async def _withdrawn(
        self, robot_id: int, future: asyncio.Future[Any], deadline_s: float
    ) -> bool:
        """Wait for ``future`` until ``deadline_s`` (server clock); True when the request
        was then taken back before any batch took it."""
        remaining_s = deadline_s - self.clock()
        if remaining_s > 0:
            done, _ = await asyncio.wait({future}, timeout=remaining_s)
            if done:
                return False
        if future.done():
            return False
        withdrawn = self.loop.withdraw(robot_id)
        if withdrawn:
            self._num_deferred += 1
        return withdrawn

    def _deferred_reply(self, request: AcceptedRequest) -> Reply:
        assert request.state is not None, "only Armory clients are deferred"
        return Reply(
            actions=np.zeros((0, self.metadata.action_dim), np.float32),
            chunk_start=request.state.action_index,
            next_request_index=None,
            is_armory=True,
            batch_size=0,
            received_s=request.received_s,
            wait_s=self.clock() - request.received_s,
            forward_s=0.0,
            policy_s=0.0,
            prev_total_s=request.prev_total_s,
            noise_sha256=self.metadata.noise_sha256,
            deferred=True,
        )

    def reply_sent(
        self, session: Session, reply: Reply, sent_s: float, *, encode_s: float | None = None
    ) -> None:
        """Called by a transport once the reply is on its way (``encode_s``: the seconds it
        took to encode it, where the transport times that)."""
        self._num_replies += 1
        self._replies_by_door[session.door]["deferred" if reply.deferred else "chunk"] += 1
        session.reply_sent(
            reply.received_s,
            sent_s,
            chunk=not reply.deferred,
            observation_step=reply.observation_step,
        )
        total_s = sent_s - reply.received_s
        self._overheads_s.append(max(total_s - reply.wait_s - reply.forward_s, 0.0))
        if encode_s is not None and not reply.deferred:
            self._steps_s.append(reply.steps_s + encode_s)
        activity = self._activity.get(session.engine_id)
        if activity is not None and not reply.deferred:
            uplink_s = session.limits.uplink_s if session.limits is not None else 0.0
            activity.reply(total_s, uplink_s + reply.steps_s + reply.wait_s)

    def stats(self) -> EngineStats:
        loop: LoopStats = self.loop.stats()
        return EngineStats(
            num_sessions=len(self._sessions),
            num_requests=self._num_requests,
            num_replies=self._num_replies,
            num_errors=self._num_errors,
            num_deferred=self._num_deferred,
            num_superseded=self._num_superseded,
            num_batches=loop.num_batches,
            batch_size_counts=loop.batch_size_counts,
            mean_batch_size=loop.mean_batch_size,
            num_dropped_chunks=loop.num_dropped_chunks,
            num_taken_back=loop.num_taken_back,
            num_scheduler_faults=loop.num_scheduler_faults,
            busy_s=loop.busy_s,
            decision_ms_mean=1e3 * loop.decision_s / max(loop.num_decisions, 1),
            decision_cpu_ms_mean=1e3 * loop.decision_cpu_s / max(loop.num_decisions, 1),
            overhead_ms_p50=_percentile_ms(self._overheads_s, 50),
            overhead_ms_p99=_percentile_ms(self._overheads_s, 99),
            steps_ms_p50=_percentile_ms(self._steps_s, 50),
            steps_ms_p99=_percentile_ms(self._steps_s, 99),
            latency_points_s=self.loop.profile.points(),
            decisions_by_rule=loop.decisions_by_rule,
            rule_changes=loop.rule_changes,
            scheduler=self.scheduler_name,
            policy=self.metadata.name,
            max_batch_size=self.config.max_batch_size,
            uptime_s=self.clock() - self._started_s,
            requests_by_door=dict(self._requests_by_door),
            errors_by_door={door: dict(kinds) for door, kinds in self._errors_by_door.items()},
            num_worker_restarts=self._num_worker_restarts(),
            robots=self.robot_rows(),
        )

    def robot_rows(self) -> list[RobotRow]:
        """Connected robots, earliest first, then the last few that left."""
        now_s = self.clock()
        return [a.row(now_s) for a in [*self._activity.values(), *self._gone]]

    def metrics_reading(self) -> EngineReading:
        """A copy of the engine's counters for ``/metrics`` (taken on the event loop)."""
        loop = self.loop.stats()
        return EngineReading(
            uptime_s=self.clock() - self._started_s,
            busy_s=loop.busy_s,
            batch_size_counts=loop.batch_size_counts,
            decisions_by_rule=loop.decisions_by_rule,
            requests_by_door=dict(self._requests_by_door),
            replies_by_door={door: dict(kinds) for door, kinds in self._replies_by_door.items()},
            errors_by_door={door: dict(kinds) for door, kinds in self._errors_by_door.items()},
            num_worker_restarts=self._num_worker_restarts(),
            robots=[activity.sample() for activity in self._activity.values()],
        )

    def _num_worker_restarts(self) -> int:
        return int(getattr(self.policy, "num_restarts", 0))

    def _name_of(self, robot_id: int) -> str:
        session = self._sessions.get(robot_id)
        return session.robot_name if session is not None else f"conn-{robot_id}"

    # ---- internals -----------------------------------------------------

    def _claim_name(self, session: Session) -> None:
        """Bind an Armory robot id to this session; a live session holding it is replaced."""
        holder = self._by_name.get(session.robot_name)
        if holder is session:
            return
        if holder is not None:
            self.close_session(holder)
            if holder.evict is not None:
                holder.evict(f"replaced by a newer connection of robot {session.robot_name!r}")
        self._by_name[session.robot_name] = session

    def _lead_s(self, plan: RequestPlan, *, held_share: float = 1.0) -> float:
        return directed_lead_s(
            plan.limits,
            self.loop.profile,
            self.loop.recent_batch_size,
            self.config.max_batch_size,
            self.config.directed_margin_s,
            held_share=held_share,
        )


def _note_request(
    activity: RobotActivity,
    session: Session,
    plan: RequestPlan,
    state: RobotState | None,
    received_s: float,
) -> None:
    limits = plan.limits
    report = None
    if state is not None:
        has_chunk = state.chunk_start is not None
        report = (state.action_index, state.actions_left, has_chunk, state.episode_id)
    activity.request(
        received_s,
        name=session.robot_name,
        control_hz=limits.control_hz,
        weight=limits.weight,
        max_execution_horizon=limits.max_execution_horizon,
        report=report,
    )


def _percentile_ms(samples_s: deque[float], q: float) -> float | None:
    """The q-th percentile of ``samples_s`` in milliseconds; None before any sample."""
    return float(np.percentile(samples_s, q)) * 1e3 if samples_s else None


def _add_context(
    obs: dict[str, Any], keys: tuple[str, ...], session: Session, chunk_start: int
) -> None:
    """Replace any context entry the robot sent with the engine's own, for the keys the
    policy asked for (``PolicyMetadata.context_keys``); drop the rest."""
    for key in CONTEXT_KEYS:
        obs.pop(key, None)
    values = {CONTEXT_CHUNK_START: chunk_start, CONTEXT_ROBOT: session.robot_name}
    for key in keys:
        obs[key] = values[key]


def _split_state(observation: Mapping[str, Any]) -> tuple[dict[str, Any], RobotState | None]:
    """Remove ``__armory__`` and parse it; a malformed map is a QueueStateError."""
    obs = dict(observation)
    if ARMORY_KEY not in obs:
        return obs, None
    wire = obs.pop(ARMORY_KEY)
    try:
        return obs, RobotState.from_wire(wire)
    except (ValueError, TypeError) as exc:
        raise QueueStateError(f"bad {ARMORY_KEY} queue state: {exc}") from None
