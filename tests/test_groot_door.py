"""The GR00T ZeroMQ door over real sockets on 127.0.0.1: both encodings, every endpoint,
errors that never wedge a socket, many robots sharing batches."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import msgpack
import numpy as np
import pytest
from groot_client import (
    GrootClient,
    groot_observation,
    n15_service_flow,
    n16_open_loop_flow,
    n16_rollout_flow,
)
from server_harness import armory_serve, expected_actions, make_mock, make_obs

from armory.engine.config import ServerConfig
from armory.serve import ArmoryServer, ServerThread
from armory.transports.groot_adapter import GrootLayout
from armory.transports.groot_config import GrootDoorConfig

ENCODINGS = ["n1.6", "n1.5"]


def npy_request(as_npy: bytes) -> dict:
    """A get_action request whose one video stream carries ``as_npy`` as its array."""
    array = {"__ndarray_class__": True, "as_npy": as_npy}
    return {"data": {"observation": {"video": {"a": array}}}}


@contextmanager
def groot_server(
    policy=None, *, openpi: bool = False, **door: object
) -> Iterator[tuple[ServerThread, int]]:
    """A server with the GR00T door on an ephemeral port (and openpi's if asked)."""
    config = GrootDoorConfig(port=0, **door)  # type: ignore[arg-type]
    killed = threading.Event()
    server = ArmoryServer(
        policy or make_mock(),
        ServerConfig(max_batch_size=4),
        port=0 if openpi else None,
        doors=[config.door("127.0.0.1", on_kill=killed.set)],
    )
    thread = ServerThread(server).start()
    thread.killed = killed  # type: ignore[attr-defined]
    try:
        yield thread, server.doors[0].port  # type: ignore[attr-defined]
    finally:
        thread.stop()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_endpoint_round_trips(encoding: str) -> None:
    """ping, get_modality_config, get_action (the mock's own chunk for the mapped
    observation), reset, and kill refused by default."""
    policy = make_mock()
    with groot_server(policy) as (_, port), GrootClient(port, encoding=encoding) as client:
        assert client.ping() == {"status": "ok", "message": "Server is running"}
        obs = make_obs(3, prompt="stack the cups")
        reply = client.get_action(groot_observation(obs, encoding, task="stack the cups"))
        want = expected_actions(policy, obs)
        if encoding == "n1.6":
            actions, info = reply
            np.testing.assert_array_equal(actions["joints"], want[None])
            assert info["policy"] == "mock" and info["batch_size"] == 1
        else:
            np.testing.assert_array_equal(reply["action.joints"], want)
        config = client.get_modality_config()
        as_json = "dict" if encoding == "n1.6" else "str"
        # The streams the robot sent, as its encoding's data configs name them.
        prefix = "" if encoding == "n1.6" else "{}."
        assert config["video"]["modality_keys"] == [
            prefix.format("video") + name for name in ("front", "wrist")
        ]
        assert config["state"]["modality_keys"] == [
            prefix.format("state") + name for name in ("arm", "gripper")
        ]
        assert config["action"]["modality_keys"] == [prefix.format("action") + "joints"]
        task = "task" if encoding == "n1.6" else "annotation.human.task_description"
        assert config["language"]["modality_keys"] == [task]
        assert config["action"]["delta_indices"] == list(range(10))
        assert all(c["as_json_type"] == as_json for c in config.values())
        assert client.reset() == {"status": "ok", "message": "reset"}
        assert "kill is disabled" in client.call("kill")["error"]
        assert client.ping()["status"] == "ok"


def test_kill_stops_the_server_when_allowed() -> None:
    with groot_server(allow_kill=True) as (thread, port), GrootClient(port) as client:
        assert client.call("kill") == {"status": "ok", "message": "Server is shutting down"}
        assert thread.killed.wait(5.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (b"\xc1garbage", "undecodable"),
        (msgpack.packb([1, 2]), "msgpack map"),
        (msgpack.packb({"endpoint": "fly"}), "Unknown endpoint: 'fly'"),
        (msgpack.packb({"endpoint": 7}), "'endpoint' must be a str"),
        (msgpack.packb({"endpoint": "get_action", "data": 3}), "needs a map"),
        (msgpack.packb(npy_request(b"x")), "not a plain .npy"),
    ],
)
def test_bad_frames_get_their_error_and_the_socket_keeps_working(frame: bytes, match: str) -> None:
    with groot_server() as (_, port), GrootClient(port) as client:
        reply = client.send_raw(frame)
        assert match in reply["error"]
        assert client.ping()["status"] == "ok"


