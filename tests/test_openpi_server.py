"""The openpi-compatible server over real sockets on 127.0.0.1: robots, errors, limits, auth."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import websockets.asyncio.client
from armory_client import (
    ARMORY_KEY,
    AsyncPolicyClient,
    HandshakeRejected,
    PolicyClient,
    RobotState,
    ServerError,
    attach,
    image_specs,
    packb,
    prepare_images,
)
from server_harness import (
    GatedPolicy,
    armory_serve,
    every_tick_state,
    expected_actions,
    make_mock,
    make_obs,
    running_server,
)
from websockets.exceptions import ConnectionClosed

from armory.cli import main
from armory.engine.config import ServerConfig
from armory.policies.base import conform_observation
from armory.scheduling.registry import make_scheduler
from armory.serve import ArmoryServer, ServerThread
from armory.server_stats import StatsReading

TESTS_DIR = Path(__file__).resolve().parent


def run(make: Callable[[], Awaitable[Any]], timeout_s: float = 20.0) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(timeout_s):
            return await make()

    return asyncio.run(main())


def http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:  # it holds the answer's socket
            return exc.code, exc.read().decode()


async def directed_robot(
    port: int,
    name: str,
    *,
    control_hz: float,
    seed: int,
    num_chunks: int,
    policy: Any,
    barrier: asyncio.Barrier,
    max_execution_horizon: int = 6,
    min_execution_horizon: int = 2,
) -> list[dict[str, Any]]:
    """An Armory robot in directed mode: it plays each chunk in real time until the
    index the server names, then sends its next observation. Checks every chunk."""
    log = []
    async with AsyncPolicyClient("127.0.0.1", port, request_timeout_s=5.0) as client:
        await barrier.wait()
        index, chunk_start = 0, None
        for step in range(num_chunks):
            left = 0 if chunk_start is None else chunk_start + max_execution_horizon - index
            state = RobotState(
                robot_id=name,
                action_index=index,
                actions_left=left,
                chunk_start=chunk_start,
                control_hz=control_hz,
                min_execution_horizon=min_execution_horizon,
                max_execution_horizon=max_execution_horizon,
                observation_step=step,
                round_trip_s=client.last_round_trip_s,
            )
            obs = make_obs(seed, step)
            reply = await client.infer(attach(obs, state))
            np.testing.assert_array_equal(reply["actions"], expected_actions(policy, obs))
            armory = reply[ARMORY_KEY]
            assert armory["version"] == 1
            assert armory["chunk_start"] == index
            assert armory["next_request_index"] >= index + min_execution_horizon
            log.append(reply)
            chunk_start, next_index = armory["chunk_start"], armory["next_request_index"]
            await asyncio.sleep((next_index - index) / control_hz)
            index = next_index
    return log


def test_mixed_rate_fleet_gets_own_chunks_in_shared_batches() -> None:
    """8 Armory robots at 15-60 Hz: each receives chunks computed from its own observations,
    and robots share forward passes."""
    policy = make_mock(action_horizon=6)
    rates = [15.0, 30.0, 60.0, 15.0, 30.0, 60.0, 20.0, 45.0]
    num_chunks = 5
    with running_server(policy, max_batch_size=4) as server:

        async def fleet() -> list[list[dict[str, Any]]]:
            barrier = asyncio.Barrier(len(rates))
            return await asyncio.gather(
                *(
                    directed_robot(
                        server.port,
                        f"robot-{i}",
                        control_hz=hz,
                        seed=i,
                        num_chunks=num_chunks,
                        policy=policy,
                        barrier=barrier,
                    )
                    for i, hz in enumerate(rates)
                )
            )

        logs = run(fleet)
        _wait_for(lambda: server.stats().num_sessions == 0)
        stats = server.stats()
    assert [len(log) for log in logs] == [num_chunks] * len(rates)
    assert stats.num_replies == stats.num_requests == num_chunks * len(rates)
    assert stats.num_errors == 0 and stats.num_dropped_chunks == 0
    assert max(stats.batch_size_counts) >= 2
    assert stats.mean_batch_size > 1.0
    assert sum(policy.batch_sizes) == num_chunks * len(rates)
    assert max(policy.batch_sizes) <= 4
    for log in logs:
        assert {"infer_ms", "prev_total_ms", "queue_ms"} <= set(log[-1]["server_timing"])


def test_plain_openpi_request_is_served_without_armory_keys() -> None:
    """No __armory__ state: the reply is openpi's (actions, server_timing, policy_timing)."""
    policy = make_mock()
    with running_server(policy) as server, PolicyClient("127.0.0.1", server.port) as client:
        obs = make_obs(5, prompt="stack the blocks")
        first = client.infer(obs)
        second = client.infer(obs)
    assert set(first) == {"actions", "server_timing", "policy_timing"}
    np.testing.assert_array_equal(first["actions"], expected_actions(policy, obs))
    assert first["actions"].dtype == np.float32 and first["actions"].shape == (10, 7)
    assert "prev_total_ms" not in first["server_timing"]
    assert second["server_timing"]["prev_total_ms"] > 0
    assert second["policy_timing"]["infer_ms"] > 10


