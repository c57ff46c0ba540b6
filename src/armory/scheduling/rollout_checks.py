"""Checks of a rule's batch by rollouts (:mod:`armory.scheduling.rollout`).

A greedy rule sees one batch; what it costs shows up batches later. Both checks
play the fleet forward from the rule's batch and from alternatives, and keep the
rule's batch unless an alternative clearly starves the fleet less:

- :func:`best_first_batch`, over capacity: the first batch, among deadline and
  worth prefixes of every size, that starves the fleet least under its best
  continuation;
- :func:`best_cadence`, over capacity: back-to-back batches of one size, earliest
  deadline first, played longer, when they starve the fleet less;
- :func:`steady_cadence`, on a fleet that fits: back-to-back batches of one size
  that starve nobody, when the rule's size would starve somebody.

docs/scheduling.md gives the reasoning and the measured results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from armory.scheduling.ordering import earliest_deadline_order, worth_order
from armory.scheduling.rollout import Continuation, FleetModel
from armory.scheduling.snapshot import Batch, Snapshot

_ANY = 1e-9
"""A rollout limit that stops a play at its first starved tick."""


def best_first_batch(
    s: Snapshot,
    batch: Batch,
    *,
    horizon_s: float,
    margin: float,
    sizes_used: tuple[int, ...],
) -> Batch:
    """``batch``, unless a rollout finds a first batch that starves the fleet less.

    Each candidate first batch (for every size, the robots first by deadline, or
    first by the weighted actions a chunk adds) is played forward ``horizon_s`` with
    a continuation that keeps that order and size (or, worth first, picks among
    ``sizes_used`` as the overload rule does). ``batch`` is judged by its best
    continuation of all of these; a candidate replaces it only if it starves at
    least ``margin`` weighted ticks less.
    """
    rows = np.flatnonzero(s.eligible)
    by_deadline = earliest_deadline_order(s)
    by_worth, _ = worth_order(s, rows)
    candidates: list[tuple[tuple[int, ...], Continuation]] = []
    for size in range(1, min(s.max_batch_size, rows.size) + 1):
        deadline_first = tuple(by_deadline[:size].tolist())
        worth_first = tuple(by_worth[:size].tolist())
        candidates.append((deadline_first, Continuation("deadline", size)))
        candidates.append((worth_first, Continuation("worth", size)))
        candidates.append((worth_first, Continuation("worth", sizes=sizes_used)))
    judged_by = [plan for _, plan in candidates]
    return _least_starving(s, batch, judged_by, candidates, horizon_s, margin)


def steady_cadence(s: Snapshot, batch: Batch, *, horizon_s: float) -> Batch:
    """``batch``, unless back-to-back batches of its size (earliest deadline first)
    starve a robot within ``horizon_s`` while back-to-back batches of another size do
    not; then the first batch of the smallest such size.

    For a fleet that fits: a rule that judges a plan by one round of the fleet can,
    near capacity, pick small batches that are on time for that round yet cost more
    GPU per chunk than the fleet can sustain, so each round ends a little later
    until a robot runs dry; a steady cadence of larger batches keeps everyone fed.
    """
    model = FleetModel(s)
    chosen = _rows(s, batch)
    # A play stops at its first starved tick: only zero or not matters here.
    if model.starved(chosen, Continuation("deadline", len(chosen)), horizon_s, _ANY) == 0:
        return batch
    by_deadline = earliest_deadline_order(s)
    for size in range(1, min(s.max_batch_size, by_deadline.size) + 1):
        first = tuple(by_deadline[:size].tolist())
        if first == chosen:
            continue
        if model.starved(first, Continuation("deadline", size), horizon_s, _ANY) == 0:
            return Batch(tuple(s.robot_id[list(first)].tolist()))
    return batch


def best_cadence(
    s: Snapshot,
    batch: Batch,
    *,
    horizon_s: float,
    margin: float,
    sizes_used: tuple[int, ...],
) -> Batch:
    """``batch``, unless back-to-back batches of one size (earliest deadline first)
    starve the fleet at least ``margin`` weighted ticks less within ``horizon_s``;
    then the first batch of the size that starves it least.

    For a fleet over capacity: ``batch`` is judged by its best continuation of three,
    the overload rule's choice among ``sizes_used`` and its own size by worth or by
    deadline. A greedy choice, even one checked by short rollouts, can drift from
    one batch size to another and feed robots in an order no steady cadence would;
    over a longer horizon a plain cadence can be worth more.
    """
    judged_by = [
        Continuation("deadline", len(batch.robot_ids)),
        Continuation("worth", len(batch.robot_ids)),
        Continuation("worth", sizes=sizes_used),
    ]
    by_deadline = earliest_deadline_order(s)
    candidates = [
        (tuple(by_deadline[:size].tolist()), Continuation("deadline", size))
        for size in range(1, min(s.max_batch_size, by_deadline.size) + 1)
    ]
    return _least_starving(s, batch, judged_by, candidates, horizon_s, margin)


def _least_starving(
    s: Snapshot,
    batch: Batch,
    judged_by: Sequence[Continuation],
    candidates: Sequence[tuple[tuple[int, ...], Continuation]],
    horizon_s: float,
    margin: float,
) -> Batch:
    """``batch``, unless a candidate (a first batch, as rows, and its continuation)
    starves the fleet at least ``margin`` weighted ticks less within ``horizon_s`` than
    ``batch`` under its best continuation in ``judged_by``; then the candidate that
    starves it least."""
    model = FleetModel(s)
    chosen = _rows(s, batch)
    # Each play's count, and whether it is the full count (a play stops once it can
    # no longer matter).
    played: dict[tuple[tuple[int, ...], Continuation], tuple[float, bool]] = {}

    def starved(first: tuple[int, ...], plan: Continuation, limit: float) -> float:
        known = played.get((first, plan))
        if known is not None and (known[1] or known[0] >= limit):
            return known[0]
        count = model.starved(first, plan, horizon_s, limit)
        played[(first, plan)] = (count, count < limit)
        return count

    kept = math.inf
    for plan in judged_by:
        kept = min(kept, starved(chosen, plan, kept))
    best_first, least = None, kept - margin
    for first, plan in candidates:
        cost = starved(first, plan, least - 1e-9)
        if cost < least - 1e-9:
            best_first, least = first, cost
    if best_first is None:
        return batch
    return Batch(tuple(s.robot_id[list(best_first)].tolist()))


def _rows(s: Snapshot, batch: Batch) -> tuple[int, ...]:
    """The snapshot rows of ``batch``'s robots."""
    row_of = {robot: row for row, robot in enumerate(s.robot_id.tolist())}
    return tuple(row_of[robot] for robot in batch.robot_ids)
