"""LatencyProfile: interpolation, extrapolation, presets, validation, online learning."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from armory.core.latency_profile import (
    LatencyProfile,
    LinearProfileConfig,
    points_for,
    preset_names,
)


def make_profile(points: dict[int, float] | None = None, **kwargs) -> LatencyProfile:
    """A profile from ``points``; default two points, 0.1 s at 1 and 0.3 s at 3."""
    return LatencyProfile({1: 0.1, 3: 0.3} if points is None else points, **kwargs)


# ---- shape of the curve ---------------------------------------------------


def test_configured_points_are_returned_exactly() -> None:
    """At a configured size the latency is the configured value."""
    profile = make_profile({1: 0.07, 2: 0.135, 4: 0.25})
    assert profile.latency_s(1) == 0.07
    assert profile.latency_s(2) == 0.135
    assert profile.latency_s(4) == 0.25


def test_interpolates_linearly_between_points() -> None:
    """Between 1 -> 0.1 s and 3 -> 0.3 s, size 2 takes 0.2 s."""
    assert make_profile().latency_s(2) == pytest.approx(0.2)
    profile = make_profile({1: 0.1, 5: 0.5})
    assert [profile.latency_s(b) for b in range(1, 6)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_extrapolates_along_the_last_segment() -> None:
    """Past the last point the line through the last two continues."""
    profile = make_profile({1: 0.1, 2: 0.15, 4: 0.35})
    assert profile.latency_s(5) == pytest.approx(0.45)
    assert profile.latency_s(10) == pytest.approx(0.95)


def test_extrapolation_never_decreases() -> None:
    """A falling last segment extrapolates flat, never below the last point."""
    profile = make_profile({1: 0.2, 2: 0.1})
    assert profile.latency_s(5) == pytest.approx(0.1)


def test_single_point_scales_proportionally() -> None:
    """One point at size 2 -> 0.1 s: size 1 takes 0.05 s, size 4 takes 0.2 s."""
    profile = make_profile({2: 0.1})
    assert profile.latency_s(1) == pytest.approx(0.05)
    assert profile.latency_s(2) == pytest.approx(0.1)
    assert profile.latency_s(4) == pytest.approx(0.2)
    assert profile.latency_s(40) == pytest.approx(2.0)


def test_below_the_first_point_extends_the_first_segment() -> None:
    """Points at 2 and 4 extend down to size 1 along their line."""
    profile = make_profile({2: 0.1, 4: 0.2})
    assert profile.latency_s(1) == pytest.approx(0.05)


def test_below_the_first_point_never_drops_under_a_tenth() -> None:
    """A steep first segment is floored at a tenth of the first point, keeping it positive."""
    profile = make_profile({2: 0.1, 3: 0.5})
    assert profile.latency_s(1) == pytest.approx(0.01)


def test_latency_beyond_the_table_matches_the_extrapolation() -> None:
    """Sizes inside and past the precomputed table agree with one line."""
    profile = make_profile({1: 0.1, 3: 0.3})
    assert [profile.latency_s(b) for b in (3, 4, 100)] == pytest.approx([0.3, 0.4, 10.0])


# ---- presets --------------------------------------------------------------


def test_l40s_pi05_preset() -> None:
    """The original mock: 70, 135, 195, 250 ms, then +55 ms per robot."""
    profile = LatencyProfile.from_preset("l40s-pi05")
    assert profile.points() == {1: 0.070, 2: 0.135, 3: 0.195, 4: 0.250}
    assert profile.latency_s(6) == pytest.approx(0.360)


def test_l40s_pi05_paper_preset() -> None:
    """The paper's figures: 73 ms at 1, 211 ms at 5, linear between and beyond."""
    profile = LatencyProfile.from_preset("l40s-pi05-paper")
    assert profile.points() == {1: 0.073, 5: 0.211}
    assert profile.latency_s(3) == pytest.approx(0.142)
    assert profile.latency_s(7) == pytest.approx(0.280)


def test_linear_preset_is_intercept_plus_slope_times_size() -> None:
    """linear gives a + b * B at every size, with defaults 50 ms + 10 ms per robot."""
    default = LatencyProfile.from_preset("linear")
    assert [default.latency_s(b) for b in range(1, 21)] == pytest.approx(
        [0.05 + 0.01 * b for b in range(1, 21)]
    )
    custom = LatencyProfile.from_preset("linear", LinearProfileConfig(0.02, 0.005))
    assert [custom.latency_s(b) for b in range(1, 33)] == pytest.approx(
        [0.02 + 0.005 * b for b in range(1, 33)]
    )


