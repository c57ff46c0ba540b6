"""Pipelined every-tick: a robot sends each observation without waiting for the reply
to the one before; the server keeps its newest, answers the ones it replaced
"deferred", and sends replies in the order of the requests."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import numpy as np
import pytest
import websockets.asyncio.client
from armory_client import (
    ARMORY_KEY,
    ArmoryClientError,
    AsyncPolicyClient,
    RobotState,
    ServerError,
    attach,
    packb,
)
from armory_client.runtime import RuntimeConfig
from server_harness import (
    GatedPolicy,
    every_tick_state,
    expected_actions,
    make_mock,
    make_obs,
    run_runtimes,
    running_server,
)

from armory.engine.config import ServerConfig
from armory.serve import ArmoryServer, ServerThread


def pipelined_state(name: str, index: int) -> RobotState:
    return every_tick_state(name, index, pipelined=True)


async def _occupy(policy: GatedPolicy, port: int) -> tuple[AsyncPolicyClient, asyncio.Future]:
    """Robot a's request takes the only executor slot and holds it until allowed."""
    a = AsyncPolicyClient("127.0.0.1", port, request_timeout_s=10.0)
    reply = asyncio.ensure_future(a.infer(attach(make_obs(0), pipelined_state("a", 0))))
    await asyncio.to_thread(policy.next_batch)
    return a, reply


async def _requests_in(server: ServerThread, count: int, timeout_s: float = 10.0) -> None:
    """Wait until the server has taken ``count`` requests in."""
    loop = asyncio.get_running_loop()
    deadline_s = loop.time() + timeout_s
    while (await asyncio.to_thread(server.stats)).num_requests < count:
        assert loop.time() < deadline_s, f"the server did not get {count} requests"
        await asyncio.sleep(0.01)


def test_a_newer_observation_replaces_the_waiting_one_and_replies_keep_their_order() -> None:
    """b sends three observations while the executor is busy: the first two are answered
    "deferred" in order, the third gets the chunk computed from it."""
    policy = GatedPolicy(make_mock())
    with running_server(policy, max_batch_size=1) as server:

        async def scenario() -> tuple[dict, list[dict]]:
            a, reply_a = await _occupy(policy, server.port)
            b = AsyncPolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
            await b.connect()
            sends = [
                asyncio.ensure_future(b.infer(attach(make_obs(1, i), pipelined_state("b", i))))
                for i in range(3)
            ]
            await _requests_in(server, 4)  # a's and all three of b's, before the executor frees
            policy.allow(2)
            replies = await asyncio.gather(*sends)
            result_a = await reply_a
            await a.close()
            await b.close()
            return result_a, replies

        reply_a, replies = asyncio.run(scenario())
        stats = server.stats()
    assert [r[ARMORY_KEY]["deferred"] for r in replies] == [True, True, False]
    assert [r[ARMORY_KEY]["chunk_start"] for r in replies] == [0, 1, 2]
    assert replies[0]["actions"].shape == (0, 7)
    np.testing.assert_array_equal(replies[2]["actions"], expected_actions(policy, make_obs(1, 2)))
    np.testing.assert_array_equal(reply_a["actions"], expected_actions(policy, make_obs(0)))
    assert stats.num_superseded == 2 and stats.num_deferred == 0 and stats.num_errors == 0


def test_an_observation_sent_while_its_robots_chunk_is_computed_waits_for_the_next_batch() -> None:
    """b's observation at index 1 arrives while the chunk from index 0 is computed: too
    close to serve (min horizon 2), it waits instead of being refused, and index 2
    replaces it and is served by the next batch."""
    policy = GatedPolicy(make_mock())
    with running_server(policy, max_batch_size=1) as server:

        async def scenario() -> list[dict]:
            b = AsyncPolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
            first = asyncio.ensure_future(b.infer(attach(make_obs(1, 0), pipelined_state("b", 0))))
            await asyncio.to_thread(policy.next_batch)  # index 0 is being computed
            later = [
                asyncio.ensure_future(b.infer(attach(make_obs(1, i), pipelined_state("b", i))))
                for i in (1, 2)
            ]
            await _requests_in(server, 3)
            policy.allow(2)
            replies = await asyncio.gather(first, *later)
            await b.close()
            return replies

        replies = asyncio.run(scenario())
        stats = server.stats()
    assert [r[ARMORY_KEY]["deferred"] for r in replies] == [False, True, False]
    assert [r[ARMORY_KEY]["chunk_start"] for r in replies] == [0, 1, 2]
    np.testing.assert_array_equal(replies[2]["actions"], expected_actions(policy, make_obs(1, 2)))
    assert stats.num_errors == 0 and stats.num_superseded == 1


