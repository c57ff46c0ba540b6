"""Request-mode decisions, the round-trip estimate, reply parsing and the runtime config."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from armory_client import (
    REQUEST_MODES,
    ChunkFraction,
    Directed,
    EveryTick,
    ProtocolError,
    ReplyState,
    RoundTripEstimate,
    RuntimeConfig,
    SendState,
    Threshold,
    make_request_mode,
    parse_reply,
)


def make_state(**overrides) -> SendState:
    """A robot 8 actions per second, 4 actions into the chunk started at 10, 4 left."""
    fields = {
        "action_index": 14,
        "actions_left": 4,
        "chunk_start": 10,
        "control_hz": 8.0,
        "min_execution_horizon": 2,
        "in_flight": False,
        "round_trip_s": 0.25,
        "next_request_index": None,
    }
    return SendState(**{**fields, **overrides})


def test_registry_names_and_error_lists_them() -> None:
    """make_request_mode builds each mode by name; an unknown name lists every valid one."""
    assert list(REQUEST_MODES) == ["every-tick", "threshold", "directed", "chunk-fraction"]
    assert isinstance(make_request_mode("every-tick"), EveryTick)
    assert make_request_mode("threshold", margin_s=0.1) == Threshold(margin_s=0.1)
    assert make_request_mode("directed") == Directed()
    assert make_request_mode("chunk-fraction", chunk_size_threshold=0.3) == ChunkFraction(
        chunk_size_threshold=0.3
    )
    with pytest.raises(ValueError, match="every-tick, threshold, directed, chunk-fraction"):
        make_request_mode("eager")
    with pytest.raises(ValueError, match="margin_s"):
        make_request_mode("threshold", margin_s=-1.0)
    with pytest.raises(ValueError, match="chunk_size_threshold"):
        make_request_mode("chunk-fraction", chunk_size_threshold=1.5)


def test_chunk_fraction_sends_every_tick_while_the_queue_is_short() -> None:
    """chunk-fraction sends, in flight or not, while actions_left <= fraction x chunk (the
    boundary included: 4 of a chunk of 8 at one half), and not above it; before the first
    chunk and with an empty queue always; never before min horizon into a chunk."""
    mode = ChunkFraction(chunk_size_threshold=0.5)
    assert mode.streams and EveryTick.streams and not Threshold.streams
    assert mode.should_send(make_state(actions_left=4, max_execution_horizon=8))
    assert mode.should_send(make_state(actions_left=4, max_execution_horizon=8, in_flight=True))
    assert not mode.should_send(make_state(actions_left=5, max_execution_horizon=8))
    assert mode.should_send(
        make_state(chunk_start=None, actions_left=0, action_index=0, max_execution_horizon=8)
    )
    assert ChunkFraction(chunk_size_threshold=0.0).should_send(
        make_state(actions_left=0, max_execution_horizon=8)
    )
    assert not ChunkFraction(chunk_size_threshold=0.0).should_send(
        make_state(actions_left=1, max_execution_horizon=8)
    )
    # One action into the chunk started at 10, min horizon 2: the server could not serve it.
    early = make_state(action_index=11, actions_left=3, max_execution_horizon=8)
    assert not mode.should_send(early)


def test_every_tick_always_wants_to_send() -> None:
    """every-tick wants every observation, in flight or not (the newest then waits)."""
    mode = EveryTick()
    assert mode.should_send(make_state())
    assert mode.should_send(make_state(in_flight=True, actions_left=100))


def test_threshold_boundary_is_exact() -> None:
    """Send iff actions_left / control_hz <= round trip + margin: 4/8 s <= 0.25 + 0.25."""
    mode = Threshold(margin_s=0.25)
    assert mode.should_send(make_state(actions_left=4))
    assert not mode.should_send(make_state(actions_left=5))
    assert Threshold(margin_s=0.0).should_send(make_state(actions_left=2))
    assert not Threshold(margin_s=0.0).should_send(make_state(actions_left=3))


def test_threshold_waits_for_reply_and_min_horizon() -> None:
    """threshold never sends with a request in flight, nor before min horizon into the chunk."""
    mode = Threshold(margin_s=0.25)
    assert not mode.should_send(make_state(in_flight=True, actions_left=0))
    assert not mode.should_send(make_state(action_index=11, actions_left=1))
    assert mode.should_send(make_state(action_index=12, actions_left=1))


def test_threshold_empty_queue_asks_even_before_min_horizon() -> None:
    """A queue that ran dry short of min horizon (a chunk shorter than it) asks anyway:
    waiting could never get the robot further into its chunk."""
    mode = Threshold(margin_s=0.0)
    assert mode.should_send(make_state(action_index=11, actions_left=0))
    assert not mode.should_send(make_state(action_index=11, actions_left=0, in_flight=True))


def test_threshold_sends_at_once_without_chunk_or_round_trip() -> None:
    """Before the first chunk, or before any round trip is measured, send now."""
    mode = Threshold()
    assert mode.should_send(make_state(chunk_start=None, action_index=0, actions_left=0))
    assert mode.should_send(make_state(round_trip_s=None, actions_left=100))


def test_directed_sends_at_the_named_index() -> None:
    """directed sends once the action index reaches next_request_index, not before."""
    mode = Directed()
    assert not mode.should_send(make_state(next_request_index=15, actions_left=1))
    assert mode.should_send(make_state(next_request_index=14, actions_left=1))
    assert mode.should_send(make_state(next_request_index=3, actions_left=1))
    assert not mode.should_send(make_state(next_request_index=3, in_flight=True))


def test_directed_ignores_threshold_when_directed() -> None:
    """With an index named, a queue about to run dry does not trigger a send early..."""
    assert not Directed().should_send(make_state(next_request_index=16, actions_left=1))


def test_directed_sends_on_empty_queue_past_named_index() -> None:
    """...but an index beyond the queue's end cannot be reached: an empty queue sends."""
    assert Directed().should_send(make_state(next_request_index=40, actions_left=0))


