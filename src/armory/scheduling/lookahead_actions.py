"""lookahead-actions: the Armory paper's method. Serve the batch that buys the most
weighted robot motion per GPU second over a short horizon.

Candidates. Eligible robots, earliest deadline first (ties: first contact), are
grouped into tiers of equal weight. Every batch made of an earliest-deadline
prefix of each tier, of total size ``1..max_batch_size``, is a candidate (see
``tier_prefixes``); a heavy robot can thus be served without the lighter robots
that are more urgent than it.

Scoring. Over the horizon ``[now, now + H]`` (``lookahead_horizon_s``) each robot
executes motion: seconds of non-starved playback. A robot that gets no chunk
moves until its deadline: ``max(0, min(deadline, now + H) - now)``. A robot in a
batch of ``b`` that starts at ``start`` gets its chunk at
``T = start + latency(b) + downlink``; it moves until ``min(deadline, T)`` on its
old queue, then from ``T`` until ``new_dry = Snapshot.dry_after_landing_s(T)``,
both clipped to the horizon (nothing counts when ``T`` is past it). Its gain is
that motion minus the motion it makes with no chunk. A plan's score is the
weighted gain of all its robots divided by the GPU seconds of the plan:

    score = sum_i weight_i * gain_i / sum_k latency(b_k)

This ranks plans as the fleet's total weighted motion over the horizon would,
less the motion the fleet makes anyway: that part does not depend on the plan,
and dividing it by the GPU time would reward the smallest batch however large
the fleet. The best plan is committed (ties: larger first batch, then the more
urgent one); only its first batch is returned.

Depth. With ``lookahead_depth`` d > 1 a plan is d batches back to back: after a
batch, the following one starts when its forward pass ends and is chosen from the
robots not yet in the plan (their deadlines are what their chunks make them; a
robot lands at most once per plan, so its gain is counted once). Plans are
enumerated depth-first, candidates in order of size then urgency, until
``lookahead_node_budget`` complete plans have been scored; at depth 1 the budget
bounds the candidates scored.

Cost. Per-robot gains for every batch size come from one vector computation per
distinct batch start; a candidate's gain is then a sum of per-tier cumulative
gains. With one tier, depth 1 and a max batch of 32 a decision over 1,000
robots takes well under a millisecond.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from armory.scheduling.base import Scheduler
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.ordering import earliest_deadline_order
from armory.scheduling.snapshot import Batch, Snapshot
from armory.scheduling.tier_prefixes import prefix_candidates

_SCORE_DECIMALS = 9
"""Scores equal to this many decimals tie."""


class LookaheadActionsScheduler(Scheduler):
    """Commit the first batch of the plan that buys the most weighted motion per GPU second."""

    name = "lookahead-actions"

    def __init__(self, *, horizon_s: float = 1.0, depth: int = 1, node_budget: int = 64) -> None:
        self._horizon_s = horizon_s
        self._depth = depth
        self._node_budget = node_budget
        self.num_plans_scored = 0
        """Plans scored by the last decision (for tests and diagnostics)."""

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> LookaheadActionsScheduler:
        """A scheduler with the config's lookahead options."""
        return cls(
            horizon_s=config.lookahead_horizon_s,
            depth=config.lookahead_depth,
            node_budget=config.lookahead_node_budget,
        )

    def schedule(self, snapshot: Snapshot) -> Batch:
        """Called when the executor is free: search plans, return the best one's first batch."""
        order = earliest_deadline_order(snapshot)
        if order.size == 0:
            self.num_plans_scored = 0
            return Batch((), rule=self.name)
        search = _PlanSearch(snapshot, order, self._horizon_s, self._depth, self._node_budget)
        rows = search.run()
        self.num_plans_scored = search.num_plans_scored
        return Batch(tuple(snapshot.robot_id[rows].tolist()), rule=self.name)


