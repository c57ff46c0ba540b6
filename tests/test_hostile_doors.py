"""Hostile input at each front door, over real sockets on 127.0.0.1: the bad robot gets a
clear error, the server keeps answering, nobody else notices."""

from __future__ import annotations

import asyncio
import gc
import pickle
import threading
import time
import types
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import msgpack
import numpy as np
import pytest
import zmq
from armory_client import CodecError
from armory_client.wire.codec import max_items, max_maps, packb, unpackb
from groot_client import GrootClient, groot_observation
from lerobot_client.wire import (
    AsyncInferenceClient,
    TimedObservation,
    instructions,
    raw_observation,
)
from server_harness import make_mock, make_obs, running_server
from test_lerobot_door import (
    CAMERAS,
    FEATURES,
    JOINTS,
    door_port,
    fetch,
    lerobot_server,
    start_robot,
    upstream_classes,  # noqa: F401  (autouse fixture)
)
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from armory.core.errors import MAX_MESSAGE_CHARS, PolicyError, public_text
from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.serve import ArmoryServer, ServerThread
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.groot_protocol import encode_reply
from armory.transports.lerobot_grpc import LeRobotDoorConfig
from armory.transports.lerobot_protocol import (
    MAX_CONTROL_HZ,
    QueueEstimator,
    decode_actions,
    decode_instructions,
)
from armory.transports.lerobot_protocol import TimedObservation as ReadObservation
from armory.transports.off_loop import OFF_LOOP_BYTES, decode_off_loop
from armory.transports.safe_unpickle import MAX_OPCODES, PickleRefused, safe_loads

# ---- LeRobot ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jump", "words"), [(10**6, "timestep jumped"), (2**62, "timestep must be in")]
)
def test_a_lerobot_timestep_jump_is_refused_and_the_server_keeps_serving(
    jump: int, words: str
) -> None:
    """Observation at timestep 0 (must_go), its chunk, then one at a timestep no robot
    reaches in that time: INVALID_ARGUMENT naming the jump; the same robot and another
    one are served at once afterwards (the jump once froze the whole server)."""
    with (
        lerobot_server() as (thread, _),
        AsyncInferenceClient(door_port(thread), timeout_s=5.0) as bad,
        AsyncInferenceClient(door_port(thread), timeout_s=5.0) as good,
    ):
        start_robot(bad)
        start_robot(good)
        raw = raw_observation(1, JOINTS, CAMERAS)
        bad.send_observation(TimedObservation(100.0, 0, raw, must_go=True))
        fetch(bad)
        with pytest.raises(grpc.RpcError) as refused:
            bad.send_observation(TimedObservation(100.1, jump, raw))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert words in refused.value.details()
        started = time.monotonic()
        bad.send_observation(TimedObservation(100.2, 3, raw, must_go=True))
        good.send_observation(TimedObservation(5.0, 0, raw, must_go=True))
        assert decode_actions(fetch(good))
        assert decode_actions(fetch(bad))[0].timestep == 3
        assert time.monotonic() - started < 3.0


def _bits(value: int) -> str:
    return f"{value.bit_length()}bits"


@pytest.mark.parametrize("timestep", [2**53, 2**64, 10**5000], ids=_bits)
def test_a_lerobot_timestep_out_of_range_gets_a_clear_status(timestep: int) -> None:
    """Timesteps at or past 2**53 (even 10**5000) are INVALID_ARGUMENT naming the field,
    never gRPC's UNKNOWN."""
    with lerobot_server() as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        start_robot(client)
        raw = raw_observation(1, JOINTS, CAMERAS)
        with pytest.raises(grpc.RpcError) as refused:
            client.send_observation(TimedObservation(1.0, timestep, raw, must_go=True))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "TimedObservation.timestep must be in" in refused.value.details()


@pytest.mark.parametrize("actions_per_chunk", [0, 65_537, 10**5000], ids=_bits)
def test_lerobot_actions_per_chunk_is_bounded(actions_per_chunk: int) -> None:
    """actions_per_chunk outside [1, 65536] is refused as the instructions arrive."""
    with lerobot_server() as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_instructions(instructions(FEATURES, actions_per_chunk=actions_per_chunk))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "actions_per_chunk must be in [1, 65536]" in refused.value.details()
    assert decode_instructions(instructions(FEATURES, actions_per_chunk=65_536))


