"""Candidate batches made of an urgency prefix of each tier, most promising first.

A tier is a list of robots in urgency order, each robot named by its global
urgency rank (0 = the most urgent eligible robot of the fleet). A candidate takes
the first ``p_t`` robots of every tier ``t``; it is written as the vector of
prefix lengths ``p``.

Candidates come in order of increasing size and, within a size, of increasing
rank sum (most urgent first), so that a caller who can afford to score only
``limit`` of them keeps the most promising ones.

Within a size the order is exact: a best-first search starts from the size's
most urgent candidate (the global earliest-deadline prefix) and moves by swaps
(drop the last robot of one tier, add the next robot of another). The rank sum
is a sum of convex functions of the ``p_t``, so every candidate is reached from
the best one by swaps that never lower the sum, and a heap pops candidates in
rank-sum order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

_NO_RANK = np.iinfo(np.int64).max // 4
"""Rank of a position past the end of a tier (never taken)."""


def prefix_candidates(tier_ranks: Sequence[np.ndarray], max_size: int, limit: int) -> np.ndarray:
    """Prefix lengths (one row per candidate, one column per tier) of at most ``limit``
    candidates of size ``1..max_size``, in order of size, then rank sum."""
    num_tiers = len(tier_ranks)
    lengths = np.array([min(len(r), max_size) for r in tier_ranks], dtype=np.int64)
    total = int(lengths.sum())
    if total == 0 or limit < 1:
        return np.zeros((0, num_tiers), dtype=np.int64)
    top = min(max_size, total, limit) if num_tiers == 1 else min(max_size, total)
    if num_tiers == 1:
        return np.arange(1, top + 1, dtype=np.int64).reshape(-1, 1)

    ranks = np.full((num_tiers, int(lengths.max()) + 1), _NO_RANK, dtype=np.int64)
    for t, tier in enumerate(tier_ranks):
        ranks[t, : lengths[t]] = tier[: lengths[t]]
    member_tier = np.repeat(np.arange(num_tiers), lengths)
    member_rank = ranks[ranks < _NO_RANK]
    merged_tier = member_tier[np.argsort(member_rank, kind="stable")]

    found = [_singletons(ranks, lengths, limit)]
    num_found = len(found[0])
    for size in range(2, top + 1):
        if num_found >= limit:
            break
        start = np.bincount(merged_tier[:size], minlength=num_tiers)
        found.append(_cheapest_of_size(ranks, lengths, start, limit - num_found))
        num_found += len(found[-1])
    return np.concatenate(found)[:limit]


def _singletons(ranks: np.ndarray, lengths: np.ndarray, limit: int) -> np.ndarray:
    """Candidates of size 1: each non-empty tier's head, most urgent first."""
    tiers = np.flatnonzero(lengths > 0)
    tiers = tiers[np.argsort(ranks[tiers, 0], kind="stable")][:limit]
    out = np.zeros((tiers.size, lengths.size), dtype=np.int64)
    out[np.arange(tiers.size), tiers] = 1
    return out


def _cheapest_of_size(
    ranks: np.ndarray, lengths: np.ndarray, start: np.ndarray, limit: int
) -> np.ndarray:
    """The ``limit`` candidates of ``start``'s size with the smallest rank sums, in order."""
    num_tiers = lengths.size
    tiers = np.arange(num_tiers)
    start_cost = int(ranks[_prefix_mask(ranks, start)].sum())
    heap: list[tuple[int, tuple[int, ...]]] = [(start_cost, tuple(start.tolist()))]
    seen = {heap[0][1]}
    out: list[tuple[int, ...]] = []
    while heap and len(out) < limit:
        cost, state = heapq.heappop(heap)
        out.append(state)
        # Push the ``limit`` cheapest swaps: at most ``len(out)`` of them are popped already,
        # so the heap holds ``limit - len(out)`` candidates no costlier swap could beat.
        prefix = np.array(state, dtype=np.int64)
        out_rank = np.where(prefix > 0, ranks[tiers, np.maximum(prefix - 1, 0)], _NO_RANK)
        in_rank = np.where(prefix < lengths, ranks[tiers, np.minimum(prefix, lengths)], _NO_RANK)
        donors = np.flatnonzero(prefix > 0)
        takers = np.flatnonzero(prefix < lengths)
        delta = in_rank[takers][None, :] - out_rank[donors][:, None]
        delta[donors[:, None] == takers[None, :]] = _NO_RANK
        flat = delta.ravel()
        valid = np.flatnonzero(flat < _NO_RANK // 2)
        if valid.size > limit:
            valid = valid[np.argpartition(flat[valid], limit - 1)[:limit]]
        valid = valid[np.lexsort((valid, flat[valid]))]
        for k in valid.tolist():
            donor, taker = divmod(k, takers.size)
            swapped = list(state)
            swapped[donors[donor]] -= 1
            swapped[takers[taker]] += 1
            key = tuple(swapped)
            if key not in seen:
                seen.add(key)
                heapq.heappush(heap, (cost + int(flat[k]), key))
    return np.array(out, dtype=np.int64).reshape(-1, num_tiers)


def _prefix_mask(ranks: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Boolean mask over ``ranks`` of the first ``prefix[t]`` positions of each tier."""
    return np.arange(ranks.shape[1])[None, :] < prefix[:, None]
