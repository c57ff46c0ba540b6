"""A server on this machine that computes as a fleet file says the GPU does.

For runs that compare the fleet runner with the simulator (tests, benchmarks,
``scripts/run-main.sh``): the mock policy gets the fleet's action horizon and
latency profile, the server its max batch and the directed-mode margin the
simulator uses (the fleet's ``threshold_margin_s``).
"""

from __future__ import annotations

import math

from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.fleet_spec import FleetSpec
from armory.policies.mock import MockPolicyConfig

_LINE_TOLERANCE_S = 1e-9
_NEAR_ZERO_S = 1e-9
"""Intercept standing for zero (the mock's line needs one > 0): a single latency point
scales proportionally to the batch size."""


def mock_policy_for(fleet: FleetSpec) -> MockPolicyConfig:
    """The mock policy of ``fleet``'s action horizon and latency profile.

    Explicit ``latency_points`` must lie on a line (the mock knows presets and
    lines only); a ValueError says so otherwise. The fleet's ``latency_jitter``
    is not reproduced: the mock takes its profile's time exactly.
    """
    if not fleet.latency_points:
        return MockPolicyConfig(
            latency_profile=fleet.latency_profile,
            linear=fleet.linear,
            action_horizon=fleet.action_horizon,
        )
    return MockPolicyConfig(
        latency_profile="linear",
        linear=_line_through(fleet.latency_points, fleet.name),
        action_horizon=fleet.action_horizon,
    )


def server_config_for(fleet: FleetSpec, **overrides: object) -> ServerConfig:
    """The server options the simulator assumes for ``fleet`` (overrides win)."""
    options: dict[str, object] = {
        "max_batch_size": fleet.max_batch_size,
        "directed_margin_s": fleet.threshold_margin_s,
    }
    options.update(overrides)
    return ServerConfig(**options)  # type: ignore[arg-type]


def _line_through(points: dict[int, float], name: str) -> LinearProfileConfig:
    sizes = sorted(points)
    if len(sizes) == 1:
        (b,) = sizes
        return LinearProfileConfig(intercept_s=_NEAR_ZERO_S, slope_s=points[b] / b)
    b0, b1 = sizes[0], sizes[1]
    slope_s = (points[b1] - points[b0]) / (b1 - b0)
    intercept_s = points[b0] - slope_s * b0
    for b in sizes:
        if not math.isclose(intercept_s + slope_s * b, points[b], abs_tol=_LINE_TOLERANCE_S):
            raise ValueError(
                f"fleet {name!r}: latency_points {points} are not on a line; the mock "
                "policy reproduces presets and lines only"
            )
    if intercept_s <= 0 or slope_s < 0:
        raise ValueError(
            f"fleet {name!r}: latency_points {points} give intercept {intercept_s:g} s and "
            f"slope {slope_s:g} s; the mock needs intercept > 0 and slope >= 0"
        )
    return LinearProfileConfig(intercept_s=intercept_s, slope_s=slope_s)
