"""The openpi wire and the HTTP side as pure functions: no sockets."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from http import HTTPStatus

import msgpack
import numpy as np
import pytest
import server_harness
from armory_client import ARMORY_KEY, packb, unpackb

from armory.core.errors import DecodeError
from armory.engine.config import ServerConfig
from armory.engine.server_engine import Reply
from armory.policies.base import PolicyMetadata
from armory.policies.mock import MockPolicyConfig
from armory.transports import http
from armory.transports.openpi_protocol import decode_request, metadata_map, reply_map

CONFIG = MockPolicyConfig()


def make_reply(*, is_armory: bool, prev_total_s: float | None = None) -> Reply:
    return server_harness.make_reply(
        np.arange(70, dtype=np.float32).reshape(10, 7),
        chunk_start=40,
        next_request_index=47 if is_armory else None,
        is_armory=is_armory,
        batch_size=3,
        wait_s=0.002,
        forward_s=0.030,
        policy_s=0.029,
        prev_total_s=prev_total_s,
    )


def test_plain_reply_has_exactly_openpis_keys() -> None:
    """A plain client's reply: actions, server_timing (infer_ms, queue_ms), policy_timing."""
    decoded = unpackb(packb(reply_map(make_reply(is_armory=False))))
    assert set(decoded) == {"actions", "server_timing", "policy_timing"}
    np.testing.assert_array_equal(decoded["actions"], np.arange(70).reshape(10, 7))
    assert decoded["actions"].dtype == np.float32
    assert decoded["server_timing"] == pytest.approx({"infer_ms": 30.0, "queue_ms": 2.0})
    assert decoded["policy_timing"] == pytest.approx({"infer_ms": 29.0})


def test_second_reply_carries_prev_total_ms() -> None:
    """From the second reply on, server_timing holds the previous request's total."""
    decoded = unpackb(packb(reply_map(make_reply(is_armory=False, prev_total_s=0.05))))
    assert decoded["server_timing"]["prev_total_ms"] == pytest.approx(50.0)


def test_armory_reply_adds_the_versioned_armory_map() -> None:
    """An Armory reply adds __armory__ = {version, chunk_start, next_request_index, deferred}."""
    decoded = unpackb(packb(reply_map(make_reply(is_armory=True))))
    assert decoded[ARMORY_KEY] == {
        "version": 1,
        "chunk_start": 40,
        "next_request_index": 47,
        "deferred": False,
    }


def test_actions_use_openpis_bin_keyed_ndarray_map() -> None:
    """The actions array goes out as openpi's map with bin keys, readable by plain msgpack."""
    raw = msgpack.unpackb(packb(reply_map(make_reply(is_armory=False))), raw=False)
    actions = raw["actions"]
    assert actions[b"__ndarray__"] is True
    assert actions[b"dtype"] == "<f4" and actions[b"shape"] == [10, 7]
    assert len(actions[b"data"]) == 70 * 4


def test_decode_request_round_trips_an_observation() -> None:
    """A packed observation decodes to the same keys and arrays (read-only views)."""
    obs = {"observation/state": np.ones(8, np.float32), "prompt": "go", ARMORY_KEY: {"v": 1}}
    decoded = decode_request(packb(obs))
    assert set(decoded) == set(obs)
    assert not decoded["observation/state"].flags.writeable


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ("text", "expected a binary frame"),
        (b"\xc1", "cannot decode the observation"),
        (packb([1, 2]), "must be a msgpack map, got list"),
        (
            msgpack.packb(
                {"a": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "<c8", b"shape": [1]}},
                use_bin_type=True,
            ),
            r"dtype '<c8' \(complex\) is not allowed",
        ),
    ],
)
def test_decode_request_refuses_non_observations(frame: bytes | str, message: str) -> None:
    """Text frames, malformed msgpack and non-maps are DecodeErrors with a clear message."""
    with pytest.raises(DecodeError, match=message):
        decode_request(frame)


