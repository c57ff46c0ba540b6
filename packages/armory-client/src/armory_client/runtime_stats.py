"""What a `RobotRuntime` measures: per-tick and per-request records, and a summary.

Records are kept in bounded histories (the newest `history_len` of each); the
summary comes from running counters, so it covers the whole run however long.
"""

from __future__ import annotations

import collections
import dataclasses

from armory_client.action_queue import ActionQueue

__all__ = ["RequestRecord", "RuntimeStats", "RuntimeSummary", "TickRecord"]


@dataclasses.dataclass(frozen=True)
class TickRecord:
    """One tick, after its action (if any) was executed."""

    tick: int
    """Tick number since the run started (missed ticks are skipped, not recorded)."""
    action_index: int
    """Actions executed this episode, including this tick's."""
    actions_left: int
    """Actions queued after this tick."""
    starved: bool
    """The queue was empty on a counted tick (after the episode's first chunk)."""


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """One request, once it is answered, failed or discarded."""

    action_index: int
    """The action index the observation was sent with."""
    episode_id: int
    bytes_sent: int
    """Size of the packed observation map."""
    round_trip_s: float | None
    """From sending to holding the decoded reply; None when no reply came."""
    outcome: str
    """``applied``, ``dropped`` (older than the current chunk), ``non-finite`` (the
    chunk holds NaN or inf: refused whole), ``stale-episode``
    (sent in an earlier episode), ``deferred`` (every-tick: no batch took it in time, a
    newer observation follows) or ``error``."""
    actions_gained: int
    """Actions of the chunk queued when it was applied (0 otherwise)."""
    error: str | None = None
    """The error message when `outcome` is ``error``."""
    sent_s: float | None = None
    """Seconds from the run's first tick to sending the observation (None if unknown)."""
    reconnected: bool = False
    """The client opened a connection while the request waited: its `round_trip_s`
    includes the connect, so it is kept out of the estimate and the mean."""


@dataclasses.dataclass(frozen=True)
class RuntimeSummary:
    """A run as a whole (starvation as `armory simulate` counts it)."""

    elapsed_s: float
    """Tick slots passed / control rate (missed slots included)."""
    num_ticks: int
    """Ticks run."""
    num_missed_ticks: int
    """Tick slots skipped because the loop ran more than a full period late."""
    num_counted_ticks: int
    """Ticks since each episode's first chunk (all ticks when no chunk ever landed)."""
    num_starved_ticks: int
    starvation: float
    """Starved ticks / counted ticks (1.0 when no chunk ever landed)."""
    num_executed: int
    actions_per_s: float
    """Actions executed per second of counted ticks."""
    num_requests: int
    """Observations sent."""
    requests_per_s: float
    num_request_errors: int
    num_chunks_applied: int
    num_chunks_dropped: int
    num_stale_episode_replies: int
    num_deferred_replies: int
    """Every-tick: observations the server answered without a chunk (a newer one followed)."""
    bytes_sent: int
    bytes_sent_per_s: float
    mean_round_trip_s: float | None
    """Mean over answered requests that waited for no reconnect; None when none was."""
    num_chunks_nonfinite: int = 0
    """Chunks refused on landing because they hold NaN or inf."""


class RuntimeStats:
    """Counters and bounded histories, updated by the runtime as things happen."""

    def __init__(self, *, history_len: int) -> None:
        self.ticks: collections.deque[TickRecord] = collections.deque(maxlen=history_len)
        """The newest tick records."""
        self.requests: collections.deque[RequestRecord] = collections.deque(maxlen=history_len)
        """The newest request records, in the order they finished."""
        self.num_ticks = 0
        self.num_missed_ticks = 0
        self.num_requests = 0
        self.num_request_errors = 0
        self.num_stale_episode_replies = 0
        self.num_deferred_replies = 0
        self.bytes_sent = 0
        self.num_round_trips = 0
        self.round_trip_sum_s = 0.0
        self.last_error: str | None = None

    def on_tick(self, record: TickRecord) -> None:
        """Called after each tick."""
        self.num_ticks += 1
        self.ticks.append(record)

    def on_send(self, bytes_sent: int) -> None:
        """Called when an observation is sent."""
        self.num_requests += 1
        self.bytes_sent += bytes_sent

    def on_finish(self, record: RequestRecord) -> None:
        """Called when a request is answered, fails or is discarded."""
        if record.outcome == "deferred":
            # Held on purpose: not a round trip of the link and the policy.
            self.num_deferred_replies += 1
        elif record.round_trip_s is not None and not record.reconnected:
            self.num_round_trips += 1
            self.round_trip_sum_s += record.round_trip_s
        if record.outcome == "error":
            self.num_request_errors += 1
            self.last_error = record.error
        elif record.outcome == "stale-episode":
            self.num_stale_episode_replies += 1
        self.requests.append(record)

    def summary(self, queue: ActionQueue, *, control_hz: float) -> RuntimeSummary:
        """The run so far; `queue` holds the action and chunk counters."""
        slots = self.num_ticks + self.num_missed_ticks
        elapsed_s = slots / control_hz
        if queue.num_chunks_applied:
            counted, starved = queue.num_counted_ticks, queue.num_starved_ticks
        else:
            counted = starved = self.num_ticks
        counted_s = counted / control_hz
        return RuntimeSummary(
            elapsed_s=elapsed_s,
            num_ticks=self.num_ticks,
            num_missed_ticks=self.num_missed_ticks,
            num_counted_ticks=counted,
            num_starved_ticks=starved,
            starvation=starved / counted if counted else 0.0,
            num_executed=queue.num_executed,
            actions_per_s=queue.num_executed / counted_s if counted_s else 0.0,
            num_requests=self.num_requests,
            requests_per_s=self.num_requests / elapsed_s if elapsed_s else 0.0,
            num_request_errors=self.num_request_errors,
            num_chunks_applied=queue.num_chunks_applied,
            num_chunks_dropped=queue.num_chunks_dropped,
            num_chunks_nonfinite=queue.num_chunks_nonfinite,
            num_stale_episode_replies=self.num_stale_episode_replies,
            num_deferred_replies=self.num_deferred_replies,
            bytes_sent=self.bytes_sent,
            bytes_sent_per_s=self.bytes_sent / elapsed_s if elapsed_s else 0.0,
            mean_round_trip_s=(
                self.round_trip_sum_s / self.num_round_trips if self.num_round_trips else None
            ),
        )
