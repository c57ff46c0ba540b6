"""Forward-pass latency per batch size: configured points, learned online.

A profile maps a batch size ``b`` to the seconds one forward pass takes. Between
configured points it interpolates linearly; past the last point it extrapolates
along the last segment (or, with a single point, proportionally to ``b``).

The engine feeds every measured batch into :meth:`LatencyProfile.observe`. Each
batch size keeps a short window of recent samples and its estimate is their
median, so a single stall (a garbage collection, a page fault) does not move it;
a size with no samples yet keeps its configured value.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from armory.core.profile_file import is_profile_path, read_profile


@dataclass(frozen=True)
class LinearProfileConfig:
    """A GPU-like profile: ``intercept_s + slope_s * b`` seconds for a batch of ``b``."""

    intercept_s: float = 0.050
    """Fixed cost of one forward pass (kernel launches, weights read once)."""
    slope_s: float = 0.010
    """Added seconds per robot in the batch."""

    def __post_init__(self) -> None:
        if self.intercept_s <= 0 or self.slope_s < 0:
            raise ValueError(
                f"linear profile needs intercept_s > 0 and slope_s >= 0, "
                f"got intercept_s={self.intercept_s}, slope_s={self.slope_s}"
            )


PRESET_POINTS: dict[str, dict[int, float]] = {
    # The original project's mock of pi0.5 on an L40S.
    "l40s-pi05": {1: 0.070, 2: 0.135, 3: 0.195, 4: 0.250},
    # The figures the Armory paper reports for pi0.5 on an L40S.
    "l40s-pi05-paper": {1: 0.073, 5: 0.211},
}


def preset_names() -> list[str]:
    return [*PRESET_POINTS, "linear"]


def check_profile_name(name: str) -> None:
    """Refuse a latency-profile name that is neither a preset nor a readable profile file
    (``armory profile``'s output, :mod:`armory.core.profile_file`)."""
    points_for(name)


def points_for(name: str, linear: LinearProfileConfig | None = None) -> dict[int, float]:
    """Latency points of a named preset or of a profile file (a path ending in .json or
    holding a /: each batch size's median); ``linear`` gives two points of the line."""
    if is_profile_path(name):
        return read_profile(name).points()
    if name == "linear":
        line = linear or LinearProfileConfig()
        return {1: line.intercept_s + line.slope_s, 2: line.intercept_s + 2 * line.slope_s}
    if name not in PRESET_POINTS:
        raise ValueError(
            f"unknown latency profile {name!r}; valid names: {', '.join(preset_names())}, "
            "or a profile file (PATH.json, written by armory profile)"
        )
    return dict(PRESET_POINTS[name])


MAX_PROFILE_BATCH_SIZE = 65_536
"""Largest batch size a latency point may name (the profile keeps a table up to its
largest point)."""


class LatencyProfile:
    """Seconds per forward pass as a function of batch size, learned online."""

    def __init__(self, points: Mapping[int, float], *, window: int = 31) -> None:
        if not points:
            raise ValueError("a latency profile needs at least one (batch size, seconds) point")
        for size, seconds in points.items():
            if int(size) != size or not 1 <= size <= MAX_PROFILE_BATCH_SIZE:
                raise ValueError(
                    f"batch size must be an integer in 1..{MAX_PROFILE_BATCH_SIZE}, got {size!r}"
                )
            if not 0 < seconds < math.inf:
                raise ValueError(
                    f"latency must be positive and finite, got {seconds!r} for batch size {size}"
                )
        self._configured = {int(b): float(s) for b, s in points.items()}
        self._window = window
        self._samples: dict[int, deque[float]] = {}
        self._medians: dict[int, float] = {}
        self._tables: dict[int, np.ndarray] = {}
        self._rebuild()

    @classmethod
    def from_preset(cls, name: str, linear: LinearProfileConfig | None = None) -> LatencyProfile:
        return cls(points_for(name, linear))

    # ---- queries -------------------------------------------------------

    def latency_s(self, batch_size: int) -> float:
        """Seconds one forward pass of ``batch_size`` robots is expected to take."""
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        if batch_size < len(self._table):
            return self._table[batch_size]
        return self._extrapolate(batch_size)

    def table(self, max_batch_size: int) -> np.ndarray:
        """Latencies for sizes ``0..max_batch_size`` (entry 0 is 0.0), for vector code.

        Read-only, and the same array until the estimate changes (the scheduler asks for
        it at every decision)."""
        table = self._tables.get(max_batch_size)
        if table is None:
            table = np.array(
                [0.0] + [self.latency_s(b) for b in range(1, max_batch_size + 1)],
                dtype=np.float64,
            )
            table.flags.writeable = False
            self._tables[max_batch_size] = table
        return table

    def points(self) -> dict[int, float]:
        """The current estimate at every size that has a configured point or a sample."""
        return dict(zip(self._sizes, self._seconds, strict=True))

    # ---- learning ------------------------------------------------------

    def observe(self, batch_size: int, seconds: float) -> None:
        """Record one measured forward pass; called by the engine after every batch."""
        if not 1 <= batch_size <= MAX_PROFILE_BATCH_SIZE or not 0 < seconds < np.inf:
            return
        samples = self._samples.setdefault(batch_size, deque(maxlen=self._window))
        samples.append(float(seconds))
        median = float(statistics.median(samples))
        if self._medians.get(batch_size) != median:
            self._medians[batch_size] = median
            self._rebuild()

    # ---- internals -----------------------------------------------------

    def _rebuild(self) -> None:
        merged = {**self._configured, **self._medians}
        self._sizes = sorted(merged)
        self._seconds = [merged[b] for b in self._sizes]
        top = max(self._sizes[-1], 1)
        self._table = [0.0] + [self._interpolate(b) for b in range(1, top + 1)]
        self._tables.clear()

    def _interpolate(self, b: int) -> float:
        sizes, seconds = self._sizes, self._seconds
        if len(sizes) == 1:
            return seconds[0] * b / sizes[0]
        i = bisect.bisect_left(sizes, b)
        if i < len(sizes) and sizes[i] == b:
            return seconds[i]
        if i == 0:  # below the first point: extend the first segment, floor at a fraction
            lo, hi = 0, 1
        elif i == len(sizes):
            return self._extrapolate(b)
        else:
            lo, hi = i - 1, i
        b0, b1, s0, s1 = sizes[lo], sizes[hi], seconds[lo], seconds[hi]
        value = s0 + (s1 - s0) * (b - b0) / (b1 - b0)
        return max(value, 0.1 * s0)

    def _extrapolate(self, b: int) -> float:
        sizes, seconds = self._sizes, self._seconds
        if len(sizes) == 1:
            return seconds[0] * b / sizes[0]
        b0, b1, s0, s1 = sizes[-2], sizes[-1], seconds[-2], seconds[-1]
        slope = max((s1 - s0) / (b1 - b0), 0.0)
        return s1 + slope * (b - b1)