class _PlanSearch:
    """One decision's depth-first search over plans (state lives only as long as the decision)."""

    def __init__(
        self, snapshot: Snapshot, order: np.ndarray, horizon_s: float, depth: int, budget: int
    ) -> None:
        self._snapshot = snapshot
        self._horizon_end_s = snapshot.now_s + horizon_s
        self._depth = depth
        self._budget_left = budget
        self.num_plans_scored = 0

        # Tiers: equal weights, heaviest first; members as global EDF ranks, capped at the
        # most robots a tier can give to one plan.
        weight = snapshot.weight[order]
        _, tier_of_rank = np.unique(-weight, return_inverse=True)
        ranks = np.argsort(tier_of_rank, kind="stable")
        bounds = np.cumsum(np.bincount(tier_of_rank))
        cap = depth * snapshot.max_batch_size
        self._tier_ranks = [tier[:cap] for tier in np.split(ranks, bounds[:-1])]
        self._num_tiers = len(self._tier_ranks)

        # Flat layout: each tier is one slot for "nothing taken" then its members, so that
        # column offset_t + k of a cumulative table covers the tier's first k robots.
        lengths = np.array([tier.size for tier in self._tier_ranks])
        self._offsets = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
        member_ranks = np.concatenate(self._tier_ranks)
        self._member_rows = order[member_ranks]
        self._members = _select_robots(snapshot, self._member_rows)
        self._member_columns = np.delete(np.arange(lengths.sum() + self._num_tiers), self._offsets)
        self._cumulative_ranks = self._cumulative(member_ranks.astype(np.float64)[None, :])[0]
        self._gain_tables: dict[float, np.ndarray] = {}

        self._best_key: tuple[float, int, float] | None = None
        self._best_first: np.ndarray | None = None

    def run(self) -> np.ndarray:
        """Snapshot rows of the best plan's first batch."""
        zero = np.zeros(self._num_tiers, dtype=np.int64)
        self._expand(used=zero, gpu_s=0.0, gain=0.0, level=1, first=None)
        assert self._best_first is not None
        return self._rows(zero, self._best_first)

    # ---- search --------------------------------------------------------

    def _expand(
        self, used: np.ndarray, gpu_s: float, gain: float, level: int, first: np.ndarray | None
    ) -> None:
        """Score (or recurse into) the candidates for batch ``level`` of a plan."""
        remaining = [tier[u:] for tier, u in zip(self._tier_ranks, used.tolist(), strict=True)]
        prefixes = prefix_candidates(remaining, self._snapshot.max_batch_size, self._budget_left)
        if prefixes.shape[0] == 0:  # nobody left: the plan so far is complete
            assert first is not None
            self._score_leaves(np.array([gain / gpu_s]), first[None, :])
            return
        sizes = prefixes.sum(axis=1)
        gains = gain + self._batch_gains(used, prefixes, sizes, gpu_s)
        gpus_s = gpu_s + self._snapshot.latency_table_s[sizes]
        firsts = prefixes if first is None else np.broadcast_to(first, prefixes.shape)
        if level == self._depth:
            self._score_leaves(gains / gpus_s, firsts)
            return
        for i in range(prefixes.shape[0]):
            if self._budget_left == 0:
                return
            self._expand(
                used + prefixes[i], float(gpus_s[i]), float(gains[i]), level + 1, firsts[i]
            )

    def _score_leaves(self, scores: np.ndarray, firsts: np.ndarray) -> None:
        """Count complete plans and keep the best (score, then first batch size, then urgency)."""
        self._budget_left -= scores.size
        self.num_plans_scored += scores.size
        rounded = np.round(scores, _SCORE_DECIMALS)
        sizes = firsts.sum(axis=1)
        rank_sums = self._cumulative_ranks[self._offsets + firsts].sum(axis=1)
        best = np.lexsort((rank_sums, -sizes, -rounded))[0]
        key = (float(rounded[best]), int(sizes[best]), -float(rank_sums[best]))
        if self._best_key is None or key > self._best_key:
            self._best_key = key
            self._best_first = firsts[best].copy()

    # ---- scoring -------------------------------------------------------

    def _batch_gains(
        self, used: np.ndarray, prefixes: np.ndarray, sizes: np.ndarray, gpu_s: float
    ) -> np.ndarray:
        """Weighted gain of each candidate batch starting ``gpu_s`` after now."""
        table = self._gain_table(gpu_s)
        low = self._offsets + used
        high = low + prefixes
        return table[sizes[:, None], high].sum(axis=1) - table[sizes][:, low].sum(axis=1)

    def _gain_table(self, gpu_s: float) -> np.ndarray:
        """Cumulative weighted gains per tier, row = batch size, for a batch starting at
        ``now + gpu_s``."""
        table = self._gain_tables.get(gpu_s)
        if table is None:
            table = self._cumulative(self._robot_gains(self._snapshot.now_s + gpu_s))
            self._gain_tables[gpu_s] = table
        return table

    def _robot_gains(self, start_s: float) -> np.ndarray:
        """Weighted gain of each member, row = size of its batch, for a batch starting at
        ``start_s``."""
        members, now_s, end_s = self._members, self._snapshot.now_s, self._horizon_end_s
        land_s = start_s + self._snapshot.latency_table_s[:, None] + members.downlink_s[None, :]
        idle_s = np.maximum(0.0, np.minimum(members.deadline_s, end_s) - now_s)
        before_s = np.maximum(
            0.0, np.minimum(np.minimum(members.deadline_s, land_s), end_s) - now_s
        )
        new_dry_s = members.dry_after_landing_s(land_s)
        after_s = np.maximum(0.0, np.minimum(end_s, new_dry_s) - np.maximum(land_s, now_s))
        return members.weight * (before_s + after_s - idle_s)

    def _cumulative(self, per_member: np.ndarray) -> np.ndarray:
        """Per-tier running sums of a (rows, members) table in the flat layout."""
        flat = np.zeros((per_member.shape[0], self._member_columns.size + self._num_tiers))
        flat[:, self._member_columns] = per_member
        running = np.cumsum(flat, axis=1)
        lengths = np.diff(np.append(self._offsets, flat.shape[1]))
        return running - np.repeat(running[:, self._offsets], lengths, axis=1)

    def _rows(self, used: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """Snapshot rows of the batch that takes ``prefix`` robots after ``used`` per tier."""
        tier_starts = self._offsets - np.arange(self._num_tiers)  # first member of each tier
        members = [
            np.arange(s + u, s + u + p)
            for s, u, p in zip(tier_starts.tolist(), used.tolist(), prefix.tolist(), strict=True)
        ]
        return self._member_rows[np.concatenate(members)]


def _select_robots(snapshot: Snapshot, rows: np.ndarray) -> Snapshot:
    """The snapshot restricted to ``rows`` (every per-robot array sliced)."""
    per_robot = {
        field.name: value[rows]
        for field in dataclasses.fields(snapshot)
        if field.name != "latency_table_s"
        and isinstance(value := getattr(snapshot, field.name), np.ndarray)
        and value.shape[:1] == (snapshot.num_robots,)
    }
    return dataclasses.replace(snapshot, **per_robot)