def test_linear_with_zero_slope_is_flat() -> None:
    """A zero slope costs the intercept at every size."""
    profile = LatencyProfile.from_preset("linear", LinearProfileConfig(0.1, 0.0))
    assert [profile.latency_s(b) for b in (1, 2, 9)] == pytest.approx([0.1, 0.1, 0.1])


def test_preset_names_list_every_preset_and_linear() -> None:
    """The two L40S presets and linear are valid names."""
    assert set(preset_names()) == {"l40s-pi05", "l40s-pi05-paper", "linear"}


def test_points_for_returns_a_copy() -> None:
    """Editing the returned points does not change the preset."""
    points = points_for("l40s-pi05")
    points[1] = 9.0
    assert points_for("l40s-pi05")[1] == 0.070


def test_unknown_preset_error_lists_every_valid_name() -> None:
    """An unknown preset raises ValueError naming it and every valid name."""
    with pytest.raises(ValueError) as error:
        LatencyProfile.from_preset("h100-nope")
    message = str(error.value)
    assert "'h100-nope'" in message
    for name in preset_names():
        assert name in message


# ---- validation -----------------------------------------------------------


@pytest.mark.parametrize(
    ("points", "match"),
    [
        ({}, "at least one"),
        ({0: 0.1}, "integer in 1..65536"),
        ({-1: 0.1}, "integer in 1..65536"),
        ({1.5: 0.1}, "integer in 1..65536"),
        ({10**12: 0.1}, "integer in 1..65536"),
        ({1: float("inf")}, "finite"),
        ({1: 0.0}, "positive"),
        ({1: -0.1}, "positive"),
        ({1: float("nan")}, "positive"),
    ],
)
def test_invalid_points_are_rejected(points: dict, match: str) -> None:
    """Empty points, sizes that are not whole or beyond the bound, and latencies that are
    not positive and finite raise."""
    with pytest.raises(ValueError, match=match):
        LatencyProfile(points)


def test_batch_size_below_one_is_rejected() -> None:
    """Asking for the latency of an empty batch raises."""
    with pytest.raises(ValueError, match="batch size"):
        make_profile().latency_s(0)


@pytest.mark.parametrize(("intercept_s", "slope_s"), [(0.0, 0.01), (-0.05, 0.01), (0.05, -0.01)])
def test_linear_config_rejects_bad_parameters(intercept_s: float, slope_s: float) -> None:
    """A linear profile needs intercept > 0 and slope >= 0; the error names both."""
    with pytest.raises(ValueError) as error:
        LinearProfileConfig(intercept_s=intercept_s, slope_s=slope_s)
    assert f"intercept_s={intercept_s}" in str(error.value)
    assert f"slope_s={slope_s}" in str(error.value)


# ---- table ----------------------------------------------------------------


def test_table_lists_sizes_zero_to_max() -> None:
    """Entry 0 is 0.0, entry b the latency of a batch of b, as float64."""
    profile = LatencyProfile.from_preset("l40s-pi05")
    table = profile.table(6)
    assert table.dtype == np.float64
    assert table.shape == (7,)
    np.testing.assert_allclose(table, [0.0, 0.070, 0.135, 0.195, 0.250, 0.305, 0.360])


def test_table_of_size_one() -> None:
    """A max batch of one gives two entries."""
    np.testing.assert_allclose(make_profile().table(1), [0.0, 0.1])


def test_table_is_read_only_and_follows_what_the_profile_learns() -> None:
    """The table is shared between decisions (read-only) until an estimate changes."""
    profile = make_profile()
    table = profile.table(3)
    assert profile.table(3) is table
    with pytest.raises(ValueError):
        table[1] = 1.0
    for _ in range(3):
        profile.observe(1, 0.2)
    np.testing.assert_allclose(profile.table(3), [0.0, 0.2, 0.2, 0.3])
    np.testing.assert_allclose(table, [0.0, 0.1, 0.2, 0.3])


# ---- online learning ------------------------------------------------------


def test_outliers_do_not_move_the_estimate() -> None:
    """20 samples at 0.1 s and 3 stalls at 5 s leave the estimate at 0.1 s."""
    profile = make_profile({1: 0.07})
    for _ in range(10):
        profile.observe(1, 0.1)
    for _ in range(3):
        profile.observe(1, 5.0)
    for _ in range(10):
        profile.observe(1, 0.1)
    assert profile.latency_s(1) == pytest.approx(0.1)


def test_a_lasting_change_is_learned() -> None:
    """Once most of the window is slower the estimate follows."""
    profile = make_profile({1: 0.07}, window=9)
    for _ in range(9):
        profile.observe(1, 0.1)
    for _ in range(5):
        profile.observe(1, 0.2)
    assert profile.latency_s(1) == pytest.approx(0.2)


