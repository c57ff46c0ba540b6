"""Forward-pass latency per batch size: configured points, learned online.

A profile maps a batch size ``b`` to the seconds one forward pass takes. Between
configured points it interpolates linearly; past the last point it extrapolates
along the last segment (or, with a single point, proportionally to ``b``).

The engine feeds every measured batch into :meth:`LatencyProfile.observe`. Each
batch size keeps a short window of recent samples and its estimate is their
median, so a single stall (a garbage collection, a page fault) does not move it.

Once any size is measured, the configured curve is a guess (often from another GPU,
or one point stretched in proportion) and the measurements are the evidence:

- between two measured sizes, the line through their medians;
- past the largest measured size, the least of three plausible curves: the configured
  one, the configured one scaled as the largest measured size says (its median over
  the configured value), and the measured curve continued (along the secant over the
  upper half of the measured sizes; from a single one, to the next size only, flat);
  never less than the largest measured size takes;
- below the smallest measured size, the least of the configured curve, it scaled as
  that size says, and that size's own time.

A size not yet run is guessed at the cheapest plausible time: a guess too cheap is
corrected by the first batch of that size the scheduler runs, one too dear would keep
the scheduler from ever running it (a server started from the ``l40s-pi05`` preset, 250 ms at four
robots, on a GPU that takes 20 ms, would otherwise keep to single robots for good).
For the same reason a size's first pass more than twice as dear as its estimate waits
for a second pass before it counts, and is dropped if it took more than twice as long
as the second: the first pass at a new input shape is often a cold one (kernels
compiled or tuned, memory allocated), ten times the warm time or more, and taken at
its word it would price that size, and every larger one, out of the scheduler's reach
for good.
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


COLD_PASS_FACTOR = 2.0
"""A batch size's first pass more than this many times dearer than the profile's estimate
is held back as a possible cold start until a second pass at that size: dropped if it
took more than this many times as long as the second (:meth:`LatencyProfile.observe`)."""


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
        seed_sizes = sorted(self._configured)
        self._seed_sizes = np.array(seed_sizes, dtype=np.float64)
        self._seed_seconds = np.array([self._configured[b] for b in seed_sizes])
        self._window = window
        self._samples: dict[int, deque[float]] = {}
        self._cold: dict[int, float] = {}
        """Per batch size never learned: its first pass, held back as far dearer than
        expected (:meth:`observe`)."""
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
        if batch_size < self._table.size:
            return float(self._table[batch_size])
        return float(self._estimates(np.array([batch_size]))[0])

    def table(self, max_batch_size: int) -> np.ndarray:
        """Latencies for sizes ``0..max_batch_size`` (entry 0 is 0.0), for vector code.

        Read-only, and the same array until the estimate changes (the scheduler asks for
        it at every decision)."""
        table = self._tables.get(max_batch_size)
        if table is None:
            table = self._table[: max_batch_size + 1].copy()
            if max_batch_size >= self._table.size:
                beyond = np.arange(self._table.size, max_batch_size + 1)
                table = np.concatenate([table, self._estimates(beyond)])
            table.flags.writeable = False
            self._tables[max_batch_size] = table
        return table

    def points(self) -> dict[int, float]:
        """The current estimate at every size that has a configured point or a sample."""
        estimates = self._estimates(np.array(self._sizes))
        return dict(zip(self._sizes, estimates.tolist(), strict=True))

    # ---- learning ------------------------------------------------------

    def observe(self, batch_size: int, seconds: float) -> None:
        """Record one measured forward pass; called by the engine after every batch.

        The first pass at a batch size that takes more than :data:`COLD_PASS_FACTOR`
        times the estimate there is held back: a new input shape often runs cold (kernels
        compiled or tuned, memory allocated), and one cold pass taken at its word would
        make that size and every larger one look too dear for the scheduler ever to run
        them again. The next pass at that size decides: if the held one took more than
        :data:`COLD_PASS_FACTOR` times as long, it ran cold and is dropped; otherwise both
        count (the estimate was too cheap, corrected a pass later)."""
        if not 1 <= batch_size <= MAX_PROFILE_BATCH_SIZE or not 0 < seconds < np.inf:
            return
        seconds = float(seconds)
        samples = self._samples.get(batch_size)
        if samples is None:
            held_s = self._cold.pop(batch_size, None)
            if held_s is None and seconds > COLD_PASS_FACTOR * self.latency_s(batch_size):
                self._cold[batch_size] = seconds
                return
            samples = self._samples[batch_size] = deque(maxlen=self._window)
            if held_s is not None and held_s <= COLD_PASS_FACTOR * seconds:
                samples.append(held_s)
        samples.append(seconds)
        median = float(statistics.median(samples))
        if self._medians.get(batch_size) != median:
            self._medians[batch_size] = median
            self._rebuild()

    # ---- internals -----------------------------------------------------

    def _rebuild(self) -> None:
        """Recompute the table after a median changed (the configured curve never does)."""
        self._sizes = sorted({*self._configured, *self._medians})
        measured = sorted(self._medians)
        self._measured = np.array(measured, dtype=np.float64)
        self._measured_s = np.array([self._medians[b] for b in measured])
        # How much slower than configured the smallest and the largest measured sizes run,
        # and the measured curve's slope past the largest: the secant over the upper half
        # of the measured sizes (one median is noisy, two neighbours' slope more so); none
        # from fewer than two measured sizes.
        self._scale_below = self._scale_above = 1.0
        self._slope_above: float | None = None
        if measured:
            seconds = self._measured_s
            at_ends = self._configured_s(self._measured[[0, -1]])
            self._scale_below = float(seconds[0] / at_ends[0])
            self._scale_above = float(seconds[-1] / at_ends[1])
        if len(measured) >= 2:
            top = measured[-1]
            j = min(max(bisect.bisect_right(measured, top / 2) - 1, 0), len(measured) - 2)
            rise = float(self._measured_s[-1] - self._measured_s[j])
            self._slope_above = max(rise / (top - measured[j]), 0.0)
        table = np.concatenate([[0.0], self._estimates(np.arange(1, max(self._sizes[-1], 1) + 1))])
        table.flags.writeable = False
        self._table = table
        self._tables.clear()

    def _estimates(self, b: np.ndarray) -> np.ndarray:
        """Seconds at sizes ``b``: a measured size's median, the line between the measured
        sizes around it, else the least of the plausible guesses (the module docstring)."""
        b = b.astype(np.float64)
        configured = self._configured_s(b)
        sizes, seconds = self._measured, self._measured_s
        if not sizes.size:
            return configured
        # Between (and at) measured sizes: the line through their medians.
        estimate = np.interp(b, sizes, seconds)
        # Below them: no dearer than the smallest measured size takes.
        below = b < sizes[0]
        estimate[below] = np.minimum(
            np.minimum(configured[below], configured[below] * self._scale_below), seconds[0]
        )
        # Past them: the measured curve continued (from a single measured size, to the next
        # size only, flat), no less than the largest measured size takes.
        above = b > sizes[-1]
        guess = np.minimum(configured[above], configured[above] * self._scale_above)
        if self._slope_above is not None:
            guess = np.minimum(guess, seconds[-1] + self._slope_above * (b[above] - sizes[-1]))
        else:
            guess[b[above] == sizes[-1] + 1] = seconds[-1]
        estimate[above] = np.maximum(guess, seconds[-1])
        return estimate

    def _configured_s(self, b: np.ndarray) -> np.ndarray:
        """The configured curve at sizes ``b``: its points, the line between the two around
        each size, or past its ends the end segment continued (past the last, never
        falling; before the first, no lower than a tenth of the first point)."""
        sizes, seconds = self._seed_sizes, self._seed_seconds
        if sizes.size == 1:
            return seconds[0] * b / sizes[0]
        curve = np.interp(b, sizes, seconds)
        first = b < sizes[0]
        slope = (seconds[1] - seconds[0]) / (sizes[1] - sizes[0])
        curve[first] = np.maximum(seconds[0] + slope * (b[first] - sizes[0]), 0.1 * seconds[0])
        last = b > sizes[-1]
        slope = max((seconds[-1] - seconds[-2]) / (sizes[-1] - sizes[-2]), 0.0)
        curve[last] = seconds[-1] + slope * (b[last] - sizes[-1])
        return curve
