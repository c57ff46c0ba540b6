"""Armory's reserved observation key: the robot's queue state, carried inside openpi.

An Armory client is an openpi client that adds one map under `ARMORY_KEY` to every
observation. The server removes it before the policy sees the observation and uses
it to schedule: indices and durations only, never clock readings (robot and server
clocks are not synchronised).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

__all__ = ["ARMORY_KEY", "WIRE_VERSION", "RobotState", "attach", "detach"]

ARMORY_KEY = "__armory__"
"""Observation key holding the `RobotState` map; reserved, never seen by the policy."""

WIRE_VERSION = 1
"""Version of the `RobotState` wire map, sent under the key ``"version"``."""

_VERSION_KEY = "version"
_MAX_ROBOT_ID_CHARS = 256

# Sane ranges of every number in the map (docs/protocol.md, "Sane ranges"): a value
# outside them is refused before it reaches the server's shared state.
MAX_INDEX = 2**53 - 1
"""Largest action index, queue length, chunk start, episode id or step (float64 holds
every integer up to it exactly)."""
MIN_CONTROL_HZ = 0.01
MAX_CONTROL_HZ = 10_000.0
"""Control rates from one action per 100 s to 10 kHz."""
MAX_EXECUTION_HORIZON = 65_536
"""Most actions of one chunk a robot may execute."""
MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6
"""Priority weights span twelve orders of magnitude, no more."""
MAX_DURATION_S = 3600.0
"""Longest round trip or deferral delay, in seconds."""
MIN_DEFER_AFTER_S = 0.001
"""Shortest deferral delay: a robot cannot ask to be answered "deferred" at once."""


@dataclasses.dataclass(frozen=True)
class RobotState:
    """What a robot reports with one observation (checked on construction)."""

    robot_id: str
    """Stable name of the robot, unique within the fleet."""
    action_index: int
    """Actions the robot had executed (this episode) when it took the observation."""
    actions_left: int
    """Actions still queued on the robot at that moment."""
    chunk_start: int | None
    """Action index at which the chunk being played starts; None before the first chunk."""
    control_hz: float
    """Control rate: actions executed per second."""
    min_execution_horizon: int
    """Fewest actions of a chunk the robot executes before it may switch to a new one."""
    max_execution_horizon: int
    """Most actions of a chunk the robot executes (the rest are discarded)."""
    episode_id: int = 0
    """Episode counter; action indices restart when it changes."""
    observation_step: int = 0
    """Observations this robot has sent in the episode before this one."""
    round_trip_s: float | None = None
    """The client's own measured request-to-reply duration; None before the first reply."""
    round_trip_step: int | None = None
    """The ``observation_step`` of the request `round_trip_s` was measured on, so that the
    server subtracts its own time on that very request to learn the link delay; None:
    `round_trip_s` is a smoothed estimate, set against the server's previous request."""
    weight: float = 1.0
    """Relative priority of this robot when capacity is short."""
    defer_after_s: float | None = None
    """Every-tick mode: if no batch has taken this observation this many seconds after it
    arrived, the server answers "deferred" (no chunk) so that the robot can send a newer
    one; None: the server holds the observation until it is served."""
    pipelined: bool = False
    """Every-tick mode against a server that allows it (``"pipelining": true`` in its
    metadata): the robot sends its next observation without waiting for this reply. A
    newer observation replaces this one if no batch has taken it yet (this one is then
    answered "deferred"), and one the server cannot serve yet waits instead of being
    refused."""
    directed: bool = False
    """Directed mode: the robot sends its next observation at the action index the server
    names in each reply, and only then; the server may tell it to send once its queue has
    run dry when it would keep the robot waiting anyway (sent only when true)."""

    def __post_init__(self) -> None:
        if not isinstance(self.robot_id, str) or not self.robot_id:
            raise ValueError(f"RobotState.robot_id must be a non-empty str, got {self.robot_id!r}")
        if len(self.robot_id) > _MAX_ROBOT_ID_CHARS:
            raise ValueError(f"RobotState.robot_id is longer than {_MAX_ROBOT_ID_CHARS} chars")
        self._set_int("action_index", 0, MAX_INDEX)
        self._set_int("actions_left", 0, MAX_INDEX)
        self._set_int("chunk_start", 0, MAX_INDEX, optional=True)
        self._set_float("control_hz", MIN_CONTROL_HZ, MAX_CONTROL_HZ)
        self._set_int("min_execution_horizon", 1, MAX_EXECUTION_HORIZON)
        self._set_int("max_execution_horizon", 1, MAX_EXECUTION_HORIZON)
        self._set_int("episode_id", 0, MAX_INDEX)
        self._set_int("observation_step", 0, MAX_INDEX)
        self._set_float("round_trip_s", 0.0, MAX_DURATION_S, optional=True)
        self._set_int("round_trip_step", 0, MAX_INDEX, optional=True)
        self._set_float("weight", MIN_WEIGHT, MAX_WEIGHT)
        self._set_float("defer_after_s", MIN_DEFER_AFTER_S, MAX_DURATION_S, optional=True)
        if self.action_index + self.actions_left > MAX_INDEX:
            raise ValueError(
                f"RobotState.action_index + actions_left must be <= {MAX_INDEX}, got "
                f"{self.action_index} + {self.actions_left}"
            )
        if not isinstance(self.pipelined, bool):
            raise ValueError(f"RobotState.pipelined must be a bool, got {self.pipelined!r}")
        if not isinstance(self.directed, bool):
            raise ValueError(f"RobotState.directed must be a bool, got {self.directed!r}")
        if self.max_execution_horizon < self.min_execution_horizon:
            raise ValueError(
                f"RobotState.max_execution_horizon ({self.max_execution_horizon}) is below "
                f"min_execution_horizon ({self.min_execution_horizon})"
            )

    def to_wire(self) -> dict[str, Any]:
        """The map sent under `ARMORY_KEY`: plain str, int, float and None values."""
        wire = {_VERSION_KEY: WIRE_VERSION, **dataclasses.asdict(self)}
        if not self.directed:
            del wire["directed"]  # servers that predate the field accept the map
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> RobotState:
        """Parse a map made by `to_wire`; a ValueError names any bad or missing field."""
        if not isinstance(wire, Mapping):
            raise ValueError(f"{ARMORY_KEY} must be a map, got {type(wire).__name__}")
        fields = dict(wire)
        version = fields.pop(_VERSION_KEY, WIRE_VERSION)
        if version != WIRE_VERSION:
            raise ValueError(f"{ARMORY_KEY} version {version!r} is not {WIRE_VERSION}")
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(map(str, fields.keys() - known))
        if unknown:
            raise ValueError(f"{ARMORY_KEY} has unknown fields {unknown}")
        required = {
            field.name
            for field in dataclasses.fields(cls)
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - fields.keys())
        if missing:
            raise ValueError(f"{ARMORY_KEY} lacks required fields {missing}")
        return cls(**fields)

    def _set_int(self, name: str, low: int, high: int, *, optional: bool = False) -> None:
        """Check field `name` is an int in [low, high] (or None if optional); store it as int."""
        value = getattr(self, name)
        if value is None and optional:
            return
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise ValueError(f"RobotState.{name} must be an int, got {_short(value)}")
        if not low <= value <= high:
            raise ValueError(f"RobotState.{name} must be in [{low}, {high}], got {_short(value)}")
        object.__setattr__(self, name, int(value))

    def _set_float(self, name: str, low: float, high: float, *, optional: bool = False) -> None:
        """Check field `name` is a number in [low, high] (or None if optional); store it as
        float."""
        value = getattr(self, name)
        if value is None and optional:
            return
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ValueError(f"RobotState.{name} must be a number, got {_short(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not (math.isfinite(number) and low <= number <= high):
            raise ValueError(f"RobotState.{name} must be in [{low}, {high}], got {_short(value)}")
        object.__setattr__(self, name, number)


def _short(value: Any) -> str:
    """A value for an error message, at most 40 characters (a huge int is not printed)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INDEX:
        return f"an int of {value.bit_length()} bits"
    return f"{value!r:.40}"


def attach(obs: Mapping[str, Any], state: RobotState) -> dict[str, Any]:
    """Return a new observation map: `obs` plus `state` under `ARMORY_KEY`."""
    return {**obs, ARMORY_KEY: state.to_wire()}


def detach(obs: Mapping[str, Any]) -> tuple[dict[str, Any], RobotState | None]:
    """Split an observation into (a new map without `ARMORY_KEY`, its RobotState or None)."""
    rest = dict(obs)
    if ARMORY_KEY not in rest:
        return rest, None
    return rest, RobotState.from_wire(rest.pop(ARMORY_KEY))
