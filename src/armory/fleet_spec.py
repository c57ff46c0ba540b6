"""Fleet files: the robots, the policy's latency and the server limits, in YAML or JSON.

The same file drives the virtual-time simulator (``armory simulate``) and the
real-time fleet runner. See docs/fleet-file.md for the format.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from armory.core.latency_profile import LatencyProfile, LinearProfileConfig, points_for
from armory.core.profile_file import is_profile_path

RequestMode = Literal["every-tick", "threshold", "directed", "chunk-fraction"]
REQUEST_MODES: tuple[str, ...] = ("every-tick", "threshold", "directed", "chunk-fraction")
STREAMING_MODES: tuple[str, ...] = ("every-tick", "chunk-fraction")
"""Request modes in which a robot keeps sending observations while its chunk is on its
way (every tick, or every tick while its queue is short), so that the server picks the
observation each chunk is computed from."""


@dataclass(frozen=True)
class DelaySpec:
    """One-way network delay: ``median_s`` plus uniform jitter in ``[-jitter_s, +jitter_s]``."""

    median_s: float = 0.005
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        if self.median_s < 0 or self.jitter_s < 0:
            raise ValueError(f"delay median_s and jitter_s must be >= 0, got {self}")
        if self.jitter_s > self.median_s:
            raise ValueError(
                f"delay jitter_s ({self.jitter_s}) must not exceed median_s ({self.median_s}): "
                "a message cannot arrive before it is sent"
            )

    @property
    def min_s(self) -> float:
        """The smallest delay the distribution can produce."""
        return self.median_s - self.jitter_s


@dataclass(frozen=True)
class RobotGroup:
    """``count`` identical robots."""

    count: int = 1
    control_hz: float = 20.0
    """Actions executed per second while the queue is not empty."""
    min_execution_horizon: int = 1
    """A new chunk must start at least this many actions after the last queued chunk's start."""
    max_execution_horizon: int = 10
    """Of each chunk, actions at index >= start + this are never executed."""
    weight: float = 1.0
    """Importance of this robot's motion in weighted throughput and in scheduling."""
    uplink: DelaySpec = field(default_factory=DelaySpec)
    downlink: DelaySpec = field(default_factory=DelaySpec)
    name: str = "robot"

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"robot group {self.name!r}: count must be >= 1, got {self.count}")
        if not self.control_hz > 0:
            raise ValueError(f"robot group {self.name!r}: control_hz must be > 0")
        if not 1 <= self.min_execution_horizon <= self.max_execution_horizon:
            raise ValueError(
                f"robot group {self.name!r}: need 1 <= min_execution_horizon <= "
                f"max_execution_horizon, got {self.min_execution_horizon} and "
                f"{self.max_execution_horizon}"
            )
        if not self.weight > 0:
            raise ValueError(f"robot group {self.name!r}: weight must be > 0, got {self.weight}")


@dataclass(frozen=True)
class RobotSpec:
    """One robot of a fleet, as the simulator and the fleet runner see it."""

    robot_id: str
    control_hz: float
    min_execution_horizon: int
    max_execution_horizon: int
    weight: float
    uplink: DelaySpec
    downlink: DelaySpec


