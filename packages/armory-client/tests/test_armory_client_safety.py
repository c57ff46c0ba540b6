"""The safety layer: every rule, exact numbers."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from armory_client import SafetyConfig, SafetyLayer, SafetyStop


def make_layer(**config) -> tuple[SafetyLayer, list[SafetyStop]]:
    """A layer with `config` and the list its on_stop hook appends to."""
    stops: list[SafetyStop] = []
    return SafetyLayer(SafetyConfig(**config), on_stop=stops.append), stops


def a(*values: float) -> np.ndarray:
    """A float32 action."""
    return np.array(values, np.float32)


def test_defaults_pass_actions_and_hold_when_dry() -> None:
    """No limits, no step check; a starved tick repeats the last action (none before one)."""
    layer = SafetyLayer()
    assert layer.filter(None) is None
    action = a(1.0, -2.0)
    out = layer.filter(action)
    assert out is not action and out.dtype == np.float32
    assert out.tolist() == [1.0, -2.0]
    assert layer.filter(a(100.0, 100.0)).tolist() == [100.0, 100.0]  # no max step by default
    held = layer.filter(None)
    assert held.tolist() == [100.0, 100.0] and held.dtype == np.float32
    assert (layer.num_actions, layer.num_dry_ticks, layer.num_clipped) == (3, 2, 0)
    assert not layer.stopped and layer.stop_reason is None


def test_limits_clip_per_dimension() -> None:
    """Each dimension is clipped to its bounds; inf leaves a side open."""
    layer, stops = make_layer(lower=(-1.0, 0.0, -np.inf), upper=(1.0, 0.5, 2.0))
    assert layer.filter(a(-3.0, 0.25, -1e6)).tolist() == [-1.0, 0.25, -1e6]
    assert layer.filter(a(0.5, 9.0, 9.0)).tolist() == [0.5, 0.5, 2.0]
    assert layer.filter(a(0.0, 0.1, 0.0)).tolist() == [0.0, pytest.approx(0.1), 0.0]
    assert layer.num_clipped == 2 and stops == []
    upper_only = SafetyLayer(SafetyConfig(upper=(1.0, 1.0)))
    assert upper_only.filter(a(-5.0, 5.0)).tolist() == [-5.0, 1.0]


def test_jump_stops_instead_of_clipping() -> None:
    """A change larger than max_step raises SafetyStop naming the dimension; nothing is
    sent, the stop latches, on_stop hears it once."""
    layer, stops = make_layer(max_step=0.5)
    layer.filter(a(0.0, 0.0))
    assert layer.filter(a(0.5, -0.5)).tolist() == [0.5, -0.5]  # exactly the limit passes
    with pytest.raises(SafetyStop, match=r"dim 1: -0.5 -> 0.25 \(step 0.75 > 0.5\)") as info:
        layer.filter(a(0.5, 0.25))
    assert "jump larger than max_step" in info.value.reason
    assert layer.stopped and layer.last_action.tolist() == [0.5, -0.5]
    with pytest.raises(SafetyStop, match=r"stopped; call reset\(\) to resume"):
        layer.filter(a(0.5, -0.5))  # even a harmless action is refused
    with pytest.raises(SafetyStop):
        layer.filter(None)  # and no holding either
    assert len(stops) == 1 and stops[0] is info.value


def test_max_step_per_dimension_and_reset_reference() -> None:
    """Per-dimension steps (inf: unchecked); reset resumes from a given position."""
    layer, _ = make_layer(max_step=(0.1, np.inf))
    layer.reset(last_action=[0.0, 0.0])
    assert layer.filter(a(0.0625, 50.0)).tolist() == [0.0625, 50.0]
    with pytest.raises(SafetyStop, match="dim 0"):
        layer.filter(a(0.5, 50.0))
    layer.reset(last_action=[0.45, 50.0])  # the arm's measured position
    assert not layer.stopped
    assert layer.filter(a(0.5, -50.0)).tolist() == [0.5, -50.0]
    # Without a reference the first action after reset is not checked.
    layer.reset()
    assert layer.filter(a(9.0, 9.0)).tolist() == [9.0, 9.0]


def test_first_action_checked_against_initial_position() -> None:
    """last_action given at construction: the very first action is step-checked."""
    layer = SafetyLayer(SafetyConfig(max_step=0.2), last_action=np.zeros(2))
    with pytest.raises(SafetyStop, match="dim 0"):
        layer.filter(a(1.0, 0.0))


def test_step_is_measured_after_clipping() -> None:
    """What reaches the motors counts: a far target clipped to the limit is a small step."""
    layer, _ = make_layer(lower=(-1.0,), upper=(1.0,), max_step=0.3)
    layer.filter(a(0.9))
    assert layer.filter(a(25.0)).tolist() == [1.0]
    with pytest.raises(SafetyStop, match=r"1 -> 0.5"):
        layer.filter(a(0.5))


def test_dry_safe_action_and_nothing() -> None:
    """on_dry='safe-action' sends the configured action; 'nothing' sends nothing."""
    layer, _ = make_layer(on_dry="safe-action", safe_action=(0.0, 1.0))
    assert layer.filter(None).tolist() == [0.0, 1.0]
    assert layer.filter(a(0.5, 0.5)).tolist() == [0.5, 0.5]
    assert layer.filter(None).tolist() == [0.0, 1.0]
    nothing, _ = make_layer(on_dry="nothing")
    nothing.filter(a(1.0))
    assert nothing.filter(None) is None and nothing.num_dry_ticks == 1


def test_safe_action_is_step_checked() -> None:
    """A safe action far from the arm stops the robot rather than jump there."""
    layer, stops = make_layer(on_dry="safe-action", safe_action=(0.0,), max_step=0.1)
    layer.filter(a(1.0))
    with pytest.raises(SafetyStop, match="max_step"):
        layer.filter(None)
    assert len(stops) == 1


def test_bad_actions_stop() -> None:
    """NaN, inf, a wrong size or a non-numeric action stops the robot."""
    for bad, match in [
        (a(0.0, np.nan), r"NaN or inf at dimensions \[1\]"),
        (a(np.inf, 0.0), r"NaN or inf at dimensions \[0\]"),
        (a(0.0, 0.0, 0.0), "has 3 dimensions, expected 2"),
        (np.zeros((2, 2)), "1-D numeric array"),
        (np.array(["x", "y"]), "1-D numeric array"),
    ]:
        layer, stops = make_layer(upper=(1.0, 1.0))
        with pytest.raises(SafetyStop, match=match):
            layer.filter(bad)
        assert layer.stopped and len(stops) == 1
    # Without configured limits the size is that of the last action.
    layer, _ = make_layer()
    layer.filter(a(0.0, 0.0))
    with pytest.raises(SafetyStop, match="has 1 dimensions, expected 2"):
        layer.filter(a(0.0))


def test_estop_halts_until_reset() -> None:
    """estop (from any thread) refuses every later action; a second call changes nothing."""
    layer, stops = make_layer()
    layer.filter(a(0.1))
    thread = threading.Thread(target=layer.estop, kwargs={"reason": "operator pressed e-stop"})
    thread.start()
    thread.join()
    assert layer.stopped and layer.stop_reason == "operator pressed e-stop"
    with pytest.raises(SafetyStop, match="operator pressed e-stop"):
        layer.filter(a(0.1))
    layer.estop("again")
    assert len(stops) == 1 and layer.stop_reason == "operator pressed e-stop"
    layer.reset(last_action=[0.1])
    assert layer.filter(a(0.2)).tolist() == [pytest.approx(0.2)]


def test_reset_refuses_a_bad_reference() -> None:
    """A last_action of the wrong size or not finite raises ValueError and keeps the stop."""
    layer, _ = make_layer(upper=(1.0, 1.0))
    layer.estop()
    with pytest.raises(ValueError, match="last_action has 1 dimensions, expected 2"):
        layer.reset(last_action=[0.0])
    with pytest.raises(ValueError, match="NaN or inf"):
        layer.reset(last_action=[0.0, np.nan])
    assert layer.stopped


def test_config_checks_name_the_bad_value() -> None:
    """Inconsistent or unsafe configurations are refused at construction."""
    cases = [
        ({"lower": (1.0,), "upper": (0.0,)}, r"lower > upper at dimensions \[0\]"),
        ({"lower": (0.0, 0.0), "upper": (1.0,)}, "disagree on the action size"),
        ({"lower": (float("nan"),)}, "no NaN"),
        ({"lower": "abc"}, "sequence of numbers"),
        ({"max_step": 0.0}, "max_step must be > 0"),
        ({"max_step": (0.1, -1.0)}, "max_step must be > 0"),
        ({"on_dry": "coast"}, "hold, safe-action, nothing"),
        ({"on_dry": "safe-action"}, "safe_action is given if and only if"),
        ({"safe_action": (0.0,)}, "safe_action is given if and only if"),
        (
            {"on_dry": "safe-action", "safe_action": (2.0,), "upper": (1.0,)},
            "outside the limits",
        ),
        ({"on_dry": "safe-action", "safe_action": (float("inf"),)}, "must be finite"),
    ]
    for fields, match in cases:
        with pytest.raises(ValueError, match=match):
            SafetyConfig(**fields)


def test_config_is_frozen_and_normalised() -> None:
    """Lists become float tuples; the config is hashable and cannot be changed."""
    config = SafetyConfig(lower=[-1, -2], upper=np.array([1, 2]), max_step=[0.5, 0.5])
    assert config.lower == (-1.0, -2.0) and config.upper == (1.0, 2.0)
    assert config.max_step == (0.5, 0.5) and config.action_dim == 2
    assert SafetyConfig(max_step=1).max_step == 1.0 and SafetyConfig().action_dim is None
    hash(config)
    with pytest.raises(AttributeError):
        config.lower = None  # type: ignore[misc]
