"""jain_index: Jain's fairness index over per-robot values; the fleet's fairness measure."""

from __future__ import annotations

import pytest

from armory.report import RobotTally, SimReport, jain_index, make_report
from armory.sim.table import format_system


def test_all_equal_is_one() -> None:
    """Equal shares are perfectly fair, whatever the value."""
    assert jain_index([0.3, 0.3, 0.3, 0.3]) == pytest.approx(1.0)
    assert jain_index([7.0]) == pytest.approx(1.0)


@pytest.mark.parametrize("num_robots", [1, 2, 3, 5, 10])
def test_one_non_zero_of_n_is_one_over_n(num_robots: int) -> None:
    """All of it on one robot out of n gives 1 / n."""
    values = [0.0] * num_robots
    values[-1] = 0.4
    assert jain_index(values) == pytest.approx(1.0 / num_robots)


def test_all_zero_is_one() -> None:
    """No robot starving at all counts as fair."""
    assert jain_index([0.0, 0.0, 0.0]) == 1.0


def test_empty_is_one() -> None:
    """An empty fleet counts as fair."""
    assert jain_index([]) == 1.0


def test_known_value() -> None:
    """(1 + 2 + 3)^2 / (3 * (1 + 4 + 9)) = 6 / 7."""
    assert jain_index([1.0, 2.0, 3.0]) == pytest.approx(6.0 / 7.0)


def test_scale_invariant_and_order_free() -> None:
    """Scaling or shuffling the values leaves the index unchanged."""
    values = [0.1, 0.5, 0.2, 0.0]
    expected = jain_index(values)
    assert jain_index([10.0 * v for v in values]) == pytest.approx(expected)
    assert jain_index(list(reversed(values))) == pytest.approx(expected)
    assert 1.0 / len(values) <= expected <= 1.0


def _tally(robot_id: str, starved_ticks: int) -> RobotTally:
    return RobotTally(
        id=robot_id,
        weight=1.0,
        control_hz=20.0,
        counted_ticks=1000,
        starved_ticks=starved_ticks,
        executed=1000 - starved_ticks,
        age_sum_s=0.0,
        chunks_applied=10,
        requests_sent=10,
    )


def _report(starved_ticks: list[int]) -> SimReport:
    tallies = [_tally(f"arm-{i}", n) for i, n in enumerate(starved_ticks)]
    return make_report(
        tallies,
        batch_size_counts={1: 10},
        gpu_busy_s=1.0,
        duration_s=50.0,
        scheduler="s",
        fleet="f",
        seed=0,
        request_mode="every-tick",
    )


def test_fairness_reads_near_one_when_nobody_starves_much() -> None:
    """Seven robots never starved and one starved 0.2% of its ticks: fairness near 1, not the
    1/8 that Jain's index over starvation itself would read."""
    report = _report([0, 0, 0, 0, 0, 0, 0, 2])
    assert report.system.jain_service > 0.999
    assert jain_index([r.starvation for r in report.robots]) == pytest.approx(1 / 8)


def test_fairness_falls_when_one_robot_gets_all_the_service() -> None:
    """One robot served, one starved throughout: 1/2, the least fair for two robots."""
    assert _report([0, 1000]).system.jain_service == pytest.approx(0.5)


def test_summary_names_the_most_starved_robot() -> None:
    """The printed summary shows the fairness measure and the worst robot with its share."""
    text = format_system(_report([0, 30, 2]))
    assert "fairness:" in text and "worst robot:" in text
    assert "3.0% starved (arm-1)" in text
