"""One connected robot: what it declared, how it is scheduled, and what the server assumes.

A session lives as long as its connection. A robot has one request outstanding at a
time (openpi is strict request/response), except an Armory client in pipelined
every-tick mode, whose newest observation replaces one still waiting; either way
the observation the mirror holds for it is its newest request.

Two kinds of robot:

- **Armory clients** attach a :class:`~armory_client.wire.RobotState` under
  ``__armory__`` to every observation: their rate, horizons, weight, action index,
  actions left and the chunk they are playing. The mirror takes these as reported.
- **Plain openpi clients** attach nothing. The server assumes such a robot works
  the way openpi's own runtime does: it asks, waits with an empty queue, plays
  the chunk, asks again. So each request reports "0 actions left" (its deadline
  is its arrival), the robot is assumed to have executed the whole previous chunk
  (``max_execution_horizon`` actions), and its rate, horizons and link delay come
  from :class:`~armory.engine.config.PlainClientDefaults`.

Link delays: for an Armory client the server subtracts its own time on a request
(arrival to reply sent) from the round trip the client measured on that same
request (``round_trip_step`` names it; without it, the client's smoothed round
trip against the previous request), and splits the remainder evenly between
uplink and downlink (a moving average). Before that, and always for plain
clients, the configured default.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from armory.core.errors import QueueStateError
from armory.core.latency_profile import LatencyProfile
from armory.engine.config import PlainClientDefaults
from armory.engine.queue_mirror import NO_CHUNK, QueueReport, RobotLimits

if TYPE_CHECKING:
    from armory_client.wire import RobotState

_LINK_SMOOTHING = 0.25
"""Weight of the newest round-trip sample in the link-delay moving average."""
_CHUNK_TOTALS_KEPT = 64
"""Recent chunk replies whose server time a session remembers for the link estimate."""


@dataclass(frozen=True)
class RequestPlan:
    """How one request enters the mirror."""

    limits: RobotLimits
    report: QueueReport
    reset: bool
    """The robot's indices restarted (a new episode): its mirror row starts afresh."""


_ids = itertools.count(1)