def test_metadata_frame_declares_inputs_horizon_and_server() -> None:
    """The first frame holds the policy's inputs, horizon, dimension and Armory's info."""
    with (
        running_server(max_batch_size=3) as server,
        PolicyClient("127.0.0.1", server.port) as client,
    ):
        metadata = client.metadata
    assert metadata["action_horizon"] == 10 and metadata["action_dim"] == 7
    assert metadata["inputs"]["observation/image"] == {
        "shape": [224, 224, 3],
        "dtype": "uint8",
        "required": True,
        "jpeg": True,
    }
    assert metadata["inputs"]["prompt"] == {"shape": None, "dtype": "str", "required": False}
    info = metadata["armory"]
    assert info["version"] == 1 and info["state_key"] == ARMORY_KEY
    assert info["max_batch_size"] == 3 and info["scheduler"] == "just-in-time"
    assert info["plain_client_defaults"]["max_execution_horizon"] == 10


def test_jpeg_images_are_decoded_before_the_policy_sees_them() -> None:
    """Images sent as JPEG (as prepare_images encodes them for a server that marks its
    image inputs "jpeg": true) are served with the chunk of the decoded images."""
    policy = make_mock()
    with running_server(policy) as server, PolicyClient("127.0.0.1", server.port) as client:
        specs = image_specs(client.metadata)
        assert specs and all(spec.jpeg for spec in specs.values())
        obs = prepare_images(make_obs(3), specs, jpeg_quality=90)
        assert all(isinstance(obs[key], bytes) for key in specs)
        reply = client.infer(obs)
    decoded = conform_observation(obs, policy.metadata.inputs)
    assert decoded["observation/image"].shape == (224, 224, 3)
    np.testing.assert_array_equal(reply["actions"], expected_actions(policy, decoded))


def test_healthz_answers_ok_and_stats_need_the_key() -> None:
    """GET /healthz is 200 'OK\\n' without a key; /stats needs it and returns JSON."""
    with running_server(api_key="s3cret") as server:
        assert http_get(server.port, "/healthz") == (200, "OK\n")
        status, body = http_get(server.port, "/stats")
        assert status == 401 and "Api-Key" in body
        status, body = http_get(server.port, "/stats", {"Authorization": "Api-Key s3cret"})
    assert status == 200
    assert json.loads(body)["num_sessions"] == 0


def test_stats_time_each_request_s_own_steps_within_its_server_time() -> None:
    """/stats reports the requests' own steps (intake, decision, encode) as timed in
    place, and they fit inside the arrival-to-sent time less waiting and the forward pass."""
    with running_server() as server, PolicyClient("127.0.0.1", server.port) as client:
        for step in range(5):
            client.infer(make_obs(1, step))
        stats = server.stats()
        reading = StatsReading.from_json(json.loads(http_get(server.port, "/stats")[1]))
    assert stats.num_replies == 5
    assert stats.steps_ms_p50 is not None and stats.steps_ms_p99 is not None
    assert stats.overhead_ms_p50 is not None
    assert 0.0 < stats.steps_ms_p50 <= stats.steps_ms_p99
    # Per request the steps are a part of the server-added time, so are the medians
    # (a little slack for the two clocks involved).
    assert stats.steps_ms_p50 <= stats.overhead_ms_p50 + 0.05
    # Decisions in wall time and in the deciding thread's processor time, which a thread
    # can spend only while the wall clock runs.
    assert 0.0 < stats.decision_cpu_ms_mean <= stats.decision_ms_mean + 0.05
    assert reading.decision_cpu_ms_mean == stats.decision_cpu_ms_mean


