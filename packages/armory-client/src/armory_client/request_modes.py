"""Request modes: when a robot sends the server an observation.

A mode is a pure decision, ``should_send(state) -> bool``, asked on every tick
after the tick's action (if any) was executed, and again when a reply lands
while an observation is waiting. It reads a `SendState` snapshot and nothing
else, so it is tested without sockets or clocks.

The openpi protocol is strict request/response, so the runtime keeps one request
in flight. A mode that wants to send while one is in flight (a streaming one:
every-tick, chunk-fraction) has its newest observation wait; it goes out when the
reply lands, if the mode still wants it then. Against a server that allows
pipelining, a streaming mode sends each observation at once instead
(`RuntimeConfig.pipelining`).

- `every-tick`: every tick's observation (pipelined, or the newest waits while one
  is in flight).
- `threshold`: when the queue would run dry within the measured round trip plus a
  margin, once the robot is `min_execution_horizon` actions into its chunk (an
  empty queue always asks: it can get no further into its chunk).
- `directed`: when the action index reaches the `next_request_index` of the latest
  reply (or the queue is empty); as `threshold` when the server names none.
- `chunk-fraction`: every tick while the queue holds at most a fraction of a chunk (what
  LeRobot's async client does with its `chunk_size_threshold`); sent as every-tick's are.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar

__all__ = [
    "REQUEST_MODES",
    "ChunkFraction",
    "Directed",
    "EveryTick",
    "RequestMode",
    "RoundTripEstimate",
    "SendState",
    "Threshold",
    "make_request_mode",
]


@dataclasses.dataclass(frozen=True)
class SendState:
    """What a request mode sees when it decides (one robot, one moment)."""

    action_index: int
    """Actions executed this episode (the index an observation taken now reports)."""
    actions_left: int
    """Actions queued."""
    chunk_start: int | None
    """Start index of the chunk being played; None before the episode's first chunk."""
    control_hz: float
    """Actions executed per second."""
    min_execution_horizon: int
    """Fewest actions of a chunk played before the server may replace it."""
    in_flight: bool
    """A request has been sent and its reply has not landed yet."""
    round_trip_s: float | None
    """Smoothed measured request-to-reply time; None before the first reply."""
    next_request_index: int | None = None
    """From the latest applied reply: the index at which to send next; None if not given."""
    max_execution_horizon: int | None = None
    """Most actions of a chunk played (a chunk's length, for `chunk-fraction`); None if
    not given."""


class RequestMode(abc.ABC):
    """Decides, from a `SendState`, whether the robot sends an observation now."""

    name: ClassVar[str]
    streams: ClassVar[bool] = False
    """The robot keeps sending observations while a reply is on its way (pipelined where
    the server allows it, else the newest waits and a late one is answered "deferred")."""

    @abc.abstractmethod
    def should_send(self, state: SendState) -> bool:
        """Called on every tick, and when a reply lands while an observation waits."""


class EveryTick(RequestMode):
    """Every observation goes to the server; the scheduler alone decides when to serve."""

    name = "every-tick"
    streams = True

    def should_send(self, state: SendState) -> bool:
        """Every tick once the robot is `min_execution_horizon` actions into its chunk (the
        server could not serve an earlier observation), at once before the first chunk or
        with an empty queue."""
        return _servable(state)


@dataclasses.dataclass(frozen=True)
class ChunkFraction(RequestMode):
    """Every tick while the queue holds at most `chunk_size_threshold` of a chunk: the rule
    of LeRobot's async client (``queue size / chunk size <= chunk_size_threshold``), which
    is to be chosen above the expected latency. A fleet of LeRobot robots is simulated or
    load-tested with it."""

    name: ClassVar[str] = "chunk-fraction"
    streams = True
    chunk_size_threshold: float = 0.5
    """Fraction of a chunk (`max_execution_horizon` actions) at or below which it sends."""

    def __post_init__(self) -> None:
        _check_fraction(self.chunk_size_threshold)

    def should_send(self, state: SendState) -> bool:
        """As `every-tick` while ``actions_left <= chunk_size_threshold *
        max_execution_horizon`` (every tick when the chunk's length is not given)."""
        if state.max_execution_horizon is not None and state.chunk_start is not None:
            most = self.chunk_size_threshold * state.max_execution_horizon
            if state.actions_left > most + 1e-9:
                return False
        return _servable(state)