def test_a_request_over_the_pipelining_limit_ends_the_connection_with_an_error() -> None:
    """With --server.max-pipelined-requests 2: b's chunk from index 0 is being computed,
    its index 1 waits behind it, and index 2 would be a third unanswered request. b gets
    the error naming the limit, its connection closes, and robot a is served as usual."""
    policy = GatedPolicy(make_mock())
    with running_server(policy, max_batch_size=1, max_pipelined_requests=2) as server:

        async def scenario() -> tuple[list[Any], dict]:
            b = AsyncPolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
            sends = [
                asyncio.ensure_future(b.infer(attach(make_obs(1, 0), pipelined_state("b", 0))))
            ]
            await asyncio.to_thread(policy.next_batch)
            sends += [
                asyncio.ensure_future(b.infer(attach(make_obs(1, i), pipelined_state("b", i))))
                for i in (1, 2)
            ]
            replies = await asyncio.gather(*sends, return_exceptions=True)
            policy.allow(2)
            a = AsyncPolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
            reply_a = await a.infer(attach(make_obs(0), pipelined_state("a", 0)))
            await a.close()
            await b.close()
            return replies, reply_a

        replies, reply_a = asyncio.run(scenario())
        stats = server.stats()
    assert all(isinstance(r, ArmoryClientError) for r in replies), replies
    refusals = [r for r in replies if isinstance(r, ServerError)]
    assert len(refusals) == 1
    assert "more than 2 requests" in str(refusals[0])
    assert "max-pipelined-requests" in str(refusals[0])
    np.testing.assert_array_equal(reply_a["actions"], expected_actions(policy, make_obs(0)))
    assert stats.num_errors == 1


@pytest.mark.parametrize("pipelining", [True, False])
def test_every_tick_runtimes_pipeline_when_the_server_allows_it(pipelining: bool) -> None:
    """Six every-tick runtimes against a one-robot batch. Pipelined, each sends every
    tick it may and the server replaces what no batch took; one request at a time, the
    server defers what no batch took within two ticks. Either way no request fails and
    every robot keeps receiving chunks."""
    with running_server(make_mock(), max_batch_size=1) as server:
        summaries = run_runtimes(
            server.port,
            [
                RuntimeConfig(
                    robot_id=f"robot-{i}",
                    control_hz=30.0,
                    max_execution_horizon=10,
                    min_execution_horizon=2,
                    request_mode="every-tick",
                    pipelining=pipelining,
                    duration_s=1.5,
                )
                for i in range(6)
            ],
        )
        stats = server.stats()
    assert stats.num_errors == 0
    replaced = stats.num_superseded if pipelining else stats.num_deferred
    assert replaced > 0 and (stats.num_deferred if pipelining else stats.num_superseded) == 0
    # A reply the server sent as a robot stopped is not counted by that robot (its
    # requests were cancelled).
    counted = sum(s.num_deferred_replies for s in summaries)
    assert 0 < counted <= replaced
    for summary in summaries:
        assert summary.num_request_errors == 0
        assert summary.num_chunks_applied >= 2, summary
    requests_per_robot = stats.num_requests / len(summaries)
    if pipelining:
        # Near every tick: 45 in 1.5 s at 30 Hz (one at a time: about 22).
        assert requests_per_robot > 30, requests_per_robot


def test_the_metadata_announces_pipelining_and_its_limit() -> None:
    with running_server(make_mock(), max_pipelined_requests=5) as server:

        async def metadata() -> dict:
            async with AsyncPolicyClient("127.0.0.1", server.port) as client:
                return client.metadata

        info = asyncio.run(metadata())["armory"]
    assert info["pipelining"] is True and info["max_pipelined_requests"] == 5


def test_the_pipelining_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"--server\.max-pipelined-requests must be >= 1"):
        ServerConfig(max_pipelined_requests=0)


def test_a_client_that_does_not_pipeline_may_not_send_before_its_reply() -> None:
    """A plain openpi client (no ``pipelined`` state) that sends a second request while
    its first is being computed gets an error saying so, then close 1011."""
    policy = GatedPolicy(make_mock())
    with running_server(policy, max_batch_size=1) as server:

        async def scenario() -> tuple[str | bytes, int | None]:
            uri = f"ws://127.0.0.1:{server.port}"
            async with websockets.asyncio.client.connect(uri, max_size=None) as ws:
                await ws.recv()  # metadata
                await ws.send(packb(make_obs(0, 0)))
                await asyncio.to_thread(policy.next_batch)
                await ws.send(packb(make_obs(0, 1)))
                message = await ws.recv()
                policy.allow(1)
                await ws.wait_closed()
                return message, ws.close_code

        message, code = asyncio.run(scenario())
        stats = server.stats()
    assert isinstance(message, str)
    assert "before the reply to its previous one" in message
    assert code == 1011 and stats.num_errors == 1