# ---- bad inputs, each beside a well-behaved robot -----------------------------

API_KEY = "k-123"
MAX_MESSAGE_BYTES = 1 << 20


async def raw_exchange(port: int, frame: bytes | str) -> tuple[Any, int | None, str]:
    """Send one raw frame after the metadata; return (reply frame or None, close code, reason)."""
    async with websockets.asyncio.client.connect(
        f"ws://127.0.0.1:{port}",
        compression=None,
        additional_headers={"Authorization": f"Api-Key {API_KEY}"},
        max_size=None,
    ) as ws:
        await ws.recv()
        try:
            await ws.send(frame)
            reply = await ws.recv()
        except ConnectionClosed:
            reply = None
        await ws.wait_closed()
        return reply, ws.close_code, ws.close_reason or ""


def _object_dtype_frame() -> bytes:
    """An observation whose state is an object-dtype array map (openpi's form, dtype '|O')."""
    state = {b"__ndarray__": True, b"data": b"\x00" * 64, b"dtype": "|O", b"shape": [8]}
    return msgpack.packb({"observation/state": state}, use_bin_type=True)


async def _garbage(port: int) -> str:
    reply, code, _ = await raw_exchange(port, b"\xc1\x00 definitely not msgpack")
    assert code == 1011
    return reply


async def _object_dtype(port: int) -> str:
    reply, code, _ = await raw_exchange(port, _object_dtype_frame())
    assert code == 1011
    return reply


async def _text_frame(port: int) -> str:
    reply, code, _ = await raw_exchange(port, "hello")
    assert code == 1011
    return reply


async def _oversize(port: int) -> str:
    reply, code, reason = await raw_exchange(port, b"\x00" * (2 * MAX_MESSAGE_BYTES))
    assert reply is None and code == 1009
    return reason


async def _client_error(port: int, obs: dict[str, Any], api_key: str = API_KEY) -> str:
    async with AsyncPolicyClient("127.0.0.1", port, api_key=api_key) as client:
        with pytest.raises(ServerError) as info:
            await client.infer(obs)
    return info.value.message


async def _wrong_shape(port: int) -> str:
    obs = make_obs(1) | {"observation/image": np.zeros((100, 100, 3), np.uint8)}
    return await _client_error(port, obs)


async def _bad_jpeg(port: int) -> str:
    return await _client_error(port, make_obs(1) | {"observation/image": b"not a jpeg"})


async def _missing_key(port: int) -> str:
    obs = make_obs(1)
    del obs["observation/wrist_image"]
    return await _client_error(port, obs)


async def _bad_armory_map(port: int) -> str:
    return await _client_error(port, make_obs(1) | {ARMORY_KEY: {"version": 1, "robot_id": "x"}})


async def _wrong_api_key(port: int) -> str:
    client = AsyncPolicyClient("127.0.0.1", port, api_key="wrong", connect_timeout_s=2.0)
    with pytest.raises(HandshakeRejected) as info:
        await client.connect()
    assert info.value.status_code == 401
    return str(info.value)


