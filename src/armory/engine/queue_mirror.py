"""The server's mirror of every robot's action queue.

The server never sees a robot's queue directly. It learns from each report
("my action index is k, I hold n actions, my current chunk started at s") and
from what it sent (a chunk starting at index s, expected to land at time T). From
both it predicts when each queue runs dry: the robot's deadline.

Between events a robot is modelled as a fluid that executes ``control_hz``
actions per second until its queue is empty. A chunk starting at ``s`` that lands
when the robot is at index ``k`` leaves the queue ending at ``max(k, s + E)``,
``E`` being the robot's maximum execution horizon: Armory's replace-from-index
rule.

State is kept as columns (one numpy array per field, one row per robot) so that
a snapshot of a thousand robots costs a handful of vector operations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from armory_client.wire.queue_state import (
    MAX_CONTROL_HZ,
    MAX_DURATION_S,
    MAX_EXECUTION_HORIZON,
    MAX_INDEX,
    MAX_WEIGHT,
    MIN_CONTROL_HZ,
    MIN_WEIGHT,
)

from armory.scheduling.snapshot import Snapshot

NO_CHUNK = -(2**62)
"""Chunk start index of a robot that has no chunk yet."""


@dataclass(frozen=True)
class RobotLimits:
    """What a robot declares once: its rate, horizons, weight and link delays."""

    control_hz: float
    min_execution_horizon: int
    max_execution_horizon: int
    weight: float = 1.0
    uplink_s: float = 0.0
    """Expected seconds from taking an observation to the server receiving it."""
    downlink_s: float = 0.0
    """Expected seconds from the server sending a chunk to the robot holding it."""
    directed: bool = False
    """The robot sends its observations when the server's replies say (directed mode)."""
    streams: bool = False
    """The robot keeps sending observations while it waits for its chunk (every-tick mode),
    so the server picks the moment each chunk is computed from. A robot that neither
    streams nor is directed asks once per chunk at a moment its own client picks
    (threshold clients; plain openpi, LeRobot and GR00T clients)."""
    plays_out: bool = False
    """The robot asks once per chunk, only once it has played the chunk out (how the server
    models a plain openpi or GR00T client, whose runtime asks for the next chunk when the
    last is done). A robot whose minimum execution horizon is its maximum, neither
    streaming nor directed, does so whatever this says."""


@dataclass(frozen=True)
class QueueReport:
    """What a robot says with an observation (durations and indices, never clock readings)."""

    action_index: int
    """Actions the robot has executed when it took the observation."""
    actions_left: int
    """Actions queued at that moment."""
    chunk_start: int = NO_CHUNK
    """Start index of the chunk the robot is playing (NO_CHUNK before the first)."""


def check_limits(limits: RobotLimits) -> None:
    """Raise ValueError naming the first of ``limits`` outside its sane range (the ranges
    of the wire, docs/protocol.md): called before the limits touch the mirror."""
    _check_range("control_hz", limits.control_hz, MIN_CONTROL_HZ, MAX_CONTROL_HZ)
    _check_range("weight", limits.weight, MIN_WEIGHT, MAX_WEIGHT)
    _check_range("uplink_s", limits.uplink_s, 0.0, MAX_DURATION_S)
    _check_range("downlink_s", limits.downlink_s, 0.0, MAX_DURATION_S)
    _check_range("min_execution_horizon", limits.min_execution_horizon, 1, MAX_EXECUTION_HORIZON)
    _check_range(
        "max_execution_horizon",
        limits.max_execution_horizon,
        limits.min_execution_horizon,
        MAX_EXECUTION_HORIZON,
    )


def check_report(report: QueueReport) -> None:
    """Raise ValueError naming the first index of ``report`` outside ``[0, MAX_INDEX]``
    (its chunk start in ``[-MAX_INDEX, MAX_INDEX]``, or NO_CHUNK): called before the report
    touches the mirror, so that no observation is ever half applied."""
    _check_range("action_index", report.action_index, 0, MAX_INDEX)
    _check_range("actions_left", report.actions_left, 0, MAX_INDEX - report.action_index)
    if report.chunk_start != NO_CHUNK:
        _check_range("chunk_start", report.chunk_start, -MAX_INDEX, MAX_INDEX)


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if not low <= value <= high:
        huge = isinstance(value, int) and abs(value) > MAX_INDEX
        shown = f"an int of {value.bit_length()} bits" if huge else value
        raise ValueError(f"{name} must be in [{low}, {high}], got {shown}")


_FLOAT_COLUMNS = (
    "control_hz",
    "weight",
    "uplink_s",
    "downlink_s",
    "deadline_s",
    "obs_time_s",
    "ref_time_s",
    "report_time_s",
)
_INT_COLUMNS = (
    "robot_id",
    "contact_order",
    "min_execution_horizon",
    "max_execution_horizon",
    "obs_index",
    "obs_chunk_start",
    "last_chunk_start",
    "ref_index",
    "queue_end",
    "report_queue_end",
)
_BOOL_COLUMNS = ("active", "has_obs", "directed", "streams", "plays_out")


