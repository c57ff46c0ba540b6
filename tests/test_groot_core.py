"""The GR00T door without sockets: endpoints, tokens, encodings, sessions and the sweep."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import numpy as np
import pytest
from groot_client import groot_observation
from server_harness import make_mock, make_obs, make_reply

from armory.core.errors import ObservationError
from armory.engine.config import ServerConfig
from armory.engine.server_engine import Reply, ServerEngine
from armory.scheduling.registry import make_scheduler
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.groot_core import ActionCall, Answer, GrootDoorCore
from armory.transports.groot_protocol import UNAUTHORIZED, GrootProtocolError, GrootRequest

A, B = b"robot-a", b"robot-b"


def make_core(
    *, max_connections: int = 8, api_token: str | None = None, **door: Any
) -> GrootDoorCore:
    """A core over an engine that is never started (nothing here reaches a batch)."""
    engine = ServerEngine(
        make_mock(),
        make_scheduler("max-batch"),
        config=ServerConfig(max_connections=max_connections),
    )
    return GrootDoorCore(engine, GrootDoorConfig(**door), api_token=api_token)


def request(endpoint: str, data: Any = None, token: str | None = None) -> GrootRequest:
    return GrootRequest(endpoint=endpoint, data=data, api_token=token)


def action_request(encoding: str) -> GrootRequest:
    obs = groot_observation(make_obs(0), encoding)
    return request("get_action", {"observation": obs} if encoding == "n1.6" else obs)


def answer(core: GrootDoorCore, identity: bytes, req: GrootRequest, now_s: float = 0.0) -> Any:
    """The decoded reply of a request answered at once."""
    step = core.receive(identity, req, now_s)
    assert isinstance(step, Answer)
    return msgpack.unpackb(step.frame)


def ones_reply(core: GrootDoorCore) -> Reply:
    meta = core.engine.metadata
    return make_reply(np.ones((meta.action_horizon, meta.action_dim), np.float32), batch_size=3)


def test_ping_answers_without_opening_a_session() -> None:
    """ping is served to anyone and makes no robot."""
    core = make_core()
    assert answer(core, A, request("ping")) == {"status": "ok", "message": "Server is running"}
    assert len(core.robots) == 0


def test_a_wrong_or_missing_token_gets_upstreams_message_counted() -> None:
    """With a token set, every endpoint needs it; the refusal is upstream's exact text."""
    core = make_core(api_token="s3cret")
    for token in (None, "wrong"):
        with pytest.raises(GrootProtocolError) as caught:
            core.receive(A, request("ping", token=token), 0.0)
        assert msgpack.unpackb(core.refusal(caught.value)) == {"error": UNAUTHORIZED}
    assert core.engine.stats().num_errors == 2
    assert answer(core, A, request("ping", token="s3cret"))["status"] == "ok"


def test_kill_needs_the_operators_consent_and_a_server_to_stop() -> None:
    """kill is refused unless allow_kill is set and the socket side can stop the server."""
    with pytest.raises(GrootProtocolError, match=r"--groot\.allow-kill"):
        make_core().receive(A, request("kill"), 0.0)
    engine = make_core().engine
    stoppable = GrootDoorCore(engine, GrootDoorConfig(allow_kill=True))
    step = stoppable.receive(A, request("kill"), 0.0)
    assert isinstance(step, Answer) and step.kill
    unstoppable = GrootDoorCore(engine, GrootDoorConfig(allow_kill=True), can_stop_server=False)
    with pytest.raises(GrootProtocolError):
        unstoppable.receive(A, request("kill"), 0.0)


def test_an_unknown_endpoint_lists_the_valid_ones() -> None:
    core = make_core()
    with pytest.raises(
        GrootProtocolError, match="Unknown endpoint: 'fly'; valid: ping, get_action"
    ):
        core.receive(A, request("fly"), 0.0)


@pytest.mark.parametrize("encoding", ["n1.6", "n1.5"])
def test_get_action_maps_the_streams_and_answers_in_the_robots_form(encoding: str) -> None:
    """The engine is handed the policy's inputs; the reply frame is N1.6's [action, info]
    or N1.5's action map, and the engine counts it as sent."""
    core = make_core()
    step = core.receive(A, action_request(encoding), 0.0)
    assert isinstance(step, ActionCall) and step.encoding == encoding
    assert set(step.observation) >= {
        "observation/image",
        "observation/wrist_image",
        "observation/state",
    }
    decoded = msgpack.unpackb(core.action_reply(step, ones_reply(core), 1.0))
    if encoding == "n1.6":
        actions, info = decoded
        assert info["batch_size"] == 3 and set(actions) == {"joints"}
    else:
        assert set(decoded) == {"action.joints"}
    assert core.engine.stats().num_replies == 1


