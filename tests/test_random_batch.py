"""random: uniform size, uniform robots, reproducible per seed."""

from __future__ import annotations

import numpy as np
from factories import make_snapshot

from armory.scheduling.random_batch import RandomBatchScheduler


def _draws(seed: int, num_draws: int = 30) -> list[tuple[int, ...]]:
    snapshot = make_snapshot(np.linspace(0.0, 1.0, 10), max_batch_size=4)
    scheduler = RandomBatchScheduler(seed=seed)
    return [scheduler.schedule(snapshot).robot_ids for _ in range(num_draws)]


def test_same_seed_same_decisions() -> None:
    """Two schedulers with one seed make the same sequence of batches."""
    assert _draws(7) == _draws(7)


def test_different_seeds_differ() -> None:
    """Different seeds give different sequences."""
    assert _draws(7) != _draws(8)


def test_draws_every_size_and_only_eligible_robots() -> None:
    """Over many draws every size 1..min(max, eligible) appears, and only eligible robots."""
    eligible = [True, False, True, True, False, True, True]
    snapshot = make_snapshot([1.0] * 7, eligible=eligible, max_batch_size=6)
    scheduler = RandomBatchScheduler(seed=1)
    batches = [scheduler.schedule(snapshot).robot_ids for _ in range(300)]
    assert {len(b) for b in batches} == {1, 2, 3, 4, 5}
    assert set().union(*batches) == {0, 2, 3, 5, 6}