@dataclass(frozen=True)
class FleetSpec:
    """A fleet of robots sharing one policy server."""

    name: str = "fleet"
    robots: tuple[RobotGroup, ...] = (RobotGroup(),)
    action_horizon: int = 10
    """Actions per chunk the policy returns."""
    max_batch_size: int = 5
    latency_profile: str = "l40s-pi05"
    """A preset name (l40s-pi05, l40s-pi05-paper, linear) or a profile file (PATH.json,
    written by armory profile); ignored when latency_points is set."""
    latency_points: dict[int, float] | None = None
    """Explicit forward-pass seconds per batch size."""
    linear: LinearProfileConfig = field(default_factory=LinearProfileConfig)
    """Parameters of the ``linear`` preset."""
    latency_jitter: float = 0.0
    """Relative jitter of each forward pass: uniform in ``[1 - j, 1 + j]`` times the profile."""
    request_mode: RequestMode = "every-tick"
    threshold_margin_s: float = 0.05
    """Threshold mode: send when the queue runs dry within the round trip plus this margin.
    Directed mode: the margin the server adds to the lead it asks for."""
    chunk_size_threshold: float = 0.5
    """Chunk-fraction mode (what LeRobot's async client does, under this name): send an
    observation on every tick while the queue holds at most this fraction of a chunk
    (``max_execution_horizon`` actions)."""

    def __post_init__(self) -> None:
        if self.request_mode not in REQUEST_MODES:
            raise ValueError(
                f"unknown request_mode {self.request_mode!r}; valid: {', '.join(REQUEST_MODES)}"
            )
        if not 0.0 <= self.chunk_size_threshold <= 1.0:
            raise ValueError(
                f"chunk_size_threshold must be in [0, 1], got {self.chunk_size_threshold}"
            )
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if not 0 <= self.latency_jitter < 1:
            raise ValueError(f"latency_jitter must be in [0, 1), got {self.latency_jitter}")
        for group in self.robots:
            if group.max_execution_horizon > self.action_horizon:
                raise ValueError(
                    f"robot group {group.name!r}: max_execution_horizon "
                    f"{group.max_execution_horizon} exceeds the action_horizon "
                    f"{self.action_horizon}"
                )
        self.profile()  # validates the profile name and points

    def profile(self) -> LatencyProfile:
        """A fresh latency profile seeded from this fleet's configuration."""
        if self.latency_points:
            return LatencyProfile(self.latency_points)
        return LatencyProfile(points_for(self.latency_profile, self.linear))

    def robot_specs(self) -> list[RobotSpec]:
        """Every robot, groups expanded in order, ids ``<group name>-<n>``."""
        specs = []
        for group in self.robots:
            for n in range(group.count):
                specs.append(
                    RobotSpec(
                        robot_id=f"{group.name}-{n}",
                        control_hz=group.control_hz,
                        min_execution_horizon=group.min_execution_horizon,
                        max_execution_horizon=group.max_execution_horizon,
                        weight=group.weight,
                        uplink=group.uplink,
                        downlink=group.downlink,
                    )
                )
        return specs

    @property
    def num_robots(self) -> int:
        return sum(group.count for group in self.robots)

    def with_rates_scaled(self, factor: float) -> FleetSpec:
        """The same fleet with every robot's control rate multiplied by ``factor``."""
        groups = tuple(
            dataclasses.replace(g, control_hz=g.control_hz * factor) for g in self.robots
        )
        return dataclasses.replace(self, robots=groups)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _checked_keys(cls: type, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``raw`` as keyword arguments of the dataclass ``cls``, checked before it is built.

    ``where`` names the mapping in the file (``robots[0]``; empty at the top level).
    An unknown key fails with the valid ones listed; a value of an ``int``, ``float``
    or ``str`` field fails unless it is a whole number, a finite number or a string
    (YAML's ``.inf``, or ``2.5`` for a count, is refused here, naming the key). Fields
    of other types are the caller's to convert.
    """
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = set(raw) - set(valid)
    if unknown:
        within = f" under {where}" if where else ""
        raise ValueError(f"unknown keys {sorted(unknown)}{within}; valid keys: {sorted(valid)}")
    hints = typing.get_type_hints(cls)
    for key, value in raw.items():
        hint, name = hints[key], f"{where}.{key}" if where else key
        if hint is int and not (_is_number(value) and float(value).is_integer()):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        if hint is float and not (_is_number(value) and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        if hint is str and not isinstance(value, str):
            raise ValueError(f"{name} must be a string, got {value!r}")
    return {key: int(value) if hints[key] is int else value for key, value in raw.items()}


def _delay(value: Any, where: str) -> DelaySpec:
    if value is None:
        return DelaySpec()
    if _is_number(value):
        return DelaySpec(**_checked_keys(DelaySpec, {"median_s": value}, where))
    if isinstance(value, dict):
        return DelaySpec(**_checked_keys(DelaySpec, value, where))
    raise ValueError(f"{where}: a delay is a number of seconds or {{median_s, jitter_s}}")


def fleet_from_dict(data: dict[str, Any], *, default_name: str = "fleet") -> FleetSpec:
    """Build a fleet from the parsed YAML/JSON mapping, naming any unknown key."""
    if not isinstance(data, dict):
        raise ValueError("a fleet file must hold a mapping at its top level")
    kwargs = _checked_keys(FleetSpec, data, "")
    kwargs.setdefault("name", default_name)
    robots = kwargs.get("robots") or []
    if not isinstance(robots, list):
        raise ValueError("robots is a list of robot groups, e.g. [{count: 2, control_hz: 30}]")
    groups = []
    for i, raw in enumerate(robots):
        where = f"robots[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: each robot group is a mapping")
        group = _checked_keys(RobotGroup, raw, where)
        group["uplink"] = _delay(group.get("uplink"), where + ".uplink")
        group["downlink"] = _delay(group.get("downlink"), where + ".downlink")
        group.setdefault("name", f"g{i}")
        groups.append(RobotGroup(**group))
    if not groups:
        raise ValueError("a fleet needs at least one robot group under 'robots'")
    names = [group.name for group in groups]
    if len(set(names)) != len(names):
        raise ValueError(f"robot group names must differ (they prefix robot ids), got {names}")
    kwargs["robots"] = tuple(groups)
    if kwargs.get("latency_points") is not None:
        points = kwargs["latency_points"]
        if not isinstance(points, dict):
            raise ValueError("latency_points is a mapping of batch size to seconds, e.g. {1: 0.07}")
        kwargs["latency_points"] = {int(b): float(s) for b, s in points.items()}
        if not all(math.isfinite(s) for s in kwargs["latency_points"].values()):
            raise ValueError(f"latency_points must be finite seconds, got {points}")
    if "linear" in kwargs:
        linear = kwargs["linear"]
        if not isinstance(linear, dict):
            raise ValueError("linear is a mapping, e.g. {intercept_s: 0.05, slope_s: 0.01}")
        kwargs["linear"] = LinearProfileConfig(
            **_checked_keys(LinearProfileConfig, linear, "linear")
        )
    return FleetSpec(**kwargs)


def fleet_to_dict(fleet: FleetSpec) -> dict[str, Any]:
    """The plain mapping a fleet file holds; inverse of :func:`fleet_from_dict`."""
    data = dataclasses.asdict(fleet)
    data["robots"] = list(data["robots"])
    return data


def load_fleet(path: str | Path) -> FleetSpec:
    """Read a fleet file (``.yaml``, ``.yml`` or ``.json``); a relative profile file
    (``latency_profile: profiles/x.json``) is found beside the fleet file."""
    path = Path(path)
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    profile = data.get("latency_profile") if isinstance(data, dict) else None
    if isinstance(profile, str) and is_profile_path(profile) and not Path(profile).is_absolute():
        data = {**data, "latency_profile": str(path.parent / profile)}
    try:
        return fleet_from_dict(data, default_name=path.stem)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
