"""jain_index: Jain's fairness index over per-robot values."""

from __future__ import annotations

import pytest

from armory.sim.metrics import jain_index


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