@dataclasses.dataclass(frozen=True)
class Threshold(RequestMode):
    """Send when the queue would run dry within the measured round trip (plus a margin);
    one request at a time. LeRobot's async client asks at a fixed fraction of its chunk,
    to be chosen above the expected latency; this one sets it from the round trips it
    measures."""

    name: ClassVar[str] = "threshold"
    margin_s: float = 0.05
    """Added to the round trip: slack for jitter and tick boundaries (seconds)."""

    def __post_init__(self) -> None:
        _check_margin(self.margin_s)

    def should_send(self, state: SendState) -> bool:
        """No request in flight, and either no chunk or round trip yet, or an empty
        queue, or both: the robot is `min_execution_horizon` actions into its chunk,
        and ``actions_left / control_hz <= round_trip_s + margin_s``."""
        return not state.in_flight and _threshold_due(state, self.margin_s)


@dataclasses.dataclass(frozen=True)
class Directed(RequestMode):
    """Send at the action index the server named in its latest reply; `threshold`
    when it named none (e.g. a plain openpi server)."""

    name: ClassVar[str] = "directed"
    margin_s: float = 0.05
    """Margin of the threshold fallback (seconds)."""

    def __post_init__(self) -> None:
        _check_margin(self.margin_s)

    def should_send(self, state: SendState) -> bool:
        """No request in flight, and either no chunk yet, or the index has reached
        `next_request_index`, or the queue is empty (an index past the queue's end
        could never be reached); without an index, as `Threshold`."""
        if state.in_flight:
            return False
        if state.chunk_start is None:
            return True
        if state.next_request_index is None:
            return _threshold_due(state, self.margin_s)
        return state.action_index >= state.next_request_index or state.actions_left == 0


def _servable(state: SendState) -> bool:
    """Whether the server could serve an observation taken now: no chunk yet, an empty
    queue, or `min_execution_horizon` actions into the chunk."""
    return (
        state.chunk_start is None
        or state.actions_left == 0
        or state.action_index - state.chunk_start >= state.min_execution_horizon
    )


def _threshold_due(state: SendState, margin_s: float) -> bool:
    """The threshold rule, apart from the in-flight check."""
    if state.chunk_start is None or state.round_trip_s is None or state.actions_left == 0:
        # An empty queue can never get further into its chunk: ask now.
        return True
    if state.action_index - state.chunk_start < state.min_execution_horizon:
        return False
    return state.actions_left / state.control_hz <= state.round_trip_s + margin_s


def _check_margin(margin_s: float) -> None:
    """Raise a ValueError naming a margin that is negative or not finite."""
    if not (isinstance(margin_s, int | float) and math.isfinite(margin_s) and margin_s >= 0):
        raise ValueError(f"margin_s must be a finite number >= 0, got {margin_s!r}")


def _check_fraction(fraction: float) -> None:
    """Raise a ValueError naming a chunk fraction outside [0, 1]."""
    if not (isinstance(fraction, int | float) and 0.0 <= fraction <= 1.0):
        raise ValueError(f"chunk_size_threshold must be a number in [0, 1], got {fraction!r}")


REQUEST_MODES: dict[str, type[RequestMode]] = {
    mode.name: mode for mode in (EveryTick, Threshold, Directed, ChunkFraction)
}
"""Every request mode by name."""


def make_request_mode(
    name: str, *, margin_s: float = 0.05, chunk_size_threshold: float = 0.5
) -> RequestMode:
    """The mode called `name`; `margin_s` is the threshold margin where the mode has one,
    `chunk_size_threshold` the fraction of `chunk-fraction`.

    Raises ValueError listing every valid name when `name` is unknown.
    """
    if name == EveryTick.name:
        return EveryTick()
    if name == Threshold.name:
        return Threshold(margin_s=margin_s)
    if name == Directed.name:
        return Directed(margin_s=margin_s)
    if name == ChunkFraction.name:
        return ChunkFraction(chunk_size_threshold=chunk_size_threshold)
    raise ValueError(f"unknown request mode {name!r}; valid: {', '.join(REQUEST_MODES)}")


class RoundTripEstimate:
    """Exponential moving average of measured round trips (the first sample is taken as is)."""

    def __init__(self, *, smoothing: float = 0.25) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        # Weight of the newest sample.
        self.smoothing = smoothing
        self.value_s: float | None = None
        """The estimate; None before the first sample."""

    def update(self, sample_s: float) -> float:
        """Called with each measured round trip; returns the new estimate."""
        if self.value_s is None:
            self.value_s = sample_s
        else:
            self.value_s += self.smoothing * (sample_s - self.value_s)
        return self.value_s
