"""lookahead-actions: the most weighted motion per GPU second over the horizon."""

from __future__ import annotations

import itertools

import numpy as np
from factories import make_snapshot

from armory.scheduling.lookahead_actions import LookaheadActionsScheduler
from armory.scheduling.tier_prefixes import prefix_candidates

# Defaults: observations taken now (t = 0), 0.5 s chunks, l40s-pi05 latencies
# (1 -> 0.070 s, 2 -> 0.135 s, 4 -> 0.250 s), 5 ms downlink, 1 s horizon.


def test_serves_the_robot_about_to_starve_alone() -> None:
    """One robot runs dry at 0.05 s, three at 0.45 s: it serves the first and pads no one."""
    snapshot = make_snapshot([0.45, 0.45, 0.05, 0.45], contact_order=[0, 1, 3, 2])
    assert LookaheadActionsScheduler().schedule(snapshot).robot_ids == (2,)


def test_batches_everyone_when_all_are_starving() -> None:
    """Four robots dry at 0.02 s each gain 0.48 s however late: the full batch wins."""
    snapshot = make_snapshot([0.02] * 4)
    assert sorted(LookaheadActionsScheduler().schedule(snapshot).robot_ids) == [0, 1, 2, 3]


def test_heavy_robot_wins_over_an_equally_urgent_light_one() -> None:
    """Same deadline, weights 1 and 2, room for one: the heavy robot (later contact) goes."""
    snapshot = make_snapshot([0.05, 0.05], weight=[1.0, 2.0], max_batch_size=1)
    assert LookaheadActionsScheduler().schedule(snapshot).robot_ids == (1,)


def test_heavy_tier_is_served_past_a_more_urgent_light_robot() -> None:
    """A weight-3 robot due at 0.03 s beats a weight-1 robot due at 0.01 s (EDF would not)."""
    snapshot = make_snapshot([0.01, 0.03], weight=[1.0, 3.0], max_batch_size=1)
    assert LookaheadActionsScheduler().schedule(snapshot).robot_ids == (1,)


def test_heavy_tier_prefix_without_the_light_robots() -> None:
    """Room for two: both heavy robots, skipping the more urgent light ones."""
    snapshot = make_snapshot(
        [0.01, 0.02, 0.03, 0.04], weight=[1.0, 1.0, 5.0, 5.0], max_batch_size=2
    )
    assert sorted(LookaheadActionsScheduler().schedule(snapshot).robot_ids) == [2, 3]


def test_nothing_to_gain_within_the_horizon_fills_the_batch_most_urgent_first() -> None:
    """No chunk lands inside a 0.05 s horizon: all scores tie and the larger batch wins."""
    snapshot = make_snapshot([0.3, 0.2, 0.5, 0.1, 0.4, 0.6])
    batch = LookaheadActionsScheduler(horizon_s=0.05).schedule(snapshot)
    assert batch.robot_ids == (3, 1, 0, 4)


def test_depth_two_counts_the_follow_up_batch() -> None:
    """Serving B right after A costs more GPU time than batching both: depth 2 batches them.

    Depth 1: [A] scores 0.49 / 0.070 = 7.0 over [A, B] at 0.79 / 0.135 = 5.85.
    Depth 2: [A] then [B] scores 0.79 / 0.140 = 5.64, under [A, B] alone.
    """
    snapshot = make_snapshot([0.01, 0.2], max_batch_size=2)
    assert LookaheadActionsScheduler(depth=1).schedule(snapshot).robot_ids == (0,)
    scheduler = LookaheadActionsScheduler(depth=2)
    assert scheduler.schedule(snapshot).robot_ids == (0, 1)
    assert scheduler.num_plans_scored == 2


def test_depth_two_stays_within_its_budget() -> None:
    """Depth 2 over 20 robots scores exactly the budget of plans, never more."""
    snapshot = make_snapshot(np.linspace(0.0, 0.4, 20), weight=[1.0, 2.0] * 10)
    for budget in (1, 7, 64):
        scheduler = LookaheadActionsScheduler(depth=2, node_budget=budget)
        batch = scheduler.schedule(snapshot)
        assert scheduler.num_plans_scored == budget
        assert 1 <= len(batch.robot_ids) <= 4


def test_depth_one_scores_every_size_of_a_single_tier() -> None:
    """One tier, 1,000 robots, max batch 32: exactly 32 candidates are scored."""
    rng = np.random.default_rng(5)
    snapshot = make_snapshot(rng.uniform(-0.1, 0.5, 1000), obs_time_s=-0.2, max_batch_size=32)
    scheduler = LookaheadActionsScheduler()
    batch = scheduler.schedule(snapshot)
    assert scheduler.num_plans_scored == 32
    assert 1 <= len(batch.robot_ids) <= 32


def test_candidates_come_by_size_then_urgency() -> None:
    """Two tiers with ranks [0, 2] and [1, 3]: the exact candidate order."""
    candidates = prefix_candidates([np.array([0, 2]), np.array([1, 3])], 4, 100)
    assert candidates.tolist() == [
        [1, 0], [0, 1], [1, 1], [2, 0], [0, 2], [2, 1], [1, 2], [2, 2],
    ]  # fmt: skip


def test_candidates_are_every_prefix_combination_and_truncate_in_order() -> None:
    """Against brute force: all combinations once, sorted by (size, rank sum); a budget
    keeps the first ones."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        sizes = rng.integers(0, 6, size=int(rng.integers(1, 5)))
        ranks = rng.permutation(int(sizes.sum()))
        tiers = [np.sort(part) for part in np.split(ranks, np.cumsum(sizes)[:-1])]
        max_size = int(rng.integers(1, 8))

        def key(prefix: list[int], tiers: list[np.ndarray] = tiers) -> tuple[int, int]:
            return sum(prefix), sum(int(t[:p].sum()) for t, p in zip(tiers, prefix, strict=True))

        expected = [
            list(p)
            for p in itertools.product(*[range(min(s, max_size) + 1) for s in sizes])
            if 1 <= sum(p) <= max_size
        ]
        found = prefix_candidates(tiers, max_size, 10**6).tolist()
        assert sorted(found) == sorted(expected)
        assert [key(p) for p in found] == sorted(key(p) for p in expected)
        limit = int(rng.integers(1, 20))
        truncated = prefix_candidates(tiers, max_size, limit).tolist()
        assert [key(p) for p in truncated] == [key(p) for p in found][:limit]
