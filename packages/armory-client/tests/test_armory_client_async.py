"""AsyncPolicyClient (asyncio) against a tiny in-test openpi-style server."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from _fake_openpi_server import free_port
from armory_client import (
    AsyncPolicyClient,
    ConnectionLost,
    ConnectTimeout,
    HandshakeRejected,
    RequestTimeout,
    ServerError,
)


def test_infer_round_trip_and_metadata(fake_server) -> None:
    """connect reads the metadata frame; infer sends one frame and returns the reply map."""
    server = fake_server(metadata={"reset_pose": [1.0], "action_horizon": 10})

    async def scenario() -> None:
        async with AsyncPolicyClient(port=server.port) as client:
            assert client.metadata == {"reset_pose": [1.0], "action_horizon": 10}
            reply = await client.infer({"image": np.ones((2, 2, 3), np.uint8)})
            np.testing.assert_array_equal(reply["echo"]["image"], np.ones((2, 2, 3)))
            assert client.last_round_trip_s is not None and client.last_round_trip_s > 0

    asyncio.run(scenario())


def test_concurrent_infers_are_serialised(fake_server) -> None:
    """Requests from several tasks go one at a time, each getting its own reply."""
    server = fake_server()

    async def scenario() -> list[dict]:
        async with AsyncPolicyClient(port=server.port) as client:
            return await asyncio.gather(*(client.infer({"n": n}) for n in range(5)))

    replies = asyncio.run(scenario())
    assert [reply["echo"]["n"] for reply in replies] == list(range(5))
    assert sorted(reply["count"] for reply in replies) == [1, 2, 3, 4, 5]


def test_text_frame_raises_server_error(fake_server) -> None:
    """A text frame from the server raises ServerError; the next infer reconnects."""
    server = fake_server(mode="text")

    async def scenario() -> None:
        async with AsyncPolicyClient(port=server.port) as client:
            with pytest.raises(ServerError, match="missing 'state'"):
                await client.infer({"x": 1})
            server.mode = "echo"
            assert (await client.infer({"x": 2}))["echo"] == {"x": 2}

    asyncio.run(scenario())
    assert len(server.headers) == 2


def test_request_timeout_when_server_never_answers(fake_server) -> None:
    """A silent server makes infer raise RequestTimeout after the configured time."""
    server = fake_server(mode="silent")

    async def scenario() -> float:
        async with AsyncPolicyClient(port=server.port, request_timeout_s=0.2) as client:
            start_s = time.monotonic()
            with pytest.raises(RequestTimeout):
                await client.infer({"x": 1})
            return time.monotonic() - start_s

    assert 0.15 < asyncio.run(scenario()) < 2.0


def test_reconnects_after_server_closes(fake_server) -> None:
    """A connection the server closed between requests is replaced transparently."""
    server = fake_server(mode="once")

    async def scenario() -> None:
        async with AsyncPolicyClient(port=server.port) as client:
            assert (await client.infer({"n": 1}))["echo"] == {"n": 1}
            assert await asyncio.to_thread(server.closed.wait, 2)
            assert (await client.infer({"n": 2}))["echo"] == {"n": 2}

    asyncio.run(scenario())
    assert len(server.headers) == 2


def test_a_request_the_server_let_go_unanswered_goes_again_once(fake_server) -> None:
    """Closed 1012 before its reply (a cluster's replica moving the robot elsewhere), a
    request was not served: it goes again through a new connection, once; closed so a
    second time, it fails with ConnectionLost."""
    server = fake_server(mode="moved")

    async def scenario() -> None:
        async with AsyncPolicyClient(port=server.port, request_timeout_s=5.0) as client:
            assert await client.infer({"n": 1}) == {"echo": {"n": 1}, "count": 2}
            assert client.num_connections == 2
        server.moves = 2
        async with AsyncPolicyClient(port=server.port, request_timeout_s=5.0) as client:
            with pytest.raises(ConnectionLost, match="let the robot go"):
                await client.infer({"n": 2})

    asyncio.run(scenario())
    assert server.requests == [{"n": 1}, {"n": 1}, {"n": 2}, {"n": 2}]


def test_api_key_header_sent(fake_server) -> None:
    """With api_key the handshake carries `Authorization: Api-Key <key>`."""
    server = fake_server(api_key="k1")

    async def scenario() -> None:
        async with AsyncPolicyClient(port=server.port, api_key="k1") as client:
            await client.infer({"x": 1})

    asyncio.run(scenario())
    assert server.headers[0]["Authorization"] == "Api-Key k1"


def test_wrong_api_key_rejected_without_retry(fake_server) -> None:
    """An HTTP 401 handshake raises HandshakeRejected at once."""
    server = fake_server(api_key="right")
    client = AsyncPolicyClient(port=server.port, api_key="wrong", connect_timeout_s=5)
    with pytest.raises(HandshakeRejected, match="401"):
        asyncio.run(client.connect())
    assert len(server.headers) == 1


def test_connect_timeout_when_nobody_listens() -> None:
    """With no server, connect retries until the connect timeout, then raises ConnectTimeout."""
    client = AsyncPolicyClient(port=free_port(), connect_timeout_s=0.3, initial_backoff_s=0.05)
    start_s = time.monotonic()
    with pytest.raises(ConnectTimeout):
        asyncio.run(client.connect())
    assert 0.25 < time.monotonic() - start_s < 2.0


def test_infer_with_the_server_down_raises_within_the_request_timeout() -> None:
    """With nobody listening, infer gives up after its request timeout (0.3 s), not
    after the connect timeout (10 s), and says which budget it spent."""
    client = AsyncPolicyClient(
        port=free_port(), connect_timeout_s=10, request_timeout_s=0.3, initial_backoff_s=0.05
    )
    start_s = time.monotonic()
    with pytest.raises(ConnectTimeout, match="request timeout"):
        asyncio.run(client.infer({"x": 1}))
    assert 0.25 < time.monotonic() - start_s < 2.0
    assert client.num_connections == 0


def test_reconnects_are_counted(fake_server) -> None:
    """num_connections counts every connection opened: the first and each reconnect."""
    server = fake_server(mode="once")

    async def scenario() -> int:
        async with AsyncPolicyClient(port=server.port) as client:
            assert client.num_connections == 1
            await client.infer({"n": 1})
            await asyncio.to_thread(server.closed.wait, 2)
            await client.infer({"n": 2})
            return client.num_connections

    assert asyncio.run(scenario()) == 2


def test_connect_retries_until_server_starts(fake_server) -> None:
    """A server that comes up during the connect budget is reached by the retries."""
    port = free_port()

    async def scenario() -> dict:
        client = AsyncPolicyClient(port=port, connect_timeout_s=5, initial_backoff_s=0.05)
        connecting = asyncio.create_task(client.connect())
        await asyncio.sleep(0.3)
        await asyncio.to_thread(fake_server, port=port)
        await connecting
        try:
            return await client.infer({"x": 1})
        finally:
            await client.close()

    assert asyncio.run(scenario())["count"] == 1


def test_oversized_reply_names_max_size(fake_server) -> None:
    """A reply above max_size ends the request with ConnectionLost naming the limit."""
    server = fake_server(mode="big", big_bytes=4096)

    async def scenario() -> None:
        async with AsyncPolicyClient(port=server.port, max_size=1024) as client:
            with pytest.raises(ConnectionLost, match="max_size=1024"):
                await client.infer({"x": 1})

    asyncio.run(scenario())


def test_cancelled_request_never_answers_the_next(fake_server) -> None:
    """Cancelling infer (e.g. by wait_for) drops the connection, so a late reply is never reused."""
    server = fake_server(mode="slow", delay_s=0.3)

    async def scenario() -> dict:
        async with AsyncPolicyClient(port=server.port) as client:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.infer({"n": 1}), 0.1)
            return await client.infer({"n": 2})

    assert asyncio.run(scenario())["echo"] == {"n": 2}
    assert len(server.headers) == 2
