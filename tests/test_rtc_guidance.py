"""Real-time-chunking guidance: LeRobot's prefix-weight schedules and soft masking.

The numbers here are worked by hand from the schedules' definitions; the same
weights are compared with LeRobot 0.6.1's own ``get_prefix_weights`` in
tests/test_lerobot_client_fidelity.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from server_harness import make_obs

from armory.core.latency_profile import LinearProfileConfig
from armory.policies.mock import MockPolicyConfig
from armory.policies.rtc_guidance import (
    RTC_SCHEDULES,
    prefix_weights,
    rtc_guidance,
    soft_inpaint,
)


def test_prefix_weights_by_schedule() -> None:
    """delay 2, execution horizon 6, 10 rows: the frozen rows weigh 1, then each schedule."""
    ramp = np.array([4, 3, 2, 1]) / 5
    expected = {
        "zeros": [1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        "ones": [1, 1, 1, 1, 1, 1, 0, 0, 0, 0],
        "linear": [1, 1, *ramp, 0, 0, 0, 0],
        "exp": [1, 1, *(ramp * np.expm1(ramp) / (math.e - 1)), 0, 0, 0, 0],
    }
    for schedule in RTC_SCHEDULES:
        got = prefix_weights(2, 6, 10, schedule)
        assert got.dtype == np.float32 and got.shape == (10,)
        np.testing.assert_allclose(got, expected[schedule], atol=1e-7, err_msg=schedule)


def test_prefix_weights_edges() -> None:
    """A delay past the horizon freezes only up to it; a horizon past the chunk ramps to
    its end; no delay and no horizon weigh nothing."""
    np.testing.assert_array_equal(prefix_weights(8, 4, 6, "linear"), [1, 1, 1, 1, 0, 0])
    np.testing.assert_allclose(prefix_weights(1, 20, 4, "linear"), [1, 0.75, 0.5, 0.25])
    assert not prefix_weights(0, 0, 5, "ones").any()
    with pytest.raises(ValueError, match="unknown RTC schedule 'cosine'; valid: zeros"):
        prefix_weights(1, 2, 3, "cosine")
    with pytest.raises(ValueError, match="delay must be an int >= 0"):
        prefix_weights(-1, 2, 3, "ones")


def test_guidance_pads_the_previous_plan_and_cuts_the_horizon() -> None:
    """Prefix then remainder, zero-padded to the chunk; the horizon is cut to the plan's
    length; no plan, no guidance."""
    obs = {
        "rtc_prefix": np.ones((2, 3), np.float32),
        "rtc_remainder": np.full((2, 3), 5.0, np.float32),
        "rtc_delay": 2,
    }
    guidance = rtc_guidance(obs, rows=6, action_dim=3, schedule="ones", execution_horizon=10)
    assert guidance is not None and (guidance.delay, guidance.num_previous) == (2, 4)
    np.testing.assert_array_equal(guidance.previous[:, 0], [1, 1, 5, 5, 0, 0])
    np.testing.assert_array_equal(guidance.weights, [1, 1, 1, 1, 0, 0])
    assert rtc_guidance({"rtc_delay": 0}, rows=6, action_dim=3, schedule="ones") is None
    with pytest.raises(ValueError, match=r"must be \(n, 4\)"):
        rtc_guidance(obs, rows=6, action_dim=4, schedule="ones")
    with pytest.raises(ValueError, match="rtc_delay 3 is outside"):
        rtc_guidance(obs | {"rtc_delay": 3}, rows=6, action_dim=3, schedule="ones")


def test_guidance_refuses_a_delay_that_is_not_a_count_of_chunk_rows() -> None:
    """rtc_delay must be an integer (a NumPy one too; a float is not rounded) and no
    longer than the chunk; the cut execution horizon is kept for a model's guidance."""
    obs = {"rtc_prefix": np.ones((5, 2), np.float32), "rtc_remainder": np.ones((4, 2))}
    for delay in (1.5, "2", True, np.array([1, 2])):
        with pytest.raises(ValueError, match="rtc_delay must be an integer, got"):
            rtc_guidance(obs | {"rtc_delay": delay}, rows=6, action_dim=2, schedule="exp")
    with pytest.raises(ValueError, match="rtc_delay 5 is longer than the chunk's 4 rows"):
        rtc_guidance(obs | {"rtc_delay": 5}, rows=4, action_dim=2, schedule="exp")
    guidance = rtc_guidance(
        obs | {"rtc_delay": np.int32(2)}, rows=6, action_dim=2, schedule="exp", execution_horizon=7
    )
    assert guidance is not None and (guidance.delay, guidance.execution_horizon) == (2, 7)
    guidance = rtc_guidance(obs | {"rtc_delay": 2}, rows=6, action_dim=2, schedule="exp")
    assert guidance is not None and guidance.execution_horizon == 9


def test_soft_inpaint_blends_by_weight() -> None:
    """Each row is w * previous + (1 - w) * chunk."""
    obs = {"rtc_prefix": np.full((1, 1), 10.0, np.float32), "rtc_remainder": np.full((3, 1), 10.0)}
    guidance = rtc_guidance(obs, rows=4, action_dim=1, schedule="linear")
    blended = soft_inpaint(np.zeros((4, 1), np.float32), guidance)
    np.testing.assert_allclose(blended[:, 0], [10, 7.5, 5, 2.5], rtol=1e-6)
    assert blended.dtype == np.float32


@pytest.mark.parametrize("schedule", RTC_SCHEDULES)
def test_mock_soft_masks_with_the_schedule(schedule: str) -> None:
    """policy:mock with an rtc_schedule keeps the frozen rows exactly and blends the rest
    of the previous plan by the schedule's weights."""
    fast = LinearProfileConfig(1e-4, 0.0)
    config = MockPolicyConfig(latency_profile="linear", linear=fast, rtc_schedule=schedule)
    policy = config.make()
    obs = make_obs(5)
    plain = policy.infer_batch([obs])[0]
    prefix = np.full((3, 7), 2.0, np.float32)
    remainder = np.full((4, 7), -2.0, np.float32)
    rtc = {"rtc_prefix": prefix, "rtc_remainder": remainder, "rtc_delay": 3}
    got = policy.infer_batch([obs | rtc])[0]
    np.testing.assert_array_equal(got[:3], prefix)
    w = prefix_weights(3, 7, 10, schedule)[:, None]
    previous = np.concatenate([prefix, remainder, np.zeros((3, 7), np.float32)])
    np.testing.assert_allclose(got, w * previous + (1 - w) * plain, atol=1e-6)
    with pytest.raises(ValueError, match="unknown rtc_schedule 'soft'"):
        MockPolicyConfig(rtc_schedule="soft")