BAD_INPUTS: dict[str, tuple[Callable[[int], Awaitable[str]], str]] = {
    "garbage bytes": (_garbage, "cannot decode the observation: malformed msgpack"),
    "object dtype": (_object_dtype, "dtype '|O' (object) is not allowed"),
    "text frame": (_text_frame, "expected a binary frame"),
    "wrong shape": (
        _wrong_shape,
        "observation input 'observation/image': expected shape (224, 224, 3), "
        "received (100, 100, 3)",
    ),
    "bad jpeg": (
        _bad_jpeg,
        "observation input 'observation/image': 10 bytes that are not a usable JPEG image",
    ),
    "missing key": (_missing_key, "lacks required input 'observation/wrist_image'"),
    "bad armory map": (_bad_armory_map, "bad __armory__ queue state: __armory__ lacks required"),
    "oversize frame": (_oversize, f"exceeds limit of {MAX_MESSAGE_BYTES} bytes"),
    "wrong api key": (_wrong_api_key, "HTTP 401 (check the API key)"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gets_a_clear_error_while_others_are_served(case: str) -> None:
    """Each bad request gets its own clear error; a concurrent robot is served without a gap."""
    bad, expected = BAD_INPUTS[case]
    policy = make_mock()
    with running_server(
        policy, api_key=API_KEY, max_message_bytes=MAX_MESSAGE_BYTES, max_batch_size=4
    ) as server:

        async def scenario() -> tuple[str, list[float]]:
            round_trips: list[float] = []
            done = asyncio.Event()

            async def good_robot() -> None:
                async with AsyncPolicyClient("127.0.0.1", server.port, api_key=API_KEY) as c:
                    step = 0
                    while not done.is_set() or step < 6:
                        obs = make_obs(42, step)
                        started = time.perf_counter()
                        reply = await c.infer(obs)
                        round_trips.append(time.perf_counter() - started)
                        np.testing.assert_array_equal(
                            reply["actions"], expected_actions(policy, obs)
                        )
                        step += 1

            robot = asyncio.ensure_future(good_robot())
            await asyncio.sleep(0.05)
            try:
                message = await bad(server.port)
            finally:
                done.set()
            await robot
            return message, round_trips

        message, round_trips = run(scenario)
        _wait_for(lambda: server.stats().num_sessions == 0)  # every connection is gone
    assert expected in message
    assert "Traceback" not in message and "File " not in message
    assert len(round_trips) >= 6
    assert max(round_trips) < 0.25, round_trips


def test_client_killed_mid_batch_does_not_disturb_the_others() -> None:
    """A robot process killed while its observation is in the running forward pass: the
    batch's other robots are answered, its chunk is dropped, serving goes on."""
    policy = GatedPolicy(make_mock())
    # The test holds batch 1 until everyone asked: batch 2 is decided when 1 ends.
    with running_server(
        policy, max_batch_size=4, scheduler=make_scheduler("max-batch"), decide_ahead_s=0.0
    ) as server:
        victim_obs = make_obs(77)
        with ThreadPoolExecutor(3) as pool:
            clients = [PolicyClient("127.0.0.1", server.port).connect() for _ in range(3)]
            blocker = pool.submit(clients[0].infer, make_obs(0))
            assert len(policy.next_batch()) == 1  # batch 1: the blocker alone, held
            victim = _start_victim(server)
            others = [pool.submit(clients[i].infer, make_obs(i)) for i in (1, 2)]
            _wait_for(lambda: server.stats().num_requests == 4)
            policy.allow(1)  # batch 1 ends; batch 2 holds the victim and the two others
            blocker.result(5)
            second = policy.next_batch()
            states = [obs["observation/state"] for obs in second]
            assert len(second) == 3
            assert any(np.array_equal(s, victim_obs["observation/state"]) for s in states)
            victim.kill()
            victim.wait(5)
            _wait_for(lambda: server.stats().num_sessions == 3)
            policy.allow(10)
            for i, future in zip((1, 2), others, strict=True):
                reply = future.result(5)
                np.testing.assert_array_equal(
                    reply["actions"], expected_actions(policy, make_obs(i))
                )
            again = clients[1].infer(make_obs(1, 1))
            np.testing.assert_array_equal(
                again["actions"], expected_actions(policy, make_obs(1, 1))
            )
            for client in clients:
                client.close()
        stats = server.stats()
    assert stats.num_dropped_chunks == 1
    assert stats.num_errors == 0


_VICTIM = """
import sys
from armory_client import PolicyClient
from server_harness import make_obs
PolicyClient("127.0.0.1", int(sys.argv[1]), request_timeout_s=30).infer(make_obs(77))
"""


def _start_victim(server: ServerThread) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-c", _VICTIM, str(server.port)], env=env)


def _wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_newer_connection_of_a_robot_closes_the_older_with_1008() -> None:
    """Two connections report the same robot id: the older one is closed (1008)."""
    state = RobotState(
        robot_id="arm",
        action_index=0,
        actions_left=0,
        chunk_start=None,
        control_hz=20.0,
        min_execution_horizon=1,
        max_execution_horizon=10,
    )
    with running_server() as server:

        async def scenario() -> tuple[int | None, str]:
            async with websockets.asyncio.client.connect(
                f"ws://127.0.0.1:{server.port}", compression=None
            ) as old:
                await old.recv()
                await old.send(packb(attach(make_obs(0), state)))
                await old.recv()
                async with AsyncPolicyClient("127.0.0.1", server.port) as new:
                    await new.infer(attach(make_obs(1), state))
                await old.wait_closed()
                return old.close_code, old.close_reason or ""

        code, reason = run(scenario)
    assert code == 1008
    assert "replaced by a newer connection of robot 'arm'" in reason


def test_armory_serve_command_serves_until_interrupted(tmp_path: Path) -> None:
    """`armory serve ... policy:mock ...` serves a request, then exits 0 on SIGINT."""
    args = ["--port", "0", "--server.max-batch-size", "4", "--server.scheduler", "max-batch"]
    args += ["policy:mock", "--policy.latency-profile", "linear"]
    args += ["--policy.linear.intercept-s", "0.01"]
    with armory_serve(*args, announce_lines=2) as (proc, (line, door)):
        assert "armory: serving policy mock" in line, line
        assert door.startswith("armory: openpi WebSocket on ws://127.0.0.1:"), door
        uri = door.split(" on ", 1)[1].split(" ", 1)[0]
        with PolicyClient(uri) as client:
            reply = client.infer(make_obs(3))
        assert reply["actions"].shape == (10, 7)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_port_in_use_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A taken port: ServerThread.start raises OSError; `armory serve` exits 2 with one line."""
    with running_server() as server:
        port = server.port
        with pytest.raises(OSError):
            ServerThread(ArmoryServer(make_mock(), port=port)).start()
        assert main(["serve", "--port", str(port), "--log-level", "ERROR"]) == 2
    assert f"the openpi door cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_server_needs_at_least_one_door_and_can_be_asked_to_stop() -> None:
    """No openpi port and no other door is refused; request_stop sets the event that
    run_server waits on."""
    with pytest.raises(ValueError, match="no front door"):
        ArmoryServer(make_mock(), port=None)
    server = ArmoryServer(make_mock(), port=0)
    assert not server.stop_requested.is_set()
    server.request_stop()
    assert server.stop_requested.is_set()


def test_a_cluster_replica_lets_a_named_armory_robot_go_after_its_reply() -> None:
    """``/move?robot=NAME`` at a replica of ``armory cluster``: the named robot on Armory's
    client is answered its next request, then its connection closes (1012) and the
    request after it is served on a new connection; a plain client (no ``__armory__``
    state) and a name not connected are refused with 404; a server that is no replica
    has no such page."""
    server = ArmoryServer(make_mock(), ServerConfig(max_batch_size=4), port=0, movable=True)
    thread = ServerThread(server).start()
    url = f"http://127.0.0.1:{thread.port}/move?robot="
    try:
        with PolicyClient(port=thread.port) as armory, PolicyClient(port=thread.port) as plain:
            state = every_tick_state("arm-1", 0)
            assert armory.infer(attach(make_obs(1), state))["actions"].shape[0] > 0
            assert plain.infer(make_obs(2))["actions"].shape[0] > 0
            with urllib.request.urlopen(url + "arm-1", timeout=5) as answer:
                assert answer.status == 200 and b"arm-1" in answer.read()
            (plain_name,) = [row.robot for row in thread.stats().robots if not row.named]
            for name in (plain_name, "nobody"):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(url + name, timeout=5)
                assert refused.value.code == 404
            for step in (1, 2):  # answered there, then on a new connection
                later = every_tick_state("arm-1", 8 * step, chunk_start=8 * (step - 1))
                assert armory.infer(attach(make_obs(1, step), later))["actions"].shape[0] > 0
                assert armory.num_connections == step
            assert plain.num_connections == 1
            assert plain.infer(make_obs(2, 1))["actions"].shape[0] > 0
    finally:
        thread.stop()
    with running_server() as plain_server, pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{plain_server.port}/move?robot=x", timeout=5)
    # Not a page there: the request went on to the WebSocket handshake, which refuses it.
    assert refused.value.code == 426 and b"WebSocket" in refused.value.read()