class Session:
    """Runtime state of one connection (the engine's, never touched by a scheduler)."""

    def __init__(
        self, *, peer: str, evict: Callable[[str], None] | None = None, door: str = "openpi"
    ) -> None:
        self.engine_id = next(_ids)
        """The robot's id in the mirror and in scheduler snapshots."""
        self.peer = peer
        self.door = door
        """The front door the robot came through: openpi, groot or lerobot."""
        self.robot_name = f"conn-{self.engine_id}"
        """The Armory robot id once one is reported; a per-connection name until then."""
        self.evict = evict
        """Closes the connection from the server side, with a reason (set by the transport)."""
        self.closed = False
        self.move_reason: str | None = None
        """Set when the cluster moves the robot to another replica: the transport closes
        the connection with this reason after a reply that leaves none of the robot's
        requests waiting (:meth:`ServerEngine.move_robot`)."""
        self.is_armory: bool | None = None
        """Whether its requests carry ``__armory__`` state (decided by the first request)."""
        self.episode_id: int | None = None
        self.limits: RobotLimits | None = None
        self.last_chunk_start = NO_CHUNK
        """Start index of the last chunk answered."""
        self.deferred_chunk_start = NO_CHUNK
        """Directed: the chunk during which this robot's observation was last answered
        "deferred" as it ran dry (:func:`directed_defer_s`: once per chunk)."""
        # Timing (server clock, seconds)
        self.link_rtt_s: float | None = None
        """Moving average of the network round trip (Armory clients)."""
        self.last_total_s: float | None = None
        """Server time of the previous request answered with a chunk: arrival to reply sent."""
        self._chunk_totals: dict[int, float] = {}
        """Server time (arrival to reply sent) of recent chunk replies, by the request's
        ``observation_step``."""
        self.last_reply_sent_s: float | None = None
        self.reply_gap_s: float | None = None
        """Seconds from the previous reply to this request's arrival, as the server saw them."""
        # Counters
        self.num_requests = 0
        self.num_replies = 0

    # ---- reading a request ---------------------------------------------

    def plan(
        self,
        state: RobotState | None,
        *,
        received_s: float,
        defaults: PlainClientDefaults,
        action_horizon: int,
    ) -> RequestPlan:
        """Turn one request's queue state (or its absence) into mirror inputs.

        Raises QueueStateError for state the server cannot serve.
        """
        is_armory = state is not None
        if self.is_armory is not None and is_armory != self.is_armory:
            raise QueueStateError(
                "every observation of a connection must carry __armory__ state, or none may: "
                f"this one {'does' if is_armory else 'does not'}, the first did "
                f"{'not ' if is_armory else ''}"
            )
        self.is_armory = is_armory
        self.num_requests += 1
        if self.last_reply_sent_s is not None:
            self.reply_gap_s = received_s - self.last_reply_sent_s
        if state is None:
            return self._plan_plain(defaults, action_horizon)
        return self._plan_armory(state, defaults, action_horizon)

    def _plan_plain(self, defaults: PlainClientDefaults, action_horizon: int) -> RequestPlan:
        horizon = defaults.max_execution_horizon or action_horizon
        limits = RobotLimits(
            control_hz=defaults.control_hz,
            min_execution_horizon=min(defaults.min_execution_horizon, horizon),
            max_execution_horizon=min(horizon, action_horizon),
            uplink_s=defaults.link_s,
            downlink_s=defaults.link_s,
            plays_out=True,
        )
        self.limits = limits
        if self.last_chunk_start == NO_CHUNK:
            report = QueueReport(action_index=0, actions_left=0)
        else:
            report = QueueReport(
                action_index=self.last_chunk_start + limits.max_execution_horizon,
                actions_left=0,
                chunk_start=self.last_chunk_start,
            )
        return RequestPlan(limits=limits, report=report, reset=False)

    def _plan_armory(
        self, state: RobotState, defaults: PlainClientDefaults, action_horizon: int
    ) -> RequestPlan:
        if self.num_requests > 1 and state.robot_id != self.robot_name:
            raise QueueStateError(
                f"robot_id changed from {self.robot_name!r} to {state.robot_id!r} within one "
                "connection; reconnect to change it"
            )
        if state.max_execution_horizon > action_horizon:
            raise QueueStateError(
                f"max_execution_horizon {state.max_execution_horizon} exceeds the policy's "
                f"action horizon {action_horizon}"
            )
        self.robot_name = state.robot_id
        reset = self.episode_id is not None and state.episode_id != self.episode_id
        if reset:
            self._chunk_totals.clear()
            self.deferred_chunk_start = NO_CHUNK
        sample_s = self._link_sample(state)
        if sample_s is not None:
            if self.link_rtt_s is None:
                self.link_rtt_s = sample_s
            else:
                self.link_rtt_s += _LINK_SMOOTHING * (sample_s - self.link_rtt_s)
        link_s = defaults.link_s if self.link_rtt_s is None else self.link_rtt_s / 2
        self.limits = RobotLimits(
            control_hz=state.control_hz,
            min_execution_horizon=state.min_execution_horizon,
            max_execution_horizon=state.max_execution_horizon,
            weight=state.weight,
            uplink_s=link_s,
            downlink_s=link_s,
            directed=state.directed,
            # Every-tick clients send while they wait: pipelined, or resent when deferred.
            streams=state.pipelined or state.defer_after_s is not None,
        )
        self.episode_id = state.episode_id
        report = QueueReport(
            action_index=state.action_index,
            actions_left=state.actions_left,
            chunk_start=NO_CHUNK if state.chunk_start is None else state.chunk_start,
        )
        return RequestPlan(limits=self.limits, report=report, reset=reset)

    def _link_sample(self, state: RobotState) -> float | None:
        """The network round trip the request's report reveals (its measured round trip
        less the server's own time on that request), once per measured request."""
        if state.round_trip_s is None:
            return None
        if state.round_trip_step is None:
            # A smoothed round trip: set against the previous request.
            if self.last_total_s is None:
                return None
            return max(0.0, state.round_trip_s - self.last_total_s)
        total_s = self._chunk_totals.pop(state.round_trip_step, None)
        if total_s is None:
            return None  # taken already, or too old
        return max(0.0, state.round_trip_s - total_s)

    # ---- after the reply -----------------------------------------------

    def answered(self, chunk_start: int) -> None:
        """Called when a chunk for this session's request is ready."""
        self.last_chunk_start = chunk_start

    def reply_sent(
        self,
        received_s: float,
        sent_s: float,
        *,
        chunk: bool = True,
        observation_step: int | None = None,
    ) -> None:
        """Called when the reply frame has been handed to the connection (``chunk``: it
        carried a chunk, not "deferred"; the client measures its round trip on those only;
        ``observation_step``: the request's, from its ``__armory__`` state)."""
        self.num_replies += 1
        if chunk:
            self.last_total_s = sent_s - received_s
            if observation_step is not None:
                self._chunk_totals[observation_step] = self.last_total_s
                if len(self._chunk_totals) > _CHUNK_TOTALS_KEPT:
                    del self._chunk_totals[next(iter(self._chunk_totals))]
        self.last_reply_sent_s = sent_s