def test_refused_lerobot_calls_leave_nothing_behind() -> None:
    """grpc.aio keeps an aborted call's exception where the garbage collector cannot
    see it: the door lets go of its frames (payload included), so refusals by the
    thousand do not grow the server; a non-finite joint is refused by name."""
    with lerobot_server() as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        start_robot(client)
        raw = raw_observation(1, JOINTS, CAMERAS)
        for value in (float("nan"), float("inf"), 1e308, 10**40):
            with pytest.raises(grpc.RpcError) as refused:
                client.send_observation(TimedObservation(1.0, 0, {**raw, JOINTS[0]: value}))
            assert f"joint {JOINTS[0]!r}: expected a finite number" in refused.value.details()
        time.sleep(0.2)
        gc.collect()
        frames = [
            o
            for o in gc.get_objects()
            if isinstance(o, types.FrameType) and o.f_code.co_name == "_observations"
        ]
        assert frames == []


def test_the_lerobot_rate_estimate_is_bounded() -> None:
    """Timestamps a microsecond apart with a large (allowed) step put the rate at the
    cap, never above it; a refused jump changes nothing."""
    estimator = QueueEstimator(default_control_hz=30.0, chunk_size_threshold=0.5, smoothing=1.0)
    estimator.observe(ReadObservation(0.0, 0, {}, must_go=True), received_s=0.0)
    estimator.observe(ReadObservation(0.002, 900, {}, must_go=False), received_s=0.001)
    assert estimator.control_hz == MAX_CONTROL_HZ
    with pytest.raises(ValueError, match="timestep jumped from 900"):
        estimator.observe(ReadObservation(0.004, 10**6, {}, must_go=False), received_s=0.002)
    assert estimator.num_observations == 2
    estimator.observe(ReadObservation(10.002, 1000, {}, must_go=False), received_s=10.0)
    assert estimator.control_hz == pytest.approx(10.0)


def test_the_unpickler_scan_is_bounded_by_an_opcode_budget() -> None:
    """A payload of millions of trivial opcodes is refused after the budget, quickly."""
    payload = b"\x80\x02" + b"N0" * (2 * MAX_OPCODES) + b"N."
    started = time.monotonic()
    with pytest.raises(PickleRefused, match=f"more than {MAX_OPCODES} opcodes"):
        safe_loads(payload, {})
    assert time.monotonic() - started < 1.0
    assert safe_loads(pickle.dumps([1, 2.0, "x"]), {}) == [1, 2.0, "x"]


# ---- error texts -----------------------------------------------------------------


def test_error_texts_carry_no_heap_address_and_are_bounded() -> None:
    """Addresses in a library's message are cut out; a long text is cut to the bound."""
    text = "cannot read <_io.BytesIO object at 0x7f3a2b1c0d90> as a pickle"
    assert public_text(text) == "cannot read <_io.BytesIO object> as a pickle"
    assert "0x" not in str(PolicyError(f"the policy failed ({text})"))
    assert len(public_text("x" * 10**6)) == MAX_MESSAGE_CHARS


# ---- GR00T -----------------------------------------------------------------------


def test_a_groot_frame_over_the_limit_gets_an_error_reply() -> None:
    """A frame over --server.max-message-bytes is answered with an error naming the
    limit (the REQ socket is not left waiting), and the socket keeps working."""
    server = ArmoryServer(
        make_mock(),
        ServerConfig(max_message_bytes=4096),
        port=None,
        doors=[GrootDoorConfig(port=0).door("127.0.0.1")],
    )
    with ServerThread(server) as thread, GrootClient(server.doors[0].port) as client:
        reply = client.send_raw(msgpack.packb({"endpoint": "ping", "pad": b"x" * 5000}))
        assert "exceeds the limit of 4096 bytes" in reply["error"]
        assert client.ping()["status"] == "ok"
        assert thread.stats().num_errors == 1


