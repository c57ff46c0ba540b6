"""greedy-deadline: the largest on-time batch of the most urgent robots."""

from __future__ import annotations

from factories import make_snapshot

from armory.scheduling.greedy_deadline import GreedyDeadlineScheduler

# l40s-pi05 forward passes: 1 -> 0.070 s, 2 -> 0.135 s, 3 -> 0.195 s, 4 -> 0.250 s.


def test_picks_the_largest_size_that_keeps_the_most_urgent_on_time() -> None:
    """The most urgent must leave by 0.205 s: three robots (0.195 s) fit, four (0.25 s) do not."""
    snapshot = make_snapshot([0.6, 0.21, 0.8, 0.5, 0.7])
    assert GreedyDeadlineScheduler().schedule(snapshot).robot_ids == (1, 3, 0)


def test_fills_the_batch_when_everyone_has_time() -> None:
    """With a distant deadline the batch is full, most urgent first."""
    snapshot = make_snapshot([3.0, 1.0, 2.0, 5.0, 4.0, 6.0])
    assert GreedyDeadlineScheduler().schedule(snapshot).robot_ids == (1, 2, 0, 4)


def test_falls_back_to_best_throughput_when_nothing_is_on_time() -> None:
    """When even one robot is late it takes the size of most robots per second (here 2)."""
    snapshot = make_snapshot(
        [0.01, 0.5, 0.6, 0.7], latency_table_s=[0.0, 0.10, 0.15, 0.30, 0.45], now_s=0.0
    )
    assert GreedyDeadlineScheduler().schedule(snapshot).robot_ids == (0, 1)


def test_throughput_ties_go_to_the_larger_batch() -> None:
    """Sizes 1 and 2 both serve 10 robots per second: it takes 2."""
    snapshot = make_snapshot([0.01, 0.5, 0.6], latency_table_s=[0.0, 0.10, 0.20, 0.35, 0.50])
    assert GreedyDeadlineScheduler().schedule(snapshot).robot_ids == (0, 1)


def test_urgency_counts_the_downlink() -> None:
    """A later deadline with a long downlink is more urgent than an earlier one with none."""
    snapshot = make_snapshot([0.30, 0.32], downlink_s=[0.0, 0.05], max_batch_size=1)
    assert GreedyDeadlineScheduler().schedule(snapshot).robot_ids == (1,)


def test_ignores_ineligible_robots_when_sizing() -> None:
    """An ineligible robot with the earliest deadline neither joins nor limits the batch."""
    snapshot = make_snapshot([0.0, 1.0, 1.1], eligible=[False, True, True])
    assert GreedyDeadlineScheduler().schedule(snapshot).robot_ids == (1, 2)
