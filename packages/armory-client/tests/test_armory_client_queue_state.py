"""RobotState: the queue state carried under Armory's reserved observation key."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from armory_client import ARMORY_KEY, WIRE_VERSION, RobotState, attach, detach, packb, unpackb


def make_state(**overrides: Any) -> RobotState:
    """A valid RobotState with every field set, `overrides` applied."""
    fields: dict[str, Any] = {
        "robot_id": "arm-3",
        "action_index": 120,
        "actions_left": 7,
        "chunk_start": 100,
        "control_hz": 30.0,
        "min_execution_horizon": 5,
        "max_execution_horizon": 25,
        "episode_id": 2,
        "observation_step": 9,
        "round_trip_s": 0.085,
        "weight": 2.0,
    }
    fields.update(overrides)
    return RobotState(**fields)


def test_wire_round_trip() -> None:
    """to_wire then from_wire gives back an equal state, also through the codec."""
    state = make_state()
    assert RobotState.from_wire(state.to_wire()) == state
    assert RobotState.from_wire(unpackb(packb(state.to_wire()))) == state


def test_wire_map_is_plain_and_versioned() -> None:
    """The wire map holds only str/int/float/bool/None values and the wire version."""
    wire = make_state(action_index=np.int64(4), control_hz=np.float32(10), chunk_start=None)
    wire_map = wire.to_wire()
    assert wire_map["version"] == WIRE_VERSION
    assert wire_map["action_index"] == 4 and type(wire_map["action_index"]) is int
    assert type(wire_map["control_hz"]) is float
    assert wire_map["chunk_start"] is None
    assert all(type(v) in (str, int, float, bool, type(None)) for v in wire_map.values())


def test_defaults_and_minimal_wire_map() -> None:
    """Optional fields take their defaults when absent from the wire map."""
    wire = {
        "robot_id": "base",
        "action_index": 0,
        "actions_left": 0,
        "chunk_start": None,
        "control_hz": 10,
        "min_execution_horizon": 1,
        "max_execution_horizon": 1,
    }
    state = RobotState.from_wire(wire)
    assert (state.episode_id, state.observation_step, state.weight) == (0, 0, 1.0)
    assert state.round_trip_s is None
    assert state.control_hz == 10.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("robot_id", ""),
        ("robot_id", 7),
        ("robot_id", "x" * 300),
        ("action_index", -1),
        ("action_index", 1.0),
        ("action_index", True),
        ("actions_left", -2),
        ("actions_left", "3"),
        ("chunk_start", -5),
        ("control_hz", 0.0),
        ("control_hz", -30.0),
        ("control_hz", math.inf),
        ("control_hz", math.nan),
        ("control_hz", "30"),
        ("min_execution_horizon", 0),
        ("max_execution_horizon", 0),
        ("episode_id", -1),
        ("observation_step", None),
        ("round_trip_s", -0.1),
        ("round_trip_s", math.nan),
        ("weight", 0.0),
        ("weight", False),
        ("pipelined", 1),
        ("pipelined", "yes"),
    ],
)
def test_bad_field_is_named(field: str, value: Any) -> None:
    """A bad value raises ValueError naming the field, on construction and from the wire."""
    with pytest.raises(ValueError, match=field):
        make_state(**{field: value})
    wire = make_state().to_wire()
    wire[field] = value
    with pytest.raises(ValueError, match=field):
        RobotState.from_wire(wire)


def test_horizons_must_be_ordered() -> None:
    """max_execution_horizon below min_execution_horizon is refused."""
    with pytest.raises(ValueError, match="max_execution_horizon"):
        make_state(min_execution_horizon=10, max_execution_horizon=5)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"speed": 3}, r"unknown fields \['speed'\]"),
        ({"version": 2}, "version 2"),
    ],
)
def test_from_wire_rejects_unknown_content(change: dict[str, Any], match: str) -> None:
    """Unknown fields and unknown versions are refused, naming them."""
    wire = {**make_state().to_wire(), **change}
    with pytest.raises(ValueError, match=match):
        RobotState.from_wire(wire)


def test_from_wire_names_missing_fields() -> None:
    """A wire map without a required field names it."""
    wire = make_state().to_wire()
    del wire["control_hz"], wire["chunk_start"]
    with pytest.raises(ValueError, match=r"\['chunk_start', 'control_hz'\]"):
        RobotState.from_wire(wire)


def test_from_wire_needs_a_map() -> None:
    """Anything but a map under the key is refused."""
    with pytest.raises(ValueError, match="must be a map"):
        RobotState.from_wire([1, 2])


def test_state_is_frozen() -> None:
    """RobotState cannot be changed after construction."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        make_state().actions_left = 3  # type: ignore[misc]


def test_attach_and_detach() -> None:
    """attach adds the key to a copy; detach splits it off again; inputs are untouched."""
    obs = {"state": np.zeros(3), "prompt": "wave"}
    state = make_state()
    sent = attach(obs, state)
    assert ARMORY_KEY == "__armory__"
    assert ARMORY_KEY not in obs and ARMORY_KEY in sent
    received = unpackb(packb(sent))
    rest, parsed = detach(received)
    assert parsed == state
    assert rest.keys() == obs.keys()
    assert ARMORY_KEY in received


def test_detach_without_key() -> None:
    """A plain openpi observation detaches to itself and None."""
    obs = {"state": 1}
    rest, parsed = detach(obs)
    assert rest == obs and rest is not obs
    assert parsed is None


def test_detach_rejects_bad_key_value() -> None:
    """A reserved key holding garbage raises ValueError rather than being dropped."""
    with pytest.raises(ValueError, match="must be a map"):
        detach({ARMORY_KEY: None})