def test_the_groot_door_refuses_robots_past_the_limit() -> None:
    """With --server.max-connections 1, a second REQ socket gets an error naming the
    option (its socket still gets its one reply); the first keeps being served."""
    server = ArmoryServer(
        make_mock(),
        ServerConfig(max_connections=1),
        port=None,
        doors=[GrootDoorConfig(port=0).door("127.0.0.1")],
    )
    with (
        ServerThread(server),
        GrootClient(server.doors[0].port) as first,
        GrootClient(server.doors[0].port) as second,
    ):
        assert first.get_modality_config()
        assert "--server.max-connections" in second.reset()["error"]
        assert first.get_modality_config()


def test_a_groot_request_flood_gets_busy_replies_not_unbounded_work() -> None:
    """A DEALER socket (not REQ: it need not wait for replies) sends a slow get_action,
    then 20 pings: with --server.max-connections 1 request in progress, each ping gets
    an error reply at once instead of a task of its own; every request gets exactly one
    reply, and the get_action its chunk."""
    policy = make_mock(linear=LinearProfileConfig(intercept_s=0.3, slope_s=0.0))
    server = ArmoryServer(
        policy,
        ServerConfig(max_connections=1),
        port=None,
        doors=[GrootDoorConfig(port=0).door("127.0.0.1")],
    )
    context = zmq.Context()
    with ServerThread(server):
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RCVTIMEO, 5000)
        dealer.connect(f"tcp://127.0.0.1:{server.doors[0].port}")
        observation = groot_observation(make_obs(0), "n1.6")
        request = {"endpoint": "get_action", "data": {"observation": observation}}
        dealer.send_multipart([b"", encode_reply(request)])
        for _ in range(20):
            dealer.send_multipart([b"", msgpack.packb({"endpoint": "ping"})])
        replies = [msgpack.unpackb(dealer.recv_multipart()[1]) for _ in range(21)]
        dealer.close()
    context.term()
    busy = [r for r in replies if "--server.max-connections" in str(r)]
    assert len(busy) == 20
    assert any(isinstance(r, list) for r in replies)  # [action, info]


def test_the_lerobot_door_refuses_robots_past_the_limit() -> None:
    """With --server.max-connections 1, a second robot (another channel) is refused with
    RESOURCE_EXHAUSTED naming the option; the first is served."""
    server = ArmoryServer(
        make_mock(),
        ServerConfig(max_connections=1),
        port=None,
        doors=[
            LeRobotDoorConfig(port=0, allow_unsafe_pickle_on_untrusted_networks=True).door(
                "127.0.0.1"
            )
        ],
    )
    with (
        ServerThread(server),
        AsyncInferenceClient(server.doors[0].port) as first,
        AsyncInferenceClient(server.doors[0].port) as second,
    ):
        first.ready()
        with pytest.raises(grpc.RpcError) as refused:
            second.ready()
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--server.max-connections" in refused.value.details()
        first.ready()


def test_the_lerobot_door_bounds_concurrent_calls() -> None:
    """--server.max-connections 1 allows two calls at once (a robot's SendObservations
    and GetActions); a third concurrent call, even of the same robot, gets
    RESOURCE_EXHAUSTED."""
    server = ArmoryServer(
        make_mock(),
        ServerConfig(max_connections=1),
        port=None,
        doors=[
            LeRobotDoorConfig(
                port=0, allow_unsafe_pickle_on_untrusted_networks=True, actions_wait_s=1.0
            ).door("127.0.0.1")
        ],
    )
    with ServerThread(server), AsyncInferenceClient(server.doors[0].port) as client:
        client.ready()
        with ThreadPoolExecutor(3) as pool:
            waits = [pool.submit(client.get_actions) for _ in range(3)]
            codes = []
            for wait in waits:
                try:
                    wait.result()
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
    assert sorted(code.name for code in codes) == ["OK", "OK", "RESOURCE_EXHAUSTED"]


# ---- openpi: msgpack work bounded by the frame ---------------------------------------


