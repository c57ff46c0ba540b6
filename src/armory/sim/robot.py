"""A simulated robot: the ground truth of its action queue, advanced lazily.

The robot ticks at ``phase_s + n / control_hz``. On each tick it executes the
next queued action if there is one (its action index advances) or holds still (a
starved tick). Ticks are not simulated one by one: :meth:`SimRobot.advance_to`
accounts for every tick up to a time in O(1), which works because the queue only
changes when a chunk lands.

After a chunk lands every queued action belongs to that chunk (a landing
replaces everything from the chunk's start, and the start is never ahead of the
robot), so the observation age behind each executed action is known exactly.
"""

from __future__ import annotations

import math

from armory.engine.queue_mirror import NO_CHUNK, QueueReport
from armory.fleet_spec import RobotSpec

_TICK_EPS = 1e-9
_FRACTION_EPS = 1e-9
"""A chunk's fraction in actions is a float product: within this of a whole number it is
that number (0.7 of 10 actions holds 7)."""


class SimRobot:
    """One robot's queue and counters; all times are virtual seconds."""

    def __init__(self, spec: RobotSpec, *, phase_s: float, startup_end_s: float = math.inf) -> None:
        self.spec = spec
        self.control_hz = spec.control_hz
        self.max_execution_horizon = spec.max_execution_horizon
        self.phase_s = phase_s
        # Queue
        self.action_index = 0
        self.queue_end = 0
        self.chunk_start = NO_CHUNK
        self.chunk_obs_time_s = 0.0
        self.last_tick = -1
        self.first_land_s: float | None = None
        # Ticks before the first chunk lands are start-up, not starvation, until this
        # time; later ones are counted (and starved) even before the first chunk.
        self.startup_end_s = startup_end_s
        # Counters
        self.counted_ticks = 0
        self.starved_ticks = 0
        self.executed = 0
        self.age_sum_s = 0.0
        self.chunks_applied = 0
        self.chunks_stale = 0
        self.requests_sent = 0
        # Request state (threshold mode)
        self.request_in_flight = False
        self.round_trip_s: float | None = None

    # ---- time ----------------------------------------------------------

    def tick_index(self, t_s: float) -> int:
        """Index of the last tick at or before ``t_s`` (-1 before the first)."""
        return math.floor((t_s - self.phase_s) * self.control_hz + _TICK_EPS)

    def tick_time_s(self, n: int) -> float:
        return self.phase_s + n / self.control_hz

    def advance_to(self, t_s: float) -> None:
        """Account for every tick up to and including ``t_s``."""
        n = self.tick_index(t_s)
        ticks = n - self.last_tick
        if ticks <= 0:
            return
        if self.first_land_s is None:
            # Still waiting for the first chunk: only ticks past the start-up count.
            if t_s > self.startup_end_s:
                starving = n - max(self.last_tick, self.tick_index(self.startup_end_s))
                self.starved_ticks += starving
                self.counted_ticks += starving
        else:
            executed = min(ticks, self.queue_end - self.action_index)
            if executed > 0:
                # Ages of actions executed on ticks last+1 .. last+executed.
                first_tick_s = self.tick_time_s(self.last_tick + 1)
                mean_tick_s = first_tick_s + (executed - 1) / (2 * self.control_hz)
                self.age_sum_s += executed * (mean_tick_s - self.chunk_obs_time_s)
                self.action_index += executed
                self.executed += executed
            self.starved_ticks += ticks - executed
            self.counted_ticks += ticks
        self.last_tick = n

    # ---- chunks and reports --------------------------------------------

    def report(self) -> QueueReport:
        """The queue state the robot sends with an observation taken now."""
        return QueueReport(
            action_index=self.action_index,
            actions_left=self.queue_end - self.action_index,
            chunk_start=self.chunk_start,
        )

    def apply_chunk(self, t_s: float, start: int, obs_time_s: float) -> bool:
        """A chunk computed from the observation at index ``start`` lands at ``t_s``.

        Returns False when the chunk is older than the one already applied (it
        overtook nothing and is dropped).
        """
        self.advance_to(t_s)
        if start < self.chunk_start:
            self.chunks_stale += 1
            return False
        self.queue_end = max(self.action_index, start + self.max_execution_horizon)
        self.chunk_start = start
        self.chunk_obs_time_s = obs_time_s
        self.chunks_applied += 1
        if self.first_land_s is None:
            self.first_land_s = t_s
        return True

    def next_threshold_send_tick(self, margin_s: float) -> int:
        """Threshold mode: the tick at which the queue first runs dry within the expected
        round trip plus ``margin_s`` (the next tick if it already does).

        The robot also waits until it is ``min_execution_horizon`` actions past the
        start of its chunk, so the server may serve the observation it sends.
        """
        if self.first_land_s is None or self.round_trip_s is None:
            return self.last_tick + 1
        threshold_actions = (self.round_trip_s + margin_s) * self.control_hz
        left = self.queue_end - self.action_index
        to_threshold = math.ceil(left - threshold_actions)
        to_min_horizon = self.chunk_start + self.spec.min_execution_horizon - self.action_index
        return self.last_tick + max(1, to_threshold, to_min_horizon)

    def next_chunk_fraction_send_tick(self, chunk_size_threshold: float) -> int:
        """Chunk-fraction mode: the first tick, from the next one on, after which the queue
        holds at most ``chunk_size_threshold`` of a chunk (before the first chunk, and with
        an empty queue, the next tick)."""
        if self.first_land_s is None:
            return self.last_tick + 1
        beyond = self._held_beyond(chunk_size_threshold)
        return self.last_tick + max(1, math.ceil(beyond - _FRACTION_EPS))

    def wants_to_send_chunk_fraction(self, chunk_size_threshold: float) -> bool:
        """Chunk-fraction mode, after this tick's action: whether the queue holds at most
        ``chunk_size_threshold`` of a chunk (always before the first chunk)."""
        return self.first_land_s is None or self._held_beyond(chunk_size_threshold) <= _FRACTION_EPS

    def _held_beyond(self, chunk_size_threshold: float) -> float:
        """Actions queued beyond ``chunk_size_threshold`` of a chunk (at most 0: within)."""
        held = self.queue_end - self.action_index
        return held - chunk_size_threshold * self.spec.max_execution_horizon

    def next_directed_send_tick(self, send_index: int | None) -> int:
        """Directed mode: the tick at which the action index reaches the server's
        ``send_index`` (the next tick if it already has, or if the queue runs dry first)."""
        if self.first_land_s is None or send_index is None:
            return self.last_tick + 1
        reachable = min(send_index, self.queue_end)
        return self.last_tick + max(1, reachable - self.action_index)

    def record_round_trip(self, seconds: float) -> None:
        """Exponential moving average of measured request-to-chunk times."""
        if self.round_trip_s is None:
            self.round_trip_s = seconds
        else:
            self.round_trip_s += 0.25 * (seconds - self.round_trip_s)