BATCH_SIZE_SMOOTHING = 0.2
"""Weight of the newest batch in the moving average of batch sizes that
:func:`directed_lead_s` reads (the engine and the simulator keep it alike)."""


def directed_lead_s(
    limits: RobotLimits,
    profile: LatencyProfile,
    recent_batch_size: float,
    max_batch_size: int,
    margin_s: float,
    *,
    held_share: float = 1.0,
) -> float:
    """Seconds of motion a directed robot should still hold when it sends its next
    observation: both link delays, its own forward pass at the recent batch size and a
    margin. The scheduler has the observation in time to serve it just in time when
    the executor is free; when a batch is running it may land up to a forward pass
    late, but every chunk is computed from a fresher observation and wastes fewer
    actions, which is worth more at capacity (docs/architecture.md, directed mode).

    A robot the scheduler serves only ``held_share`` of its ticks (below 1,
    ``Scheduler.held_shares``) holds less: :func:`held_lead_s` of that round trip."""
    batch = max(1, min(round(recent_batch_size), max_batch_size))
    round_trip_s = limits.uplink_s + limits.downlink_s + profile.latency_s(batch)
    if held_share < 1.0:
        return held_lead_s(limits, held_share, round_trip_s)
    return round_trip_s + margin_s


def held_lead_s(limits: RobotLimits, share: float, round_trip_s: float) -> float:
    """Seconds of motion a directed robot served ``share`` of its ticks should still hold
    when it sends, for a round trip (links and its forward pass) of ``round_trip_s``.

    A robot that sends holding ``x`` actions, with ``m`` ticks in its round trip, plays
    ``E - x`` actions of each chunk (the chunk replaces the ``x`` it executes meanwhile)
    and stands ``m - x`` ticks dry before it lands: it is served ``(E - x) / (E + m -
    2x)`` of its ticks, from ``E / (E + m)`` (sending once dry) up to all of them
    (sending a round trip ahead) at one chunk every ``E + m - 2x`` ticks. The ``x``
    that serves it ``share`` needs no more chunks than that share costs:
    ``x = m - (E - m) (1 - share) / (2 share - 1)``, rounded down to whole actions; 0
    (send once dry) where even that serves it more than ``share``, or where a chunk is
    worth no more than its round trip (``E <= m``: holding actions only loses them)
    (docs/scheduling.md, "How much a held robot holds")."""
    horizon = float(limits.max_execution_horizon)
    round_trip_ticks = round_trip_s * limits.control_hz
    if share <= 0.5 or horizon <= round_trip_ticks:
        return 0.0
    cut = (horizon - round_trip_ticks) * (1.0 - share) / (2.0 * share - 1.0)
    held = min(round_trip_ticks, max(0.0, round_trip_ticks - cut))
    return math.floor(held + 1e-9) / limits.control_hz


def directed_defer_s(
    limits: RobotLimits,
    report: QueueReport,
    *,
    dry_s: float,
    received_s: float,
    deferred_chunk_start: int,
) -> float | None:
    """When a directed robot's observation, if no batch has taken it by then, is answered
    "deferred" (the Armory client then sends a fresh one at once): when the robot runs dry
    (``dry_s``, the mirror's estimate), for an observation taken while the robot still
    moved that arrived before then; once per chunk (not again for the chunk the robot
    played, ``report.chunk_start``, when that is ``deferred_chunk_start``). None: never.

    A robot that runs dry stands still, and the observation held since its lead was taken
    while it moved: a chunk from it starts that many actions back and loses them. One
    taken once dry loses nothing to further waiting (docs/scheduling.md, "A fresh
    observation once dry")."""
    if not limits.directed or dry_s <= received_s:
        return None
    # Taken holding no more than the links' round trip, the waiting observation loses
    # less than a fresh one would cost: the robot standing dry while "deferred" goes
    # down and the fresh observation comes up.
    if report.actions_left <= (limits.uplink_s + limits.downlink_s) * limits.control_hz:
        return None
    if report.chunk_start == deferred_chunk_start:
        return None
    return dry_s


def directed_send_index(chunk_start: int, limits: RobotLimits, lead_s: float) -> int:
    """The action index at which a directed-mode robot should send its next observation.

    The chunk's queue ends at ``chunk_start + max_execution_horizon``; the robot
    should ask ``lead_s`` of motion before that, and never before it is
    ``min_execution_horizon`` actions into the chunk (an earlier observation could
    not be served).
    """
    lead_actions = math.ceil(lead_s * limits.control_hz)
    return max(
        chunk_start + limits.min_execution_horizon,
        chunk_start + limits.max_execution_horizon - lead_actions,
    )