def test_the_estimate_is_the_median_of_the_window() -> None:
    """Only the last ``window`` samples count; their median replaces the configured value."""
    profile = make_profile({1: 0.5}, window=3)
    for seconds in (0.9, 0.1, 0.2, 0.3):  # 0.9 falls out of the window
        profile.observe(1, seconds)
    assert profile.latency_s(1) == pytest.approx(0.2)


def test_the_size_past_a_single_measured_one_takes_its_time_until_run() -> None:
    """Size 1 measured twice as slow as configured: nothing yet says how the time grows
    with the batch, so size 2 is estimated at size 1's 0.2 s (a larger batch never takes
    less) until the scheduler runs it and learns; sizes beyond take the lesser of the
    configured curve and the same curve twice as slow."""
    profile = make_profile({1: 0.1, 3: 0.3})
    profile.observe(1, 0.2)
    assert [profile.latency_s(b) for b in (1, 2, 3, 10)] == pytest.approx([0.2, 0.2, 0.3, 1.0])
    profile.observe(3, 0.5)
    assert profile.latency_s(2) == pytest.approx(0.35)
    # Past size 3 the configured curve (0.4 s at 4) is the cheapest guess, under the
    # measured line continued (0.65 s) and the curve scaled as size 3 says (0.67 s), but
    # no less than size 3's own 0.5 s.
    assert profile.latency_s(4) == pytest.approx(0.5)
    assert profile.latency_s(6) == pytest.approx(0.6)


def test_a_single_configured_point_does_not_hold_the_batch_to_one() -> None:
    """A worker policy declares its backend's time at size 1 only, and the profile
    stretches it in proportion (no gain from batching). Once size 1 is measured, size 2
    costs what size 1 does until it is run; then the line through both holds."""
    profile = make_profile({1: 0.05})
    profile.observe(1, 0.05)
    assert profile.latency_s(2) == pytest.approx(0.05)
    assert profile.latency_s(3) == pytest.approx(0.15)
    profile.observe(2, 0.055)
    assert [profile.latency_s(b) for b in (3, 8)] == pytest.approx([0.06, 0.085])


def test_configured_points_follow_a_faster_gpu() -> None:
    """A GPU 7-14 times faster than the configured preset, measured at sizes 1-3: size 4
    (configured at 250 ms) is estimated along what was measured, not left at 250 ms,
    where a scheduler would never try it and never learn it."""
    profile = LatencyProfile.from_preset("l40s-pi05")
    for size, seconds in ((1, 0.010), (2, 0.012), (3, 0.014)):
        profile.observe(size, seconds)
    # The measured curve continued: 14 ms + 2 ms per robot past size 3.
    assert profile.latency_s(4) == pytest.approx(0.016)
    assert profile.latency_s(8) == pytest.approx(0.024)
    assert profile.points()[4] == pytest.approx(0.016)


def test_configured_points_between_measured_sizes_give_way() -> None:
    """Between two measured sizes the line through them holds, whatever was configured
    in between."""
    profile = make_profile({1: 0.1, 2: 0.2, 4: 0.4})
    profile.observe(1, 0.1)
    profile.observe(4, 0.2)
    assert profile.latency_s(2) == pytest.approx(0.1 + 0.1 / 3)
    assert profile.latency_s(3) == pytest.approx(0.1 + 0.2 / 3)


def test_around_a_single_measured_size_the_lesser_of_two_curves() -> None:
    """Measured at size 4 only, 25% slower than configured: on either side the configured
    curve and the same curve 25% slower are both plausible, and the less is taken (the
    next size up, size 4's own time)."""
    profile = make_profile({1: 0.1, 2: 0.2})
    profile.observe(4, 0.5)
    assert profile.points() == pytest.approx({1: 0.1, 2: 0.2, 4: 0.5})
    assert profile.latency_s(3) == pytest.approx(0.3)
    assert profile.latency_s(5) == pytest.approx(0.5)
    assert profile.latency_s(6) == pytest.approx(0.6)


def test_a_cold_first_pass_does_not_price_a_size_out() -> None:
    """Sizes 1-7 run warm; the first batch of 8 runs cold at ten times its warm time (a
    new input shape: kernels compiled, memory allocated). Taken at its word it would put
    size 8 and every larger size at 1.3 s, and the scheduler would never run them again
    to learn otherwise. It is held back; the next batch of 8, warm, counts, and the cold
    one is dropped for good."""
    profile = make_profile({1: 0.06, 8: 0.13})
    for size in range(1, 8):
        profile.observe(size, 0.05 + 0.01 * size)
    before = profile.table(16).copy()
    profile.observe(8, 1.3)
    assert np.array_equal(profile.table(16), before)
    profile.observe(8, 0.13)
    profile.observe(8, 0.14)
    assert profile.latency_s(8) == pytest.approx(0.135)
    assert profile.latency_s(16) < 0.3


