"""PolicyClient (blocking) against a tiny in-test openpi-style server."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from _fake_openpi_server import free_port
from armory_client import (
    ArmoryClientError,
    ConnectionLost,
    ConnectTimeout,
    HandshakeRejected,
    PolicyClient,
    ProtocolError,
    RequestTimeout,
    ServerError,
)


def test_infer_round_trip_and_metadata(fake_server) -> None:
    """connect reads the metadata frame; infer sends one frame and returns the reply map."""
    server = fake_server()
    with PolicyClient(port=server.port) as client:
        assert client.metadata == {"reset_pose": [0.0, 1.0]}
        assert client.last_round_trip_s is None
        obs = {"state": np.arange(4, dtype=np.float32), "prompt": "hi"}
        reply = client.infer(obs)
        np.testing.assert_array_equal(reply["echo"]["state"], obs["state"])
        assert reply["echo"]["prompt"] == "hi"
        assert client.infer({"n": 2})["count"] == 2
        assert client.last_round_trip_s is not None and client.last_round_trip_s > 0
    assert len(server.headers) == 1


def test_uri_forms() -> None:
    """A bare host gets ws:// and port 8000 by default; a ws URI is used as given."""
    assert PolicyClient().uri == "ws://127.0.0.1:8000"
    assert PolicyClient("10.0.0.2", 9000).uri == "ws://10.0.0.2:9000"
    assert PolicyClient("wss://gpu.example:443").uri == "wss://gpu.example:443"
    with pytest.raises(ValueError, match="invalid server address"):
        PolicyClient("ws://")


def test_constructor_opens_nothing_and_checks_settings(fake_server) -> None:
    """No socket opens before connect/infer; bad settings raise ValueError naming them."""
    server = fake_server()
    client = PolicyClient(port=server.port)
    assert server.headers == []
    with pytest.raises(ArmoryClientError, match="connect first"):
        _ = client.metadata
    assert client.infer({"x": 1})["count"] == 1  # infer connects lazily
    client.close()
    with pytest.raises(ValueError, match="request_timeout_s"):
        PolicyClient(request_timeout_s=0)
    with pytest.raises(ValueError, match="max_size"):
        PolicyClient(max_size=-1)


def test_text_frame_raises_server_error(fake_server) -> None:
    """A text frame from the server raises ServerError carrying its message."""
    server = fake_server(mode="text")
    with PolicyClient(port=server.port) as client, pytest.raises(ServerError) as info:
        client.infer({"x": 1})
    assert info.value.message == "bad observation: missing 'state'"


def test_request_timeout_when_server_never_answers(fake_server) -> None:
    """A silent server makes infer raise RequestTimeout after the configured time."""
    server = fake_server(mode="silent")
    with PolicyClient(port=server.port, request_timeout_s=0.2) as client:
        start_s = time.monotonic()
        with pytest.raises(RequestTimeout, match=r"0\.2 s"):
            client.infer({"x": 1})
        assert 0.15 < time.monotonic() - start_s < 2.0
        client.connect()  # the timeout closed the connection: open it on the connect budget
        with pytest.raises(RequestTimeout, match=r"0\.05 s"):
            client.infer({"x": 2}, timeout_s=0.05)


def test_late_reply_never_answers_the_next_request(fake_server) -> None:
    """After a timeout the connection is replaced, so the next reply is for the next request."""
    server = fake_server(mode="slow", delay_s=0.3)
    with PolicyClient(port=server.port, request_timeout_s=0.1) as client:
        with pytest.raises(RequestTimeout):
            client.infer({"n": 1})
        reply = client.infer({"n": 2}, timeout_s=2.0)
    assert reply["echo"] == {"n": 2}


def test_reconnects_after_server_closes(fake_server) -> None:
    """A connection the server closed between requests is replaced transparently."""
    server = fake_server(mode="once", metadata={"v": 1})
    with PolicyClient(port=server.port) as client:
        assert client.infer({"n": 1})["echo"] == {"n": 1}
        assert server.closed.wait(2)
        assert client.infer({"n": 2})["echo"] == {"n": 2}
        assert client.metadata == {"v": 1}
    assert len(server.headers) == 2


def test_a_request_the_server_let_go_unanswered_goes_again_once(fake_server) -> None:
    """Closed 1012 before its reply (a cluster's replica moving the robot elsewhere), a
    request was not served: it goes again through a new connection, once; closed so a
    second time, it fails with ConnectionLost."""
    server = fake_server(mode="moved")
    with PolicyClient(port=server.port, request_timeout_s=5.0) as client:
        assert client.infer({"n": 1}) == {"echo": {"n": 1}, "count": 2}
        assert client.num_connections == 2
    assert server.requests == [{"n": 1}, {"n": 1}]
    server.moves = 2
    with (
        PolicyClient(port=server.port, request_timeout_s=5.0) as client,
        pytest.raises(ConnectionLost, match="let the robot go"),
    ):
        client.infer({"n": 2})


