"""Request modes: when a robot sends the server an observation.

A mode is a pure decision, ``should_send(state) -> bool``, asked on every tick
after the tick's action (if any) was executed, and again when a reply lands
while an observation is waiting. It reads a `SendState` snapshot and nothing
else, so it is tested without sockets or clocks.

The openpi protocol is strict request/response, so the runtime keeps one request
in flight. A mode that wants to send while one is in flight (only `every-tick`
does) has its newest observation wait; it goes out when the reply lands, if the
mode still wants it then. Against a server that allows pipelining, every-tick
sends each observation at once instead (`RuntimeConfig.pipelining`).

- `every-tick`: every tick's observation (pipelined, or the newest waits while one
  is in flight).
- `threshold`: when the queue would run dry within the measured round trip plus a
  margin, once the robot is `min_execution_horizon` actions into its chunk (an
  empty queue always asks: it can get no further into its chunk).
- `directed`: when the action index reaches the `next_request_index` of the latest
  reply (or the queue is empty); as `threshold` when the server names none.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar

__all__ = [
    "REQUEST_MODES",
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


class RequestMode(abc.ABC):
    """Decides, from a `SendState`, whether the robot sends an observation now."""

    name: ClassVar[str]

    @abc.abstractmethod
    def should_send(self, state: SendState) -> bool:
        """Called on every tick, and when a reply lands while an observation waits."""


class EveryTick(RequestMode):
    """Every observation goes to the server; the scheduler alone decides when to serve."""

    name = "every-tick"

    def should_send(self, state: SendState) -> bool:
        """Every tick once the robot is `min_execution_horizon` actions into its chunk (the
        server could not serve an earlier observation), at once before the first chunk or
        with an empty queue."""
        return (
            state.chunk_start is None
            or state.actions_left == 0
            or state.action_index - state.chunk_start >= state.min_execution_horizon
        )


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


REQUEST_MODES: dict[str, type[RequestMode]] = {
    mode.name: mode for mode in (EveryTick, Threshold, Directed)
}
"""Every request mode by name."""


def make_request_mode(name: str, *, margin_s: float = 0.05) -> RequestMode:
    """The mode called `name`; `margin_s` is the threshold margin where the mode has one.

    Raises ValueError listing every valid name when `name` is unknown.
    """
    if name == EveryTick.name:
        return EveryTick()
    if name == Threshold.name:
        return Threshold(margin_s=margin_s)
    if name == Directed.name:
        return Directed(margin_s=margin_s)
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