class QueueMirror:
    """Predicted queues of all connected robots; the source of scheduler snapshots."""

    def __init__(self, capacity: int = 16) -> None:
        self._capacity = 0
        self._num_rows = 0
        self._num_contacts = 0
        self._row_of: dict[int, int] = {}
        self._pending: list[list[tuple[int, float]]] = []
        self._grow(max(capacity, 1))

    # ---- membership ----------------------------------------------------

    def add(self, robot_id: int, limits: RobotLimits, now_s: float) -> None:
        """Called when a robot first contacts the server. Raises ValueError, changing
        nothing, for limits outside their sane range."""
        check_limits(limits)
        if robot_id in self._row_of:
            raise ValueError(f"robot {robot_id} is already connected")
        if self._num_rows == self._capacity:
            self._grow(2 * self._capacity)
        row = self._num_rows
        self._num_rows += 1
        self._row_of[robot_id] = row
        self._pending.append([])
        self.robot_id[row] = robot_id
        self.contact_order[row] = self._num_contacts
        self._num_contacts += 1
        self._set_limits(row, limits)
        self.active[row] = True
        self.has_obs[row] = False
        self.obs_index[row] = 0
        self.obs_chunk_start[row] = NO_CHUNK
        self.obs_time_s[row] = now_s
        self.last_chunk_start[row] = NO_CHUNK
        self.ref_time_s[row] = now_s
        self.ref_index[row] = 0
        self.queue_end[row] = 0
        self.report_time_s[row] = now_s
        self.report_queue_end[row] = 0
        self.deadline_s[row] = now_s

    def remove(self, robot_id: int) -> None:
        """Called when a robot disconnects; its row is reused by the last one."""
        row = self._row_of.pop(robot_id)
        last = self._num_rows - 1
        if row != last:
            for name in _FLOAT_COLUMNS + _INT_COLUMNS + _BOOL_COLUMNS:
                column = getattr(self, name)
                column[row] = column[last]
            self._pending[row] = self._pending[last]
            self._row_of[int(self.robot_id[row])] = row
        self._pending.pop()
        self.active[last] = False
        self._num_rows -= 1

    def update_limits(self, robot_id: int, limits: RobotLimits) -> None:
        """Called when a connected robot declares new limits (or its link estimate moves).

        The queue state is kept; the next event uses the new values. Raises ValueError,
        changing nothing, for limits outside their sane range.
        """
        check_limits(limits)
        row = self._row_of[robot_id]
        self._set_limits(row, limits)

    def _set_limits(self, row: int, limits: RobotLimits) -> None:
        """Write the robot's limits into its row (on connect and on every update)."""
        self.control_hz[row] = limits.control_hz
        self.weight[row] = limits.weight
        self.uplink_s[row] = limits.uplink_s
        self.downlink_s[row] = limits.downlink_s
        self.directed[row] = limits.directed
        self.streams[row] = limits.streams
        self.plays_out[row] = not (limits.streams or limits.directed) and (
            limits.plays_out or limits.min_execution_horizon >= limits.max_execution_horizon
        )
        self.min_execution_horizon[row] = limits.min_execution_horizon
        self.max_execution_horizon[row] = limits.max_execution_horizon

    def __contains__(self, robot_id: int) -> bool:
        return robot_id in self._row_of

    def __len__(self) -> int:
        return self._num_rows

    # ---- events --------------------------------------------------------

    def observe(self, robot_id: int, report: QueueReport, now_s: float) -> bool:
        """Called when an observation arrives. Returns False if it is older than the one held.

        Reports are ordered by (action index, chunk start): a starving robot keeps its
        index across a landing, and only the chunk start tells the later report apart.
        Raises ValueError, changing nothing, for indices outside their sane range.
        """
        check_report(report)
        row = self._row_of[robot_id]
        if self.has_obs[row] and (report.action_index, report.chunk_start) < (
            self.obs_index[row],
            self.obs_chunk_start[row],
        ):
            return False
        taken_s = now_s - self.uplink_s[row]
        reported_dry = self.report_queue_end[row] <= self.obs_index[row]
        self.has_obs[row] = True
        self.obs_index[row] = report.action_index
        self.obs_chunk_start[row] = report.chunk_start
        self.obs_time_s[row] = taken_s
        self._pending[row] = [p for p in self._pending[row] if p[0] > report.chunk_start]
        self.report_time_s[row] = taken_s
        self.report_queue_end[row] = report.action_index + max(report.actions_left, 0)
        dry_since_s = float(self.deadline_s[row])
        self._replay(row)
        if reported_dry and self.deadline_s[row] <= taken_s and dry_since_s < self.deadline_s[row]:
            # Empty again, as last time: the robot has waited dry since then.
            self.deadline_s[row] = dry_since_s
        return True

    def release(self, robot_id: int) -> None:
        """Called when the robot's held observation is answered without a chunk (every-tick
        deferral): it is no longer eligible until it reports a new one."""
        self.has_obs[self._row_of[robot_id]] = False

    def undispatch(self, robot_id: int, start: int, land_s: float) -> None:
        """Take back a :meth:`dispatch` whose batch never ran: the queue is predicted again
        from the robot's last report and the chunks still pending."""
        row = self._row_of[robot_id]
        pending = self._pending[row]
        if (start, land_s) in pending:
            pending.remove((start, land_s))
            self._replay(row)

    def dispatch(self, robot_id: int, land_s: float) -> int:
        """Called when the robot's held observation goes into a batch expected to land
        at ``land_s``. Returns the start index of the chunk it will produce."""
        row = self._row_of[robot_id]
        start = int(self.obs_index[row])
        self._pending[row].append((start, land_s))
        self.last_chunk_start[row] = start
        self._apply(row, start, land_s)
        self._refresh_deadline(row)
        return start

    # ---- snapshot ------------------------------------------------------

    def snapshot(self, now_s: float, latency_table_s: np.ndarray, max_batch_size: int) -> Snapshot:
        """The scheduler's view at ``now_s`` (arrays are copies)."""
        n = self._num_rows
        s = slice(0, n)
        eligible = self.has_obs[s] & (
            self.obs_index[s] - self.last_chunk_start[s] >= self.min_execution_horizon[s]
        )
        return Snapshot(
            now_s=now_s,
            robot_id=self.robot_id[s].copy(),
            contact_order=self.contact_order[s].copy(),
            deadline_s=self.deadline_s[s].copy(),
            obs_time_s=self.obs_time_s[s].copy(),
            eligible=eligible,
            control_hz=self.control_hz[s].copy(),
            max_execution_horizon=self.max_execution_horizon[s].copy(),
            weight=self.weight[s].copy(),
            downlink_s=self.downlink_s[s].copy(),
            latency_table_s=latency_table_s,
            max_batch_size=max_batch_size,
            directed=self.directed[s].copy(),
            asks_ahead=self._asks_ahead(s),
            streams=self.streams[s].copy(),
            plays_out=self.plays_out[s].copy(),
        )

    def _asks_ahead(self, s: slice) -> np.ndarray:
        """Per robot that asks at its own moment (neither streaming nor directed): the
        actions it held when it took its latest observation, at most a chunk; 0 for the
        others, whose moment the server picks."""
        held = self.report_queue_end[s] - self.obs_index[s]
        np.minimum(held, self.max_execution_horizon[s], out=held)
        return np.where(self.streams[s] | self.directed[s], 0, np.maximum(held, 0))

    def downlink_s_of(self, robot_id: int) -> float:
        return float(self.downlink_s[self._row_of[robot_id]])

    def deadline_of(self, robot_id: int) -> float:
        return float(self.deadline_s[self._row_of[robot_id]])

    def is_eligible(self, robot_id: int) -> bool:
        """Whether the robot's held observation may go into a batch (as in :meth:`snapshot`)."""
        row = self._row_of[robot_id]
        return bool(
            self.has_obs[row]
            and self.obs_index[row] - self.last_chunk_start[row] >= self.min_execution_horizon[row]
        )

    def last_chunk_start_of(self, robot_id: int) -> int:
        """Start index of the newest chunk queued or sent to the robot (NO_CHUNK if none)."""
        return int(self.last_chunk_start[self._row_of[robot_id]])

    def pending_of(self, robot_id: int) -> list[tuple[int, float]]:
        """Chunks sent to the robot that its reports have not shown yet: (start, land_s)."""
        return list(self._pending[self._row_of[robot_id]])

    # ---- internals -----------------------------------------------------

    def _replay(self, row: int) -> None:
        """The queue from the last report, then every pending chunk in order."""
        pending = self._pending[row]
        self.last_chunk_start[row] = max(
            [int(self.obs_chunk_start[row]), *(start for start, _ in pending)]
        )
        self.ref_time_s[row] = self.report_time_s[row]
        self.ref_index[row] = self.obs_index[row]
        self.queue_end[row] = self.report_queue_end[row]
        for start, land_s in pending:
            self._apply(row, start, land_s)
        self._refresh_deadline(row)

    def _apply(self, row: int, start: int, land_s: float) -> None:
        """Advance the fluid model to ``land_s`` and apply a chunk starting at ``start``."""
        hz = self.control_hz[row]
        ref_time = self.ref_time_s[row]
        ref_index = self.ref_index[row]
        queue_end = self.queue_end[row]
        land_s = max(land_s, ref_time)
        executed = min(int((land_s - ref_time) * hz), queue_end - ref_index)
        index = ref_index + executed
        self.ref_time_s[row] = land_s
        self.ref_index[row] = index
        self.queue_end[row] = max(index, start + self.max_execution_horizon[row])

    def _refresh_deadline(self, row: int) -> None:
        self.deadline_s[row] = (
            self.ref_time_s[row]
            + (self.queue_end[row] - self.ref_index[row]) / self.control_hz[row]
        )

    def _grow(self, capacity: int) -> None:
        for names, dtype in (
            (_FLOAT_COLUMNS, np.float64),
            (_INT_COLUMNS, np.int64),
            (_BOOL_COLUMNS, np.bool_),
        ):
            for name in names:
                column = np.zeros(capacity, dtype=dtype)
                if self._capacity:
                    column[: self._capacity] = getattr(self, name)
                setattr(self, name, column)
        self._capacity = capacity
