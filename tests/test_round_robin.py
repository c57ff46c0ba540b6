"""round-robin: turns in order of first contact."""

from __future__ import annotations

from factories import make_snapshot

from armory.scheduling.round_robin import RoundRobinScheduler


def test_takes_turns_and_wraps_around() -> None:
    """Five robots, batches of two: 0 1, 2 3, 4 0, 1 2."""
    scheduler = RoundRobinScheduler()
    snapshot = make_snapshot([1.0] * 5, max_batch_size=2)
    batches = [scheduler.schedule(snapshot).robot_ids for _ in range(4)]
    assert batches == [(0, 1), (2, 3), (4, 0), (1, 2)]


def test_follows_contact_order_not_rows_or_deadlines() -> None:
    """Turns follow first contact even when rows, ids and deadlines say otherwise."""
    scheduler = RoundRobinScheduler()
    snapshot = make_snapshot(
        [0.1, 0.2, 0.3], robot_id=[7, 8, 9], contact_order=[2, 0, 1], max_batch_size=2
    )
    assert scheduler.schedule(snapshot).robot_ids == (8, 9)
    assert scheduler.schedule(snapshot).robot_ids == (7, 8)


def test_skips_ineligible_robots() -> None:
    """An ineligible robot loses its turn; the batch fills with the next eligible ones."""
    scheduler = RoundRobinScheduler()
    snapshot = make_snapshot([1.0] * 5, eligible=[True, False, True, True, True], max_batch_size=2)
    assert scheduler.schedule(snapshot).robot_ids == (0, 2)
    assert scheduler.schedule(snapshot).robot_ids == (3, 4)
    assert scheduler.schedule(snapshot).robot_ids == (0, 2)


def test_fewer_eligible_than_the_max_takes_them_all_once() -> None:
    """With fewer eligible robots than the batch holds, each is taken once, in turn."""
    scheduler = RoundRobinScheduler()
    snapshot = make_snapshot([1.0] * 4, eligible=[False, True, False, True], max_batch_size=4)
    assert scheduler.schedule(snapshot).robot_ids == (1, 3)


def test_survives_robots_leaving_and_joining() -> None:
    """A departed robot's turn passes to the next contact; a newcomer queues at the end."""
    scheduler = RoundRobinScheduler()
    first = make_snapshot([1.0] * 5, robot_id=[10, 11, 12, 13, 14], max_batch_size=2)
    assert scheduler.schedule(first).robot_ids == (10, 11)
    # Robot 12 (contact 2) leaves, robot 15 (contact 5) joins; rows are reshuffled.
    later = make_snapshot(
        [1.0] * 5, robot_id=[15, 13, 10, 14, 11], contact_order=[5, 3, 0, 4, 1], max_batch_size=2
    )
    assert scheduler.schedule(later).robot_ids == (13, 14)
    assert scheduler.schedule(later).robot_ids == (15, 10)
    assert scheduler.schedule(later).robot_ids == (11, 13)