def test_msgpack_decoding_is_bounded_by_the_frame_size() -> None:
    """Many empty maps or lists (one byte each) are refused: at most max_maps maps and
    max_items container entries per message, nested or not; ordinary messages with
    arrays decode as before."""
    flat = b"\xdd" + (2**20).to_bytes(4, "big") + b"\x80" * 2**20
    with pytest.raises(CodecError, match="max_array_len"):
        unpackb(flat)
    maps = b"\xdc" + (60_000).to_bytes(2, "big") + b"\x80" * 60_000
    with pytest.raises(CodecError, match="more than 1024 maps"):
        unpackb(maps)
    inner = b"\xdc" + (60_000).to_bytes(2, "big") + b"\x90" * 60_000
    nested = b"\x94" + inner * 4
    with pytest.raises(CodecError, match="more than 65536 map and array entries"):
        unpackb(nested)
    obs = {"image": np.zeros((224, 224, 3), np.uint8), "prompt": "pick", "state": [0.0] * 8}
    out = unpackb(packb(obs))
    np.testing.assert_array_equal(out["image"], obs["image"])
    assert max_items(64 * 2**20) == 262_144
    assert max_maps(64 * 2**20) == 65_536


def test_a_frame_of_millions_of_empty_maps_is_refused_off_the_loop() -> None:
    """16 MiB of empty maps (once 1.2 GB of memory and 1.8 s of a stalled loop): a clear
    error at once, decoded in a worker thread; the server answers /healthz meanwhile."""
    frame = b"\xdd" + (16 * 2**20).to_bytes(4, "big") + b"\x80" * (16 * 2**20)
    with running_server() as thread, connect(thread.uri, max_size=None) as ws:
        ws.recv()
        started = time.monotonic()
        ws.send(frame)
        reply = ws.recv(timeout=10)
        assert isinstance(reply, str) and "max_array_len" in reply
        assert time.monotonic() - started < 2.0
        health = urllib.request.urlopen(f"http://127.0.0.1:{thread.port}/healthz")
        assert health.read() == b"OK\n"


def test_large_frames_are_decoded_in_a_worker_thread() -> None:
    """decode_off_loop: small frames on the calling thread, large ones in another."""
    seen: list[str] = []

    def decode(frame: bytes) -> int:
        seen.append(threading.current_thread().name)
        return len(frame)

    async def both() -> list[int]:
        return [
            await decode_off_loop(decode, b"x" * 10),
            await decode_off_loop(decode, b"x" * (OFF_LOOP_BYTES + 1)),
        ]

    assert asyncio.run(both()) == [10, OFF_LOOP_BYTES + 1]
    assert seen[0] == threading.current_thread().name
    assert seen[1] != threading.current_thread().name


def test_the_openpi_door_refuses_connections_past_the_limit() -> None:
    """With --server.max-connections 2, a third handshake gets HTTP 503 naming the
    option; /healthz still answers; a slot freed is taken again."""
    with running_server(max_connections=2) as thread, connect(thread.uri):
        url = thread.uri
        with connect(url):
            with pytest.raises(InvalidStatus) as refused, connect(url):
                pass
            assert refused.value.response.status_code == 503
            assert b"--server.max-connections" in refused.value.response.body
            health = urllib.request.urlopen(f"http://127.0.0.1:{thread.port}/healthz")
            assert health.read() == b"OK\n"
        deadline = time.monotonic() + 5
        while True:
            try:
                with connect(url):
                    break
            except InvalidStatus:
                assert time.monotonic() < deadline
                time.sleep(0.05)


def test_dashboard_viewers_do_not_take_robots_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open dashboards count against their own limit, not --server.max-connections: with
    one robot slot and a dashboard open, a robot still connects; past the viewers' limit
    a dashboard gets 503 naming it; a second robot gets the robots' 503."""
    import armory.transports.openpi_ws as openpi_ws
    from armory.transports.observe_pages import LIVE_PATH

    monkeypatch.setattr(openpi_ws, "MAX_LIVE_VIEWERS", 1)
    with running_server(max_connections=1) as thread:
        live = f"{thread.uri}{LIVE_PATH}"
        with connect(live) as viewer:
            assert viewer.recv(timeout=5)  # the feed is running: the viewer is counted
            with connect(thread.uri) as robot:
                assert robot.recv(timeout=5)  # the metadata frame
                with pytest.raises(InvalidStatus) as refused, connect(live):
                    pass
                assert refused.value.response.status_code == 503
                assert b"dashboards are open" in refused.value.response.body
                with pytest.raises(InvalidStatus) as refused, connect(thread.uri):
                    pass
                assert b"--server.max-connections" in refused.value.response.body