def test_directed_falls_back_to_threshold() -> None:
    """Without next_request_index (e.g. a plain openpi server) directed is threshold."""
    mode = Directed(margin_s=0.25)
    threshold = Threshold(margin_s=0.25)
    for left in range(8):
        for index in (11, 12, 14):
            state = make_state(actions_left=left, action_index=index)
            assert mode.should_send(state) == threshold.should_send(state)
    assert mode.should_send(make_state(chunk_start=None, action_index=0, actions_left=0))


def test_round_trip_estimate_is_an_ema() -> None:
    """The first sample is taken as is, then each moves the estimate by 1/4 of the gap."""
    estimate = RoundTripEstimate()
    assert estimate.value_s is None
    assert estimate.update(1.0) == 1.0
    assert estimate.update(2.0) == 1.25
    with pytest.raises(ValueError, match="smoothing"):
        RoundTripEstimate(smoothing=0.0)


@pytest.mark.parametrize("ticks", [0.0, -1.0, float("nan"), float("inf")])
def test_defer_after_ticks_must_be_positive_and_finite(ticks: float) -> None:
    with pytest.raises(ValueError, match="defer_after_ticks"):
        RuntimeConfig(
            robot_id="r", control_hz=10.0, max_execution_horizon=5, defer_after_ticks=ticks
        )


def make_actions(start: int) -> np.ndarray:
    return np.arange(start, start + 5, dtype=np.float32)[:, None]


def test_parse_plain_openpi_reply_uses_sent_index() -> None:
    """A reply without __armory__ starts at the index the observation was sent with."""
    actions, state = parse_reply({"actions": make_actions(7), "server_timing": {}}, sent_index=7)
    assert state == ReplyState(chunk_start=7, next_request_index=None)
    assert actions[0, 0] == 7


def test_parse_armory_reply() -> None:
    """An Armory reply gives chunk_start and next_request_index; unknown keys are ignored."""
    reply = {
        "actions": make_actions(7),
        "__armory__": {"version": 1, "chunk_start": 7, "next_request_index": 12, "x": 0},
    }
    assert parse_reply(reply, sent_index=7)[1] == ReplyState(7, 12)
    wire = ReplyState(3, None).to_wire()
    assert wire == {"version": 1, "chunk_start": 3, "next_request_index": None, "deferred": False}
    assert ReplyState.from_wire(wire) == ReplyState(3)


def test_parse_deferred_reply_carries_no_chunk() -> None:
    """A deferred reply (every-tick: no batch took the observation in time) may have empty
    actions; it still names the index it answers."""
    reply = {
        "actions": np.zeros((0, 7), np.float32),
        "__armory__": {"version": 1, "chunk_start": 7, "deferred": True},
    }
    assert parse_reply(reply, sent_index=7)[1] == ReplyState(7, deferred=True)
    with pytest.raises(ProtocolError, match="chunk_start"):
        parse_reply(reply, sent_index=8)
    with pytest.raises(ValueError, match="deferred"):
        ReplyState(7, deferred=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        ({"server_timing": {}}, "lacks an 'actions'"),
        ({"actions": np.zeros(5, np.float32)}, "2-D"),
        ({"actions": np.zeros((0, 2), np.float32)}, "2-D"),
        ({"actions": np.array([["a"]])}, "numeric"),
        ({"actions": make_actions(7), "__armory__": {"version": 2, "chunk_start": 7}}, "version"),
        ({"actions": make_actions(7), "__armory__": {"version": 1}}, "chunk_start"),
        ({"actions": make_actions(7), "__armory__": {"chunk_start": 6}}, "is not the action"),
        ({"actions": make_actions(7), "__armory__": {"chunk_start": -1}}, ">= 0"),
        ({"actions": make_actions(7), "__armory__": [7]}, "must be a map"),
        (
            {
                "actions": make_actions(7),
                "__armory__": {"chunk_start": 7, "next_request_index": "9"},
            },
            "next_request_index",
        ),
    ],
)
def test_parse_reply_rejects_bad_replies(reply, match) -> None:
    """Malformed replies and a chunk start other than the sent index raise ProtocolError."""
    with pytest.raises(ProtocolError, match=match):
        parse_reply(reply, sent_index=7)


def test_runtime_config_checks_fields() -> None:
    """RuntimeConfig names a bad field or an unknown mode (listing valid ones)."""
    config = RuntimeConfig(robot_id="r0", control_hz=50.0, max_execution_horizon=10)
    assert config.request_mode == "directed"
    with pytest.raises(ValueError, match="every-tick, threshold, directed"):
        dataclasses.replace(config, request_mode="often")
    with pytest.raises(ValueError, match="control_hz"):
        dataclasses.replace(config, control_hz=0.0)
    with pytest.raises(ValueError, match="min_execution_horizon"):
        dataclasses.replace(config, min_execution_horizon=11)
    with pytest.raises(ValueError, match="duration_s"):
        dataclasses.replace(config, duration_s=-1.0)
    with pytest.raises(ValueError, match="robot_id"):
        dataclasses.replace(config, robot_id="")