def test_a_cold_first_pass_is_dropped_even_where_the_warm_one_is_dearer_than_guessed() -> None:
    """Measured flat at sizes 1 and 2, size 32 is guessed at 13 ms; its first pass runs
    cold (1.07 s), its second warm (72 ms, still five times the guess). The second
    decides by the first: that took more than twice as long, so it ran cold and goes."""
    profile = make_profile({1: 0.016})
    profile.observe(1, 0.016)
    profile.observe(2, 0.013)
    assert profile.latency_s(32) == pytest.approx(0.013)
    profile.observe(32, 1.07)
    assert profile.latency_s(32) == pytest.approx(0.013)
    profile.observe(32, 0.072)
    assert profile.points() == pytest.approx({1: 0.016, 2: 0.013, 32: 0.072})


def test_a_guess_far_too_cheap_is_corrected_by_the_second_pass() -> None:
    """Seeded for a GPU five times faster: the first pass at 0.1 s could be a cold one and
    waits; the second, as dear, confirms it and both count. A pass under twice the
    estimate counts at once."""
    profile = make_profile({1: 0.02})
    profile.observe(1, 0.1)
    assert profile.latency_s(1) == pytest.approx(0.02)
    profile.observe(1, 0.1)
    assert profile.latency_s(1) == pytest.approx(0.1)
    assert profile.points() == pytest.approx({1: 0.1})
    near = make_profile({1: 0.02})
    near.observe(1, 0.039)
    assert near.latency_s(1) == pytest.approx(0.039)


def test_past_the_measured_sizes_never_below_the_largest() -> None:
    """A larger batch is never estimated faster than a measured smaller one, though the
    measured medians fall (noise) and the configured curve says less."""
    profile = make_profile({1: 0.1})
    profile.observe(1, 0.1)
    profile.observe(2, 0.09)
    profile.observe(3, 0.08)
    assert [profile.latency_s(b) for b in (4, 10, 100)] == pytest.approx([0.08, 0.08, 0.08])
    fast = make_profile({1: 0.01, 2: 0.02})
    fast.observe(2, 0.05)
    fast.observe(2, 0.05)  # more than twice the estimate: the second pass confirms it
    assert fast.latency_s(3) == pytest.approx(0.05)


def test_below_the_measured_sizes_never_above_the_smallest() -> None:
    """A smaller batch is never estimated slower than a measured larger one: measured
    four times faster at size 8, size 1 is the configured 0.1 s scaled alike."""
    profile = make_profile({1: 0.1, 8: 0.8})
    profile.observe(8, 0.2)
    assert profile.latency_s(1) == pytest.approx(0.025)
    slow = make_profile({1: 0.1, 2: 0.2})
    slow.observe(2, 0.05)
    assert slow.latency_s(1) == pytest.approx(0.025)


@settings(max_examples=200, deadline=None)
@given(
    configured=st.dictionaries(st.integers(1, 16), st.floats(0.001, 1.0), min_size=1, max_size=5),
    measured=st.dictionaries(st.integers(1, 16), st.floats(0.001, 1.0), max_size=6),
)
def test_estimates_stay_within_the_measured_neighbours(
    configured: dict[int, float], measured: dict[int, float]
) -> None:
    """Every size's estimate is positive and finite, a measured size's is its samples', a
    size past the measured ones is at least the largest measured size's, and one before
    them at most the smallest measured size's. (Each size runs twice: a first pass far
    dearer than its estimate waits for the second.)"""
    profile = LatencyProfile(configured)
    for size, seconds in measured.items():
        profile.observe(size, seconds)
        profile.observe(size, seconds)
    table = profile.table(24)
    assert np.all(np.isfinite(table[1:])) and np.all(table[1:] > 0)
    for size, seconds in measured.items():
        assert table[size] == seconds
    if measured:
        first, last = min(measured), max(measured)
        assert np.all(table[last + 1 :] >= measured[last])
        assert np.all(table[1:first] <= measured[first])


@pytest.mark.parametrize(
    ("batch_size", "seconds"),
    [(0, 0.1), (-2, 0.1), (1, 0.0), (1, -0.1), (1, float("nan")), (1, float("inf"))],
)
def test_invalid_samples_are_ignored(batch_size: int, seconds: float) -> None:
    """Empty batches and non-positive or non-finite durations do not touch the estimate."""
    profile = make_profile()
    profile.observe(batch_size, seconds)
    assert profile.points() == {1: 0.1, 3: 0.3}
