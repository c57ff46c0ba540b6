"""What a scheduler needs of a fleet's fluid optimum: whether it fits, which batch
sizes it uses, and the share of each robot's ticks it serves.

Solving the fluid program (:mod:`armory.scheduling.fluid`) takes milliseconds and a
scheduler decides many times a second, so :func:`fluid_mix` is memoised. It is a pure
function of the snapshot: robots alike in rate, horizon and weight whose round trips
leave no wide gap form one class at their mean round-trip link (in steps of
``LINK_STEP_S`` up to ``LINK_STEP_S * LINK_STEPS_LINEAR``, then in steps of
``LINK_STEP_RATIO``), so that a live server's link estimates, which wander from robot to
robot, make a few classes and a small program; what robots that ask ahead hold is taken
per class in steps of ``KEPT_STEP_RATIO``, and the latencies of the batch sizes the
program weighs (:func:`~armory.scheduling.batch_sizes.candidate_sizes`) in steps of
``TABLE_STEP`` (relative); weights relative to the heaviest robot's. The memo is keyed
by exactly those inputs, so it returns what solving again would, and
:func:`fluid_mix_unless_fed` skips the solve where the program's own constraints show
that the optimum serves every robot in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from armory.scheduling.batch_sizes import candidate_sizes
from armory.scheduling.fluid import FluidSolution, solve_fluid
from armory.scheduling.snapshot import Snapshot

MIX_SHARE = 0.05
"""A batch size the fluid optimum runs for less than this share of its batches is unused."""

LINK_STEP_S = 0.005
"""Round-trip links are classed in steps of this many seconds ..."""
LINK_STEPS_LINEAR = 8
"""... up to this many steps (40 ms) ..."""
LINK_STEP_RATIO = 1.25
"""... and beyond it in steps of this ratio (25%)."""

LINK_GAP_S = 0.04
"""Robots of one type whose round trips differ by more than this ..."""
LINK_GAP_RATIO = 0.5
"""... and by more than this share of the shorter form groups of their own."""

KEPT_STEP_RATIO = 1.25
"""What a chunk adds to a robot that asks ahead is taken in steps of this ratio."""

TABLE_STEP = 0.005
"""The latency table is taken in relative steps of this size (on a log scale)."""

GPU_COST = 1e-3
"""Weight of a GPU second against an action of the lightest robot in the fluid program:
small, so that the optimum serves every robot it can and then saves GPU time
(placement's load too)."""

EVENNESS = 1e-3
"""Among optima alike in weighted motion, the program prefers the one whose least served
robot is served the most: raising the least share by one is worth this share of the
fleet's weighted demand."""

IN_FULL_TOLERANCE = 1e-3
"""A robot the optimum serves no more than this share of its ticks short of all its round
trip allows counts as served in full: not held, and no over-capacity rule for it. (Past
16 the program weighs a geometric subset of batch sizes, and its optimum may fall short
of full by a few parts in ten thousand where every size would feed the fleet.)"""

FED_SLACK = 1.0 - 1e-6
"""The one-size test (:func:`fluid_mix_unless_fed`) leaves this much of the GPU to the
program's numerical tolerance."""

LIGHTEST_WEIGHT = 1e-6
"""The program weighs robots relative to the heaviest (weights are relative, and the
program's numbers stay the same at any scale of them), a robot lighter than this share
of the heaviest as this share."""

_MEMO_SIZE = 256


@dataclass(frozen=True)
class FluidMix:
    """A fleet's fluid optimum (weighted, at the least GPU time)."""

    sizes: np.ndarray
    """Batch sizes the optimum uses, under either tick charge (possibly none)."""
    share: np.ndarray
    """Per robot of the snapshot: the share of its ticks the optimum serves (0..1)."""
    held: np.ndarray
    """Per robot of the snapshot: the optimum serves it less than its round trip allows
    (the GPU, not its links and forward pass, is what it waits for)."""
    phase_share: np.ndarray
    """Per robot of the snapshot: the share of its ticks the optimum serves when each
    chunk pays the ticks its round trip holds on average over the tick phase (``f l``,
    not the fewest, ``floor(f l)``): what a robot that sends when its queue reaches a
    given point, not at a tick a batch was planned for, can count on (0..1)."""

    @property
    def fits(self) -> bool:
        """The GPU keeps up: the optimum serves every robot as much as its own round trip
        allows (each chunk charged the fewest ticks its latency can hold)."""
        return not self.held.any()


def fluid_mix(s: Snapshot) -> FluidMix:
    """The fluid optimum of ``s``'s robots, latency table and links."""
    key, inverse = _program(s)
    return _mix(key, inverse)


def fluid_mix_unless_fed(s: Snapshot) -> FluidMix | None:
    """:func:`fluid_mix`, or None where the optimum surely serves every robot in full:
    back-to-back batches of some one size feed every robot of the program (its classes,
    links, latencies and what they hold), so the optimum is known without solving it.
    A fleet that needs batch sizes mixed, or holds a robot its round trip alone keeps
    from being served in full, is left to the program."""
    key, inverse = _program(s)
    return None if _one_size_feeds_all(key) else _mix(key, inverse)


_Key = tuple[
    tuple[tuple[float, ...], ...],
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    tuple[int | None, ...] | None,
]
"""The fluid program of a snapshot as the memo keys it: robot classes (rate, horizon,
link step, weight), their counts, the batch sizes weighed, their latencies in steps of
``TABLE_STEP`` and what each class's chunk adds in steps of ``KEPT_STEP_RATIO``."""


def _program(s: Snapshot) -> tuple[_Key, np.ndarray]:
    """The program of ``s`` (:data:`_Key`) and each robot's class."""
    steps = link_steps(_group_round_trips(s))
    weight = np.maximum(s.relative_weight(), LIGHTEST_WEIGHT)
    keys = np.stack([s.control_hz, s.max_execution_horizon, steps, weight], axis=1)
    classes, counts, inverse = _classes(np.round(keys, 6).tobytes())
    # The program weighs the batch sizes the scheduler plans with: past 16 a geometric
    # subset, which keeps it small for a large max batch (a tenth of the time at 64), and
    # keys the memo by their latencies only.
    batch_sizes = candidate_sizes(s.latency_table_s.size - 1)
    table = np.log(s.latency_table_s[batch_sizes]) / np.log1p(TABLE_STEP)
    key = (
        classes,
        counts,
        tuple(batch_sizes.tolist()),
        tuple(np.round(table).astype(np.int64).tolist()),
        _kept_steps(s.asks_ahead, np.array([c[1] for c in classes]), counts, inverse),
    )
    return key, inverse


def _mix(key: _Key, inverse: np.ndarray) -> FluidMix:
    """The optimum of the program ``key``, robot by robot (``inverse``: their classes)."""
    sizes, share, held, phase_share = _solve(key)
    return FluidMix(
        sizes=np.array(sizes, dtype=np.int64),
        share=np.array(share)[inverse],
        held=np.array(held)[inverse],
        phase_share=np.array(phase_share)[inverse],
    )


def _group_round_trips(s: Snapshot) -> np.ndarray:
    """Per robot, the mean round-trip link of its group: robots of one type (rate,
    horizon, weight) whose round trips, in order, leave no gap wider than
    ``LINK_GAP_S`` or ``LINK_GAP_RATIO`` of the shorter. A live server's link estimates
    wander robot by robot; grouped so, a fleet's classes (and the program's memo) hold
    still while far robots stay apart from near ones."""
    round_trip_s = 2.0 * s.downlink_s
    if round_trip_s.size < 2:
        return round_trip_s
    order = np.lexsort((round_trip_s, s.weight, s.max_execution_horizon, s.control_hz))
    ordered = round_trip_s[order]
    gap = np.diff(ordered) > np.maximum(LINK_GAP_S, LINK_GAP_RATIO * ordered[:-1])
    for column in (s.control_hz, s.max_execution_horizon, s.weight):
        gap |= np.diff(column[order]) != 0
    starts = np.concatenate(([True], gap))
    group = np.cumsum(starts) - 1
    mean = np.bincount(group, weights=ordered) / np.bincount(group)
    grouped = np.empty_like(round_trip_s)
    grouped[order] = mean[group]
    return grouped


def _kept_steps(
    asks_ahead: np.ndarray | None,
    horizon: np.ndarray,
    counts: tuple[int, ...],
    inverse: np.ndarray,
) -> tuple[int | None, ...] | None:
    """Per class: the actions a chunk adds past what its robots hold on average when they
    ask (``E - h``, at least one), in steps of ``KEPT_STEP_RATIO``, or None for a class
    that asks less than a step ahead; None when no class asks ahead. A class's robots ask
    alike, and coarse steps keep the memo's keys few."""
    if asks_ahead is None or not asks_ahead.any():
        return None
    held = np.bincount(inverse, weights=asks_ahead, minlength=len(counts)) / np.array(counts)
    kept = np.maximum(horizon - held, 1.0)
    steps = np.round(np.log(kept) / np.log(KEPT_STEP_RATIO)).astype(np.int64)
    asks = KEPT_STEP_RATIO**steps < horizon
    if not asks.any():
        return None
    return tuple(int(k) if a else None for k, a in zip(steps, asks, strict=True))


def link_steps(round_trip_s: np.ndarray) -> np.ndarray:
    """The class step of each round trip (a whole number, as a float)."""
    linear = round_trip_s / LINK_STEP_S
    beyond = LINK_STEPS_LINEAR + np.log(np.maximum(linear, 1.0) / LINK_STEPS_LINEAR) / np.log(
        LINK_STEP_RATIO
    )
    return np.round(np.where(linear <= LINK_STEPS_LINEAR, linear, beyond))


def link_of_step(step: np.ndarray) -> np.ndarray:
    """The round trip a class step stands for (inverse of :func:`link_steps`)."""
    linear = LINK_STEPS_LINEAR * LINK_STEP_RATIO ** (step - LINK_STEPS_LINEAR)
    return LINK_STEP_S * np.where(step <= LINK_STEPS_LINEAR, step, linear)


@lru_cache(maxsize=_MEMO_SIZE)
def _classes(
    keys: bytes,
) -> tuple[tuple[tuple[float, ...], ...], tuple[int, ...], np.ndarray]:
    """Robots alike in (rate, horizon, link steps, weight), from the four columns' bytes:
    the classes, their counts, and each robot's class."""
    rows = np.frombuffer(keys, dtype=np.float64).reshape(-1, 4)
    # Rows in order, first column first (np.unique(axis=0)'s order, at a tenth of its
    # time for a thousand robots: it sorts the rows as records).
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    starts = np.concatenate(([True], np.any(ordered[1:] != ordered[:-1], axis=1)))
    class_of_ordered = np.cumsum(starts) - 1
    inverse = np.empty(rows.shape[0], dtype=np.int64)
    inverse[order] = class_of_ordered
    inverse.flags.writeable = False
    counts = np.bincount(class_of_ordered)
    return tuple(map(tuple, ordered[starts].tolist())), tuple(counts.tolist()), inverse


@dataclass(frozen=True)
class _Arrays:
    """A program's key (:data:`_Key`) as the arrays the program is built from, one entry
    per class (``latency_s`` and ``batch_sizes``: per size weighed)."""

    control_hz: np.ndarray
    horizon: np.ndarray
    weight: np.ndarray
    count: np.ndarray
    delay_s: np.ndarray
    """The class's round-trip link (its step's)."""
    asks_ahead: np.ndarray | None
    """What the class's robots hold when they ask (None where no class asks ahead)."""
    latency_s: np.ndarray
    batch_sizes: np.ndarray

    @classmethod
    def of(cls, key: _Key) -> _Arrays:
        classes, counts, sizes, table_steps, kept_steps = key
        rows = np.array(classes, dtype=np.float64)
        horizon = rows[:, 1]
        asks_ahead = None
        if kept_steps is not None:
            pairs = zip(kept_steps, horizon, strict=True)
            kept = [e if k is None else KEPT_STEP_RATIO**k for k, e in pairs]
            asks_ahead = np.maximum(horizon - np.array(kept), 0.0)
        return cls(
            control_hz=rows[:, 0],
            horizon=horizon,
            weight=rows[:, 3],
            count=np.array(counts, dtype=np.float64),
            delay_s=link_of_step(rows[:, 2]),
            asks_ahead=asks_ahead,
            latency_s=np.power(1.0 + TABLE_STEP, np.array(table_steps, dtype=np.float64)),
            batch_sizes=np.array(sizes, dtype=np.int64),
        )


@lru_cache(maxsize=_MEMO_SIZE)
def _one_size_feeds_all(key: _Key) -> bool:
    """Whether back-to-back batches of some one size weighed feed every robot of the
    program ``key`` in full, by the program's own constraints: a robot of rate ``f`` needs
    ``f / k`` chunks a second of ``k = min(E - floor(f l), E - h)`` actions each (``l``
    its batch's latency and round trip; ``h`` what it holds when it asks), one per batch
    at most, and the batches' robots fit them. Then the optimum serves everyone in full,
    provided an action of the lightest robot is worth more than the GPU time of two
    batches of the longest pass (what an action can cost at the margin): serving less
    would save less than it loses."""
    p = _Arrays.of(key)
    if not 2.0 * GPU_COST * p.latency_s.max() < 1.0:
        return False
    window_s = p.latency_s[:, None] + p.delay_s[None, :]
    kept = p.horizon - np.floor(p.control_hz * window_s + 1e-9)
    if p.asks_ahead is not None:
        kept = np.minimum(kept, np.maximum(p.horizon - p.asks_ahead, 1.0))
    chunks_per_s = p.control_hz / np.maximum(kept, 1.0)
    per_batch = np.all((kept >= 1.0) & (chunks_per_s * p.latency_s[:, None] <= FED_SLACK), axis=1)
    fed = chunks_per_s @ p.count * p.latency_s <= FED_SLACK * p.batch_sizes
    return bool(np.any(per_batch & fed))


@lru_cache(maxsize=_MEMO_SIZE)
def _solve(
    key: _Key,
) -> tuple[tuple[int, ...], tuple[float, ...], tuple[bool, ...], tuple[float, ...]]:
    """The fluid optimum of the program ``key``: the sizes it uses and each class's
    share, held and share at the phase-averaged tick charge (:class:`FluidMix`)."""
    p = _Arrays.of(key)
    solutions = [
        solve_fluid(
            p.control_hz,
            p.horizon,
            p.delay_s,
            p.latency_s,
            weight=p.weight,
            count=p.count,
            gpu_cost=GPU_COST,
            expected_ticks=expected,
            evenness=EVENNESS,
            asks_ahead=p.asks_ahead,
            batch_sizes=p.batch_sizes,
        )
        for expected in (False, True)
    ]
    # Sizes: those the optimum uses when each chunk pays the fewest ticks its window
    # can hold, and those it uses when it pays the ticks expected at a random phase
    # (more, so smaller batches can win).
    used = p.batch_sizes[np.union1d(*(_used(solution) for solution in solutions))]
    share, phase_share = (
        np.clip(solution.actions_per_s / p.control_hz, 0.0, 1.0) for solution in solutions
    )
    # latency_s[0] is a batch of one (every candidate list starts there).
    allowed = round_trip_share(p.control_hz, p.horizon, p.delay_s + p.latency_s[0])
    held = share < allowed - IN_FULL_TOLERANCE
    return (
        tuple(int(b) for b in used),
        tuple(float(x) for x in share),
        tuple(held.tolist()),
        tuple(float(x) for x in phase_share),
    )


def round_trip_share(
    control_hz: np.ndarray, max_execution_horizon: np.ndarray, round_trip_s: np.ndarray
) -> np.ndarray:
    """The most of its ticks a robot can be served with the GPU all its own (alone in
    batches of one), in the fluid program: all of them while a chunk outlasts the
    ``m = floor(f l)`` ticks its round trip holds; else only chunks from observations
    taken once dry are worth anything, and each is played for ``E`` ticks and then
    waited for ``m``, ``E / (E + m)``."""
    held_ticks = np.floor(control_hz * round_trip_s + 1e-9)
    return np.where(
        max_execution_horizon > held_ticks,
        1.0,
        max_execution_horizon / (max_execution_horizon + held_ticks),
    )


def _used(solution: FluidSolution) -> np.ndarray:
    """Columns of the batch sizes the fluid optimum runs for at least ``MIX_SHARE`` of its
    batches."""
    batches = solution.batches_per_s
    return np.flatnonzero(batches > MIX_SHARE * max(batches.sum(), 1e-12))
