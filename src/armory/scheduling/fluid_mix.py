"""A fleet's fluid optimum, remembered: whether it fits and which batch sizes it uses.

Solving the fluid program (:mod:`armory.scheduling.fluid`) takes milliseconds, a
scheduler decides many times a second, and a live server's learned latencies and
link estimates never stop moving. :class:`FluidMixCache` solves once per set of
robots and again only when the latency table or a robot's link has moved by more
than a tolerance since.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armory.scheduling.fluid import FluidSolution, solve_fluid
from armory.scheduling.snapshot import Snapshot

_MIX_SHARE = 0.05
"""A batch size the fluid optimum runs for less than this share of its batches is unused."""

_CACHE_SIZE = 64
"""Fleet compositions whose fluid optimum is remembered."""

_TABLE_TOLERANCE = 0.02
"""Relative change of any batch size's latency that makes a remembered optimum stale."""

_LINK_STEP_S = 0.005
"""Round-trip links are grouped in steps of this much; a robot's link moving by more
makes a remembered optimum stale."""


@dataclass(frozen=True)
class FluidMix:
    """What a scheduler needs of a fleet's fluid optimum (weighted, at the least GPU
    time)."""

    fits: bool
    """The optimum serves every robot in full (each chunk charged the fewest ticks its
    latency can hold)."""
    sizes: np.ndarray
    """Batch sizes the optimum uses, under either tick charge (possibly none)."""


@dataclass(frozen=True)
class _Remembered:
    mix: FluidMix
    table_s: np.ndarray
    links_s: np.ndarray
    """Each robot's round-trip link (2 x downlink), in snapshot order."""


class FluidMixCache:
    """The fluid optimum per set of robots, solved again only when it has gone stale."""

    def __init__(self) -> None:
        self._remembered: dict[bytes, _Remembered] = {}

    def lookup(self, s: Snapshot) -> FluidMix:
        """The optimum for ``s``'s robots, latency table and links."""
        key = s.robot_id.tobytes()
        table = s.latency_table_s
        links_s = 2.0 * s.downlink_s
        cached = self._remembered.get(key)
        if (
            cached is not None
            and _close(cached.table_s, table)
            and np.all(np.abs(links_s - cached.links_s) <= _LINK_STEP_S)
        ):
            return cached.mix
        # Robots alike in rate, horizon, round-trip link (in steps of _LINK_STEP_S) and
        # weight form one class of the program.
        steps = np.round(links_s / _LINK_STEP_S) * _LINK_STEP_S
        classes = np.stack([s.control_hz, s.max_execution_horizon, steps, s.weight], axis=1)
        classes, counts = np.unique(np.round(classes, 6), axis=0, return_counts=True)
        solutions = [
            solve_fluid(
                classes[:, 0],
                classes[:, 1],
                classes[:, 2],
                table[1:],
                weight=classes[:, 3],
                count=counts,
                gpu_cost=1e-3,
                expected_ticks=expected,
            )
            for expected in (False, True)
        ]
        # Sizes: those the optimum uses when each chunk pays the fewest ticks its
        # window can hold, and those it uses when it pays the ticks expected at a
        # random phase (more, so smaller batches can win).
        sizes = np.union1d(*(_sizes_used(solution) for solution in solutions))
        fits = bool(np.all(solutions[0].actions_per_s >= classes[:, 0] * (1.0 - 1e-6)))
        mix = FluidMix(fits, sizes)
        if len(self._remembered) >= _CACHE_SIZE:
            self._remembered.clear()
        self._remembered[key] = _Remembered(mix, table.copy(), links_s)
        return mix


def _sizes_used(solution: FluidSolution) -> np.ndarray:
    """Batch sizes the fluid optimum runs for at least ``_MIX_SHARE`` of its batches."""
    batches = solution.batches_per_s
    return np.flatnonzero(batches > _MIX_SHARE * max(batches.sum(), 1e-12)) + 1


def _close(solved_for: np.ndarray, table: np.ndarray) -> bool:
    """Whether ``table`` is within ``_TABLE_TOLERANCE`` of the table an optimum was
    solved for, at every batch size."""
    if solved_for.shape != table.shape:
        return False
    return bool(np.all(np.abs(table - solved_for) <= _TABLE_TOLERANCE * solved_for))