def test_metadata_declares_the_policy_and_the_server() -> None:
    """The metadata map: policy name, horizon, dimension, inputs, and Armory's description."""
    meta = PolicyMetadata(
        name="mock",
        action_horizon=10,
        action_dim=7,
        inputs=CONFIG.inputs(),
        extra={"reset_pose": [0.0, 1.0]},
    )
    config = ServerConfig(max_batch_size=8, default_control_hz=15.0)
    data = unpackb(packb(metadata_map(meta, config, scheduler="max-batch")))
    assert data["reset_pose"] == [0.0, 1.0]
    assert data["inputs"]["observation/state"] == {
        "shape": [8],
        "dtype": "float32",
        "required": True,
    }
    assert data["armory"]["max_batch_size"] == 8
    assert data["armory"]["scheduler"] == "max-batch"
    assert data["armory"]["plain_client_defaults"] == {
        "control_hz": 15.0,
        "min_execution_horizon": 1,
        "max_execution_horizon": 10,
        "link_s": 0.002,
    }


# ---- HTTP -----------------------------------------------------------------


def test_api_key_check() -> None:
    """Only 'Api-Key <key>' passes; without a configured key everything passes."""
    assert http.api_key_ok("Api-Key abc", "abc")
    assert not http.api_key_ok("Api-Key abd", "abc")
    assert not http.api_key_ok("Bearer abc", "abc")
    assert not http.api_key_ok(None, "abc")
    assert not http.api_key_ok("Api-Key ábc", "abc")
    assert http.api_key_ok(None, None)


def test_route_moves_a_named_robot_only_where_moves_are_open() -> None:
    """``/move?robot=NAME`` (a cluster replica's) takes the move or answers 404 for a robot
    not connected here, 400 naming a bad query, 401 without the key; a server that is no
    cluster replica has no such page (the request goes on to the WebSocket handshake)."""
    asked: list[str] = []

    def move_robot(name: str) -> bool:
        asked.append(name)
        return name == "arm-1"

    def route(path: str, header: str | None = "Api-Key k") -> http.HttpAnswer | None:
        answer = http.route(path, header, api_key="k", stats=dict, move_robot=move_robot)
        assert not isinstance(answer, Awaitable)
        return answer

    moved = route("/move?robot=arm-1")
    assert moved is not None and moved.status == HTTPStatus.OK and "arm-1" in moved.body
    absent = route("/move?robot=arm-2")
    assert absent is not None and absent.status == HTTPStatus.NOT_FOUND
    assert "'arm-2'" in absent.body
    for bad in ("/move", "/move?robot=", "/move?robot=a&robot=b", "/move?robot=" + "x" * 257):
        refused = route(bad)
        assert refused is not None and refused.status == HTTPStatus.BAD_REQUEST
        assert "robot=NAME" in refused.body
    many = route("/move?" + "&".join(f"robot{i}=x" for i in range(10)))
    assert many is not None and many.status == HTTPStatus.BAD_REQUEST
    assert many.body.startswith("bad query")
    denied = route("/move?robot=arm-1", None)
    assert denied is not None and denied.status == HTTPStatus.UNAUTHORIZED
    assert asked == ["arm-1", "arm-2"]
    assert http.route("/move?robot=arm-1", None, api_key=None, stats=dict) is None


def test_route_health_stats_and_websocket() -> None:
    """/healthz is always OK; with a key, other paths need it; /stats is JSON; / upgrades."""

    def stats() -> dict[str, int]:
        return {"num_sessions": 2}

    def route(path: str, header: str | None) -> http.HttpAnswer | None:
        return http.route(path, header, api_key="k", stats=stats)

    assert route("/healthz", None) == http.HttpAnswer(HTTPStatus.OK, "OK\n")
    assert route("/healthz?probe=1", None) == http.HttpAnswer(HTTPStatus.OK, "OK\n")
    denied = route("/", None)
    assert denied is not None and denied.status == HTTPStatus.UNAUTHORIZED
    assert route("/", "Api-Key k") is None
    answer = route("/stats", "Api-Key k")
    assert answer is not None and answer.content_type == "application/json"
    assert json.loads(answer.body) == {"num_sessions": 2}