def test_an_observation_error_names_the_robots_streams() -> None:
    """The engine's error about a policy input comes back in the robot's stream names."""
    core = make_core()
    step = core.receive(A, action_request("n1.5"), 0.0)
    assert isinstance(step, ActionCall)
    error = step.in_robot_terms(ObservationError("'observation/image' has shape (1, 2)"))
    assert "video.front" in str(error)


def test_the_modality_config_follows_the_encoding_robots_use() -> None:
    """Under auto, a robot's config is in the form of its last get_action; a robot not
    heard from yet gets the form of the door's last get_action."""
    core = make_core()
    core.receive(A, action_request("n1.5"), 0.0)
    for identity in (A, B):
        configs = answer(core, identity, request("get_modality_config"))
        assert all(isinstance(c["as_json"], str) for c in configs.values())  # N1.5: JSON text


def test_reset_starts_the_robot_afresh() -> None:
    """reset closes the robot's session and opens a new one (an empty queue), keeping the
    encoding and streams the robot revealed."""
    core = make_core()
    first = core.receive(A, action_request("n1.5"), 0.0)
    assert isinstance(first, ActionCall)
    assert answer(core, A, request("reset")) == {"status": "ok", "message": "reset"}
    assert first.session.closed and len(core.robots) == 1
    core.receive(B, action_request("n1.6"), 0.5)  # the door's last encoding is now N1.6
    configs = answer(core, A, request("get_modality_config"))
    video = json.loads(configs["video"]["as_json"])  # N1.5's form, the robot's streams
    assert video["modality_keys"] == ["video.front", "video.wrist"]
    second = core.receive(A, action_request("n1.5"), 1.0)
    assert isinstance(second, ActionCall) and second.session is not first.session


def test_an_n16_reset_reveals_the_robots_encoding() -> None:
    """Only N1.6's client has reset, sent as {"options": ...}: a robot whose first request
    is that reset gets its config in N1.6 form although the door last heard N1.5; a reset
    of another shape reveals nothing (the door's last encoding answers)."""
    core = make_core()
    core.receive(B, action_request("n1.5"), 0.0)
    answer(core, b"robot-c", request("reset"))
    configs = answer(core, b"robot-c", request("get_modality_config"))
    assert isinstance(configs["video"]["as_json"], str)
    answer(core, A, request("reset", {"options": None}))
    assert isinstance(answer(core, A, request("get_modality_config"))["video"]["as_json"], dict)


def test_a_robot_unheard_of_past_the_session_timeout_is_forgotten() -> None:
    """ROUTER cannot see a peer leave: the sweep closes a session idle past the timeout."""
    core = make_core(session_timeout_s=30.0)
    call = core.receive(A, action_request("n1.6"), 0.0)
    core.receive(B, request("get_modality_config"), 20.0)
    assert isinstance(call, ActionCall)
    assert core.robots.sweep(25.0) == 0
    assert core.robots.sweep(30.5) == 1
    assert call.session.closed and A not in core.robots and B in core.robots


def test_robots_past_the_limit_are_refused_with_an_error_reply() -> None:
    """A new identity past --server.max-connections gets the limit's message, counted."""
    core = make_core(max_connections=1)
    core.receive(A, request("get_modality_config"), 0.0)
    with pytest.raises(Exception) as caught:
        core.receive(B, request("get_modality_config"), 0.0)
    reply = msgpack.unpackb(core.refusal(caught.value))
    assert "--server.max-connections" in reply["error"]
    assert core.engine.stats().num_errors == 1


def test_a_refused_request_counts_against_its_robots_row() -> None:
    """An error answered to a known robot shows on its /stats row, as on the other doors."""
    core = make_core()
    call = core.receive(A, action_request("n1.6"), 0.0)
    assert isinstance(call, ActionCall)
    with pytest.raises(GrootProtocolError) as caught:
        core.receive(A, request("no_such_endpoint"), 1.0)
    core.refusal(caught.value, A)
    rows = {row.robot: row for row in core.engine.stats().robots}
    assert rows[call.session.robot_name].num_errors == 1
    assert core.engine.stats().num_errors == 1
