"""Structured scene variation: every episode in a slightly different scene, reproducibly.

An environment declares its variation axes in a JSON file (``axes/<env>.json``
beside this module; ``--variation.axes-file`` replaces it): per axis its family
(``camera``, ``lighting``, ``object``, ``robot-base``, ...), its default, the
standard deviation of its spread and its physical limits.

Each value is drawn from its own stream keyed by (variation seed, episode, axis
name), never from one shared sequence: an axis's values for a seed are the same
whether any other axis is switched on or off, and the stream is apart from the
policy's seed. The draw is normal around the default, clipped at
:data:`CLIP_STDS` standard deviations, then clamped to the limits; a value the
limits decided is recorded as ``clamped``. Values set by hand (``--scene``) are
checked against the same limits before anything starts.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

CLIP_STDS = 2.5
"""Draws are clipped at this many standard deviations around the default."""

AXES_DIR = Path(__file__).with_name("axes")
"""The JSON files of each environment's default axes."""


@dataclass(frozen=True)
class Axis:
    """One physical quantity of a scene that can vary."""

    name: str
    """Unique within the environment, e.g. ``camera.front.x``."""
    family: str
    """The flag that switches it on, e.g. ``camera``."""
    default: float
    """The scene's own value."""
    std: float
    """Standard deviation of the draw (>= 0)."""
    low: float
    """Smallest physically possible value."""
    high: float
    """Largest physically possible value."""
    unit: str = ""
    """Unit of the value (m, kg, ...), for records."""

    def __post_init__(self) -> None:
        values = (self.default, self.std, self.low, self.high)
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"axis {self.name!r}: default, std and limits must be finite")
        if self.std < 0 or self.low > self.high:
            raise ValueError(
                f"axis {self.name!r}: needs std >= 0 and low <= high, got std {self.std}, "
                f"limits [{self.low}, {self.high}]"
            )
        if not self.low <= self.default <= self.high:
            raise ValueError(
                f"axis {self.name!r}: default {self.default} outside its limits "
                f"[{self.low}, {self.high}]"
            )

    def check(self, value: float, *, what: str = "value") -> None:
        """Raise ValueError naming the axis unless ``value`` lies within the limits."""
        if not (math.isfinite(value) and self.low <= value <= self.high):
            raise ValueError(
                f"{what} {value} for axis {self.name!r} is outside its limits "
                f"[{self.low}, {self.high}]{f' {self.unit}' if self.unit else ''}"
            )


@dataclass(frozen=True)
class VariationConfig:
    """Which axis families vary, and the seed of their draws."""

    enabled: Annotated[bool, tyro.conf.arg(name="variation", prefix_name=False)] = False
    """Turn on every axis family of the environment (``--variation``)."""
    camera: bool | None = None
    """Camera pose; None inherits ``--variation``."""
    lighting: bool | None = None
    """Light brightness; None inherits ``--variation``."""
    object: bool | None = None
    """Object properties (mass, colour); None inherits ``--variation``."""
    robot_base: bool | None = None
    """Robot base position; None inherits ``--variation``."""
    physics: bool | None = None
    """Physics parameters (damping, friction); None inherits ``--variation``."""
    seed: int = 0
    """Seed of the variation streams (apart from the policy's and the scene's seeds)."""
    axes_file: Path | None = None
    """JSON file of axes replacing the environment's defaults."""

    def family_on(self, family: str) -> bool:
        """Whether ``family`` varies (its own flag, else ``enabled``)."""
        flag = getattr(self, family.replace("-", "_"), None)
        return self.enabled if flag is None else bool(flag)


@dataclass(frozen=True)
class AxisValue:
    """The value one axis took in one episode."""

    value: float
    drawn: float | None = None
    """The draw before clamping (None for a value set by hand)."""
    clamped: bool = False
    """The limits decided the value (the clipped draw lay outside them)."""
    source: str = "drawn"
    """``drawn`` or ``scene`` (set by hand)."""


@dataclass(frozen=True)
class Scenario:
    """What an episode's scene was: recorded with the episode."""

    seed: int
    """The variation seed."""
    episode: int
    values: dict[str, AxisValue] = field(default_factory=dict)
    """Every axis that was set, by name."""
    not_applied: tuple[str, ...] = ()
    """Axes switched on that the environment could not set."""


def load_axes(env_name: str, path: Path | None = None) -> dict[str, Axis]:
    """The axes of ``env_name`` from ``path`` (or the default file), by name.

    The file is ``{"axes": [{"name", "family", "default", "std", "low", "high",
    "unit"?}, ...]}``; raises ValueError naming the file and the bad entry.
    """
    path = AXES_DIR / f"{env_name}.json" if path is None else Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read variation axes {str(path)!r}: {exc}") from None
    entries = raw.get("axes") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"variation axes {str(path)!r}: expected {{'axes': [...]}}")
    axes: dict[str, Axis] = {}
    for entry in entries:
        try:
            axis = Axis(**entry)
        except TypeError as exc:
            raise ValueError(f"variation axes {str(path)!r}: bad entry {entry!r}: {exc}") from None
        if axis.name in axes:
            raise ValueError(f"variation axes {str(path)!r}: axis {axis.name!r} twice")
        axes[axis.name] = axis
    return axes


def draw(axis: Axis, seed: int, episode: int) -> AxisValue:
    """The value of ``axis`` in ``episode``: its own stream keyed by (seed, episode, name)."""
    key = zlib.crc32(axis.name.encode())
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, episode, key])))
    raw = axis.default + axis.std * float(rng.standard_normal())
    clipped = min(
        max(raw, axis.default - CLIP_STDS * axis.std), axis.default + CLIP_STDS * axis.std
    )
    value = min(max(clipped, axis.low), axis.high)
    return AxisValue(value=value, drawn=raw, clamped=value != clipped)


def check_scene(axes: Mapping[str, Axis], scene: Mapping[str, float]) -> None:
    """Raise ValueError unless every value set by hand names an axis and lies within it."""
    for name, value in scene.items():
        if name not in axes:
            raise ValueError(f"--scene {name!r} is not an axis; axes: {', '.join(sorted(axes))}")
        axes[name].check(float(value), what="--scene value")


def scenario(
    axes: Mapping[str, Axis],
    config: VariationConfig,
    episode: int,
    scene: Mapping[str, float] | None = None,
) -> Scenario:
    """The values of ``episode``: axes of the families switched on are drawn, values set by
    hand take their place; axes neither drawn nor set are left at the scene's own value."""
    values = {
        name: draw(axis, config.seed, episode)
        for name, axis in axes.items()
        if config.family_on(axis.family)
    }
    for name, value in (scene or {}).items():
        values[name] = AxisValue(value=float(value), source="scene")
    return Scenario(seed=config.seed, episode=episode, values=dict(sorted(values.items())))