def test_a_pipelined_robot_that_drops_with_requests_outstanding_costs_nobody_else() -> None:
    """b has one request being computed and two waiting behind it when its connection
    is cut: its chunks are thrown away, a's request in the same loop is answered."""
    policy = GatedPolicy(make_mock())
    with running_server(policy, max_batch_size=1) as server:

        async def scenario() -> dict:
            b = AsyncPolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
            first = asyncio.ensure_future(b.infer(attach(make_obs(1, 0), pipelined_state("b", 0))))
            await asyncio.to_thread(policy.next_batch)
            later = [
                asyncio.ensure_future(b.infer(attach(make_obs(1, i), pipelined_state("b", i))))
                for i in (2, 3)
            ]
            a = AsyncPolicyClient("127.0.0.1", server.port, request_timeout_s=10.0)
            reply_a = asyncio.ensure_future(a.infer(attach(make_obs(0), pipelined_state("a", 0))))
            await _requests_in(server, 4)
            assert b._conn is not None
            b._conn.transport.abort()
            await asyncio.gather(first, *later, return_exceptions=True)
            while (await asyncio.to_thread(server.stats)).num_sessions > 1:
                await asyncio.sleep(0.01)
            policy.allow(2)
            result = await reply_a
            await a.close()
            return result

        reply_a = asyncio.run(scenario())
        stats = server.stats()
    np.testing.assert_array_equal(reply_a["actions"], expected_actions(policy, make_obs(0)))
    assert stats.num_errors == 0 and stats.num_dropped_chunks == 1


def test_a_pipelined_robot_moved_off_its_replica_is_answered_and_let_go() -> None:
    """b's chunk from index 0 is being computed and its index 1 waits behind it, too early
    to serve, when the cluster moves b (``/move``): index 2 and the waiting index 1 are
    answered "deferred" at once (no newer observation will reach the loop to replace
    index 1), sent after index 0's chunk, then the connection closes; b's next request
    is served on a new connection."""
    policy = GatedPolicy(make_mock())
    server = ArmoryServer(policy, ServerConfig(max_batch_size=1), port=0, movable=True)
    thread = ServerThread(server).start()
    move = f"http://127.0.0.1:{thread.port}/move?robot=b"
    try:

        async def scenario() -> tuple[list[dict], dict, int]:
            b = AsyncPolicyClient("127.0.0.1", thread.port, request_timeout_s=10.0)
            sends = [
                asyncio.ensure_future(b.infer(attach(make_obs(1, 0), pipelined_state("b", 0))))
            ]
            await asyncio.to_thread(policy.next_batch)  # index 0 is being computed
            sends.append(
                asyncio.ensure_future(b.infer(attach(make_obs(1, 1), pipelined_state("b", 1))))
            )
            await _requests_in(thread, 2)
            with await asyncio.to_thread(urllib.request.urlopen, move, timeout=5) as answer:
                assert answer.status == 200
            sends.append(
                asyncio.ensure_future(b.infer(attach(make_obs(1, 2), pipelined_state("b", 2))))
            )
            async with asyncio.timeout(5.0):  # both answered before index 0's chunk is ready
                while (await asyncio.to_thread(thread.stats)).num_superseded < 2:
                    await asyncio.sleep(0.01)
            policy.allow(2)
            async with asyncio.timeout(5.0):
                replies = await asyncio.gather(*sends)
            connections = b.num_connections
            later = every_tick_state("b", 8, chunk_start=0, pipelined=True)
            after_move = await b.infer(attach(make_obs(1, 8), later))
            await b.close()
            return replies, after_move, b.num_connections - connections

        replies, after_move, new_connections = asyncio.run(scenario())
        stats = thread.stats()
    finally:
        thread.stop()
    assert [r[ARMORY_KEY]["deferred"] for r in replies] == [False, True, True]
    assert [r[ARMORY_KEY]["chunk_start"] for r in replies] == [0, 1, 2]
    np.testing.assert_array_equal(replies[0]["actions"], expected_actions(policy, make_obs(1, 0)))
    np.testing.assert_array_equal(after_move["actions"], expected_actions(policy, make_obs(1, 8)))
    assert new_connections == 1  # the request after the move opened a second connection
    assert stats.num_errors == 0