def test_reconnects_after_server_error(fake_server) -> None:
    """After a ServerError (the server then closes) the next infer opens a fresh connection."""
    server = fake_server(mode="text")
    with PolicyClient(port=server.port) as client:
        with pytest.raises(ServerError):
            client.infer({"n": 1})
        server.mode = "echo"
        assert client.infer({"n": 2})["echo"] == {"n": 2}
    assert len(server.headers) == 2


def test_api_key_header_sent(fake_server) -> None:
    """With api_key the handshake carries `Authorization: Api-Key <key>`."""
    server = fake_server(api_key="s3cret")
    with PolicyClient(port=server.port, api_key="s3cret") as client:
        client.infer({"x": 1})
    assert server.headers[0]["Authorization"] == "Api-Key s3cret"


def test_no_api_key_no_header(fake_server) -> None:
    """Without api_key no Authorization header is sent."""
    server = fake_server()
    PolicyClient(port=server.port).connect().close()
    assert "Authorization" not in server.headers[0]


def test_wrong_api_key_rejected_without_retry(fake_server) -> None:
    """An HTTP 401 handshake raises HandshakeRejected at once, not after the connect timeout."""
    server = fake_server(api_key="right")
    start_s = time.monotonic()
    with pytest.raises(HandshakeRejected, match="401") as info:
        PolicyClient(port=server.port, api_key="wrong", connect_timeout_s=5).connect()
    assert info.value.status_code == 401
    assert time.monotonic() - start_s < 2.0
    assert len(server.headers) == 1


def test_connect_timeout_when_nobody_listens() -> None:
    """With no server, connect retries until the connect timeout, then raises ConnectTimeout."""
    client = PolicyClient(port=free_port(), connect_timeout_s=0.4, initial_backoff_s=0.05)
    start_s = time.monotonic()
    with pytest.raises(ConnectTimeout, match="ConnectionRefusedError"):
        client.connect()
    assert 0.35 < time.monotonic() - start_s < 2.0


def test_infer_with_the_server_down_raises_within_the_request_timeout() -> None:
    """With nobody listening, infer gives up after its request timeout (0.3 s), not
    after the connect timeout (10 s), and says which budget it spent."""
    client = PolicyClient(
        port=free_port(), connect_timeout_s=10, request_timeout_s=0.3, initial_backoff_s=0.05
    )
    start_s = time.monotonic()
    with pytest.raises(ConnectTimeout, match="request timeout"):
        client.infer({"x": 1})
    assert 0.25 < time.monotonic() - start_s < 2.0
    assert client.num_connections == 0


def test_reconnects_are_counted(fake_server) -> None:
    """num_connections counts every connection opened: the first and each reconnect."""
    server = fake_server(mode="once")
    with PolicyClient(port=server.port) as client:
        assert client.num_connections == 1
        client.infer({"n": 1})
        assert server.closed.wait(2)
        client.infer({"n": 2})
        assert client.num_connections == 2


def test_connect_retries_until_server_starts(fake_server) -> None:
    """A server that comes up during the connect budget is reached by the retries."""
    port = free_port()
    client = PolicyClient(port=port, connect_timeout_s=5, initial_backoff_s=0.05)
    timer = threading.Timer(0.3, lambda: fake_server(port=port))
    timer.start()
    try:
        client.connect()
        assert client.metadata == {"reset_pose": [0.0, 1.0]}
        assert client.infer({"x": 1})["count"] == 1
    finally:
        timer.join()
        client.close()


def test_text_metadata_raises_server_error(fake_server) -> None:
    """A text frame instead of the metadata frame raises ServerError at connect."""
    server = fake_server(metadata="server full")
    with pytest.raises(ServerError, match="server full"):
        PolicyClient(port=server.port, connect_timeout_s=2).connect()


def test_metadata_must_be_a_map(fake_server) -> None:
    """Metadata that is not a msgpack map is a ProtocolError."""
    server = fake_server(metadata=[1, 2])
    with pytest.raises(ProtocolError, match="metadata must be a map"):
        PolicyClient(port=server.port, connect_timeout_s=2).connect()


def test_oversized_reply_names_max_size(fake_server) -> None:
    """A reply above max_size ends the request with ConnectionLost naming the limit."""
    server = fake_server(mode="big", big_bytes=4096)
    client = PolicyClient(port=server.port, max_size=1024).connect()
    with pytest.raises(ConnectionLost, match="max_size=1024"):
        client.infer({"x": 1})
    client.close()


def test_codec_error_leaves_connection_usable(fake_server) -> None:
    """An observation the codec refuses raises before any I/O; the connection stays open."""
    server = fake_server()
    with PolicyClient(port=server.port) as client:
        with pytest.raises(ValueError, match="complex"):
            client.infer({"bad": np.array([1j])})
        assert client.infer({"x": 1})["count"] == 1
    assert len(server.headers) == 1