def test_pickled_object_arrays_are_refused() -> None:
    """An .npy of dtype object (pickle inside) is refused, never loaded."""
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    frame = msgpack.packb(npy_request(buffer.getvalue()))
    with groot_server() as (_, port), GrootClient(port) as client:
        assert "not a plain .npy" in client.send_raw(frame)["error"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_wrong_shapes_name_the_stream(encoding: str) -> None:
    obs = groot_observation(make_obs(0), encoding)
    if encoding == "n1.6":
        obs["video"]["front"] = np.zeros((2, 1, 224, 224, 3), np.uint8)
        match = "batch dimension 2"
    else:
        obs["state.arm"] = np.zeros((1, 2, 3), np.float32)
        match = "state.arm"
    with groot_server() as (_, port), GrootClient(port, encoding=encoding) as client:
        assert match in client.get_action(obs)["error"]
        small = groot_observation(make_obs(0), encoding)
        small.pop("video" if encoding == "n1.6" else "video.wrist")
        assert "video streams" in client.get_action(small)["error"]
        assert client.ping()["status"] == "ok"


def test_tokens_are_checked() -> None:
    with groot_server(api_token="s3cret") as (_, port):
        with GrootClient(port) as anonymous:
            assert anonymous.ping() == {"error": "Unauthorized: Invalid API token"}
        with GrootClient(port, api_token="wrong") as wrong:
            assert wrong.ping() == {"error": "Unauthorized: Invalid API token"}
        with GrootClient(port, api_token="s3cret") as right:
            assert right.ping()["status"] == "ok"


def test_server_key_is_the_token_unless_one_is_set() -> None:
    """With the server's API key and no --groot.api-token, requests need the key as their
    api_token; a door's own token takes its place."""
    for door_token, accepted in [(None, "server-key"), ("door-token", "door-token")]:
        config = GrootDoorConfig(port=0, api_token=door_token)
        server = ArmoryServer(
            make_mock(), port=None, doors=[config.door("127.0.0.1", api_key="server-key")]
        )
        with ServerThread(server) as thread:
            port = thread.server.doors[0].port  # type: ignore[attr-defined]
            for token in (None, "wrong", *({"server-key", "door-token"} - {accepted})):
                with GrootClient(port, api_token=token) as refused:
                    assert refused.ping() == {"error": "Unauthorized: Invalid API token"}
            with GrootClient(port, api_token=accepted) as right:
                assert right.ping()["status"] == "ok"


def test_layout_maps_named_cameras_and_state_order() -> None:
    """Explicit camera pairs and state order: swapping the cameras changes the chunk."""
    policy = make_mock()
    layout = GrootLayout(
        cameras=("wrist=observation/image", "front=observation/wrist_image"),
        state=("arm", "gripper"),
    )
    obs = make_obs(5)
    swapped = dict(obs)
    swapped["observation/image"], swapped["observation/wrist_image"] = (
        obs["observation/wrist_image"],
        obs["observation/image"],
    )
    with groot_server(policy, layout=layout) as (_, port), GrootClient(port) as client:
        actions, _ = client.get_action(groot_observation(obs, "n1.6"))
    np.testing.assert_array_equal(actions["joints"][0], expected_actions(policy, swapped))


def test_modality_config_asked_first_speaks_the_layout_in_the_doors_encoding() -> None:
    """Asked before any get_action (upstream's own flow), the config lists the layout's
    names; N1.6 and N1.5 clients ask with the same bytes, so a robot not yet heard from
    gets the encoding of the door's last get_action (N1.6 before any), and
    --groot.encoding n1.5 answers N1.5 from the first request."""
    layout = GrootLayout(
        cameras=("front=observation/image", "wrist=observation/wrist_image"),
        state=("arm", "gripper"),
    )
    with groot_server(layout=layout) as (_, port):
        with GrootClient(port) as n16:
            config = n16.get_modality_config()
            assert config["video"]["as_json_type"] == "dict"
            assert config["video"]["modality_keys"] == ["front", "wrist"]
        # The first N1.5 robot of a door cannot decode it.
        with GrootClient(port, encoding="n1.5") as first, pytest.raises(TypeError):
            first.get_modality_config()
        with GrootClient(port, encoding="n1.5") as first:
            first.get_action(groot_observation(make_obs(1), "n1.5"))
        with GrootClient(port, encoding="n1.5") as second:
            config = second.get_modality_config()
        assert config["video"]["as_json_type"] == "str"
        assert config["video"]["modality_keys"] == ["video.front", "video.wrist"]
        assert config["state"]["modality_keys"] == ["state.arm", "state.gripper"]
    forced = groot_server(layout=layout, encoding="n1.5")
    with forced as (_, port), GrootClient(port, encoding="n1.5") as client:
        assert client.get_modality_config()["action"]["modality_keys"] == ["action.joints"]


def test_n15_call_order_builds_its_request_from_the_config() -> None:
    """N1.5's own flow (--groot.encoding n1.5): ask the modality config first, name every
    stream of the observation by its keys, read the action under its action key."""
    policy = make_mock()
    layout = GrootLayout(
        cameras=("front=observation/image", "wrist=observation/wrist_image"),
        state=("arm", "gripper"),
    )
    obs = make_obs(4, prompt="stack")
    values = groot_observation(obs, "n1.5", task="stack")
    forced = groot_server(policy, layout=layout, encoding="n1.5")
    with forced as (_, port), GrootClient(port, encoding="n1.5") as client:
        config = client.get_modality_config()
        keys = [
            key
            for group in ("video", "state", "language")
            for key in config[group]["modality_keys"]
        ]
        reply = client.get_action({key: values[key] for key in keys})
    (action_key,) = config["action"]["modality_keys"]
    np.testing.assert_array_equal(reply[action_key], expected_actions(policy, obs))


NAMED = GrootLayout(
    cameras=("front=observation/image", "wrist=observation/wrist_image"), state=("arm", "gripper")
)
"""A layout naming the streams of :func:`groot_observation`."""


def test_n16_flows_work_on_a_fresh_door_under_auto() -> None:
    """N1.6's open-loop evaluation (config first, observation built from its keys) and
    its rollout (reset, then get_action) against a door that has heard no robot yet."""
    policy = make_mock()
    with groot_server(policy, layout=NAMED) as (_, port):
        obs = make_obs(2, prompt="stack")
        with GrootClient(port) as client:
            actions, info = n16_open_loop_flow(client, groot_observation(obs, "n1.5", "stack"))
        np.testing.assert_array_equal(actions["joints"][0], expected_actions(policy, obs))
        assert info["policy"] == "mock"
        steps = [make_obs(3, step) for step in range(3)]
        with GrootClient(port) as client:
            chunks = n16_rollout_flow(client, [groot_observation(o, "n1.6") for o in steps])
        for chunk, step in zip(chunks, steps, strict=True):
            np.testing.assert_array_equal(chunk["joints"][0], expected_actions(policy, step))


def test_n15_flow_under_auto_needs_the_door_to_have_heard_n15() -> None:
    """N1.5's own flow asks for the config first, with the bytes N1.6's client sends and
    no reply both decode (docs/groot.md): on a fresh door, or one whose last robot spoke
    N1.6 (a get_action or a reset), its client cannot decode the N1.6 answer; once the
    door has heard an N1.5 get_action, and from the start with --groot.encoding n1.5,
    the flow runs."""
    policy = make_mock()
    obs = make_obs(6, prompt="stack")
    values = groot_observation(obs, "n1.5", "stack")
    with groot_server(policy, layout=NAMED) as (_, port):
        with GrootClient(port, encoding="n1.5") as fresh, pytest.raises(TypeError):
            n15_service_flow(fresh, values)
        with GrootClient(port, encoding="n1.5") as other:
            assert "action.joints" in other.get_action(values)  # an N1.5 robot acting first
        with GrootClient(port, encoding="n1.5") as client:
            reply = n15_service_flow(client, values)
        np.testing.assert_array_equal(reply["action.joints"], expected_actions(policy, obs))
        with GrootClient(port) as n16:
            n16.reset()  # an N1.6 robot starting its rollout
        with GrootClient(port, encoding="n1.5") as late, pytest.raises(TypeError):
            n15_service_flow(late, values)
    forced = groot_server(policy, layout=NAMED, encoding="n1.5")
    with forced as (_, port), GrootClient(port, encoding="n1.5") as client:
        reply = n15_service_flow(client, values)
    np.testing.assert_array_equal(reply["action.joints"], expected_actions(policy, obs))


def test_a_mixed_fleet_uses_the_n15_port_for_its_n15_robots() -> None:
    """--groot.n15-port opens a second door answering in N1.5's form: after an N1.6 robot
    ran its open-loop flow on --groot.port, an N1.5 robot runs its own flow (config
    first) on the N1.5 port, both robots batched by the one engine."""
    policy = make_mock()
    config = GrootDoorConfig(port=0, n15_port=0, layout=NAMED)
    server = ArmoryServer(policy, port=None, doors=config.doors("127.0.0.1"))
    obs = make_obs(7, prompt="stack")
    values = groot_observation(obs, "n1.5", "stack")
    with ServerThread(server) as thread:
        auto, n15 = thread.server.doors  # type: ignore[attr-defined]
        assert n15.describe().endswith(f":{n15.port} (N1.5 only)")
        with GrootClient(auto.port) as client:
            actions, _ = n16_open_loop_flow(client, values)
        with GrootClient(n15.port, encoding="n1.5") as client:
            reply = n15_service_flow(client, values)
        stats = thread.stats()
    want = expected_actions(policy, obs)
    np.testing.assert_array_equal(actions["joints"][0], want)
    np.testing.assert_array_equal(reply["action.joints"], want)
    assert stats.num_replies == 2 and stats.num_errors == 0


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_refused_input_is_named_by_its_stream(encoding: str) -> None:
    """An image of the wrong size is reported under the robot's stream name, with the
    policy input it feeds."""
    obs = make_obs(0)
    obs["observation/wrist_image"] = np.zeros((100, 100, 3), np.uint8)
    with groot_server() as (_, port), GrootClient(port, encoding=encoding) as client:
        error = client.get_action(groot_observation(obs, encoding))["error"]
    assert "'video.wrist' (policy input 'observation/wrist_image')" in error
    assert "(100, 100, 3)" in error


def test_many_robots_get_their_own_chunks_in_shared_batches() -> None:
    """Six GR00T robots (both encodings) at once: each gets the chunk of its own
    observation, and the server batches them together."""
    policy = make_mock()
    errors: list[BaseException] = []

    def robot(seed: int, port: int) -> None:
        encoding = ENCODINGS[seed % 2]
        try:
            with GrootClient(port, encoding=encoding) as client:
                for step in range(6):
                    obs = make_obs(seed, step)
                    reply = client.get_action(groot_observation(obs, encoding))
                    nested = encoding == "n1.6"
                    actions = reply[0]["joints"][0] if nested else reply["action.joints"]
                    np.testing.assert_array_equal(actions, expected_actions(policy, obs))
        except BaseException as exc:
            errors.append(exc)

    with groot_server(policy) as (thread, port):
        threads = [threading.Thread(target=robot, args=(i, port)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        stats = thread.stats()
    assert not errors, errors
    assert stats.num_replies == 36 and stats.num_errors == 0
    assert max(policy.batch_sizes) > 1


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="encoding"):
        GrootDoorConfig(encoding="n2")
    with pytest.raises(ValueError, match="n15-port must differ"):
        GrootDoorConfig(port=5555, n15_port=5555)
    with pytest.raises(ValueError, match=r"--groot\.n15-port must be in 0\.\.65535"):
        GrootDoorConfig(n15_port=70000)
    with pytest.raises(ValueError, match="video_name=input_key"):
        GrootLayout(cameras=("front",))


def test_armory_serve_opens_the_groot_door_and_a_remote_kill_stops_it() -> None:
    """`armory serve --port 0 --groot.port 0 --groot.allow-kill`: both doors announced,
    both serve, and GR00T's kill ends the process with status 0."""
    from armory_client import PolicyClient

    args = ["--port", "0", "--groot.port", "0", "--groot.allow-kill"]
    args += ["policy:mock", "--policy.latency-profile", "linear"]
    with armory_serve(*args, announce_lines=3) as (proc, lines):
        assert "serving policy mock" in lines[0], lines
        openpi_uri = lines[1].split(" on ", 1)[1].split(" ", 1)[0]
        assert lines[2].startswith("armory: GR00T ZeroMQ on tcp://127.0.0.1:"), lines
        groot_port = int(lines[2].rsplit(":", 1)[1])
        with PolicyClient(openpi_uri) as openpi:
            assert openpi.infer(make_obs(1))["actions"].shape == (10, 7)
        with GrootClient(groot_port) as client:
            actions, _ = client.get_action(groot_observation(make_obs(2), "n1.6"))
            assert actions["joints"].shape == (1, 10, 7)
            assert client.call("kill")["status"] == "ok"
        assert proc.wait(10) == 0
