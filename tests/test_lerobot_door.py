"""The LeRobot gRPC door over real sockets on 127.0.0.1, driven by an in-test gRPC client."""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from armory_client.image_prep import resize_with_pad
from lerobot_client.wire import (
    AsyncInferenceClient,
    TimedObservation,
    install_upstream_classes,
    instructions,
    raw_observation,
    robot_features,
)
from server_harness import FAST_LINEAR, LeRobotCheckpointMock

from armory.engine.config import ServerConfig
from armory.policies.mock import MockPolicy, MockPolicyConfig, mock_actions
from armory.serve import ArmoryServer, ServerThread
from armory.transports.lerobot_core import names_checkpoint
from armory.transports.lerobot_grpc import UNSAFE_PICKLE_OPTION, LeRobotDoorConfig, mismatch
from armory.transports.lerobot_protocol import (
    CHUNK_BYTES,
    TRANSFER_BEGIN,
    TRANSFER_END,
    TRANSFER_MIDDLE,
    TRANSFER_UNKNOWN,
    decode_actions,
    decode_instructions,
)

JOINTS = [f"joint_{i}.pos" for i in range(6)]
CAMERAS = {"front": (224, 224, 3), "wrist": (224, 224, 3)}
FEATURES = robot_features(JOINTS, CAMERAS)


@pytest.fixture(autouse=True)
def upstream_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    install_upstream_classes(monkeypatch)


def make_policy(**overrides: Any) -> MockPolicy:
    options: dict[str, Any] = {"latency_profile": "linear", "linear": FAST_LINEAR, "state_dim": 6}
    options.update(overrides)
    return MockPolicyConfig(**options).make()


@contextmanager
def lerobot_server(
    policy: MockPolicy | None = None, *, max_batch_size: int = 4, **door: Any
) -> Iterator[tuple[ServerThread, MockPolicy]]:
    """An Armory server with only the LeRobot door, on an ephemeral port."""
    policy = policy or make_policy()
    options: dict[str, Any] = {
        "port": 0,
        "allow_unsafe_pickle_on_untrusted_networks": True,
        "actions_wait_s": 0.3,
    }
    options.update(door)
    server = ArmoryServer(
        policy,
        ServerConfig(max_batch_size=max_batch_size),
        port=None,
        doors=[LeRobotDoorConfig(**options).door("127.0.0.1")],
    )
    thread = ServerThread(server).start()
    try:
        yield thread, policy
    finally:
        thread.stop()


def door_port(thread: ServerThread) -> int:
    return thread.server.doors[0].port


def expected_chunk(policy: MockPolicy, raw: dict[str, Any]) -> np.ndarray:
    """The mock's chunk for a raw observation mapped by the default mapping."""
    meta = policy.metadata
    obs = {
        "observation/image": resize_with_pad(raw["front"], 224, 224),
        "observation/wrist_image": resize_with_pad(raw["wrist"], 224, 224),
        "observation/state": np.asarray([raw[j] for j in JOINTS], np.float32),
        "prompt": raw["task"],
    }
    return mock_actions(obs, meta.inputs, meta.action_horizon, meta.action_dim)


def fetch(client: AsyncInferenceClient, timeout_s: float = 5.0) -> bytes:
    """GetActions until a chunk comes (each call waits up to actions_wait_s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = client.get_actions()
        if data:
            return data
    raise AssertionError("no chunk within the timeout")


def start_robot(client: AsyncInferenceClient, *, actions_per_chunk: int = 10) -> None:
    client.ready()
    client.send_instructions(instructions(FEATURES, actions_per_chunk=actions_per_chunk))


def test_round_trip_ready_instructions_observation_actions() -> None:
    """Ready, instructions, GetActions empty, one observation, then its full chunk."""
    with lerobot_server() as (thread, policy), AsyncInferenceClient(door_port(thread)) as client:
        start_robot(client)
        assert client.get_actions() == b""
        raw = raw_observation(1, JOINTS, CAMERAS)
        client.send_observation(TimedObservation(100.0, 0, raw, must_go=True))
        actions = decode_actions(fetch(client))
    chunk = expected_chunk(policy, raw)
    assert [a.timestep for a in actions] == list(range(10))
    assert actions[1].timestamp_s == pytest.approx(100.0 + 1 / 30)
    np.testing.assert_array_equal(np.stack([a.action for a in actions]), chunk)


def test_payload_over_two_mib_streams_in_chunks_and_is_resized() -> None:
    """A 2.4 MB observation goes as BEGIN/END chunks; large frames are resized to 224x224."""
    cameras = {"front": (768, 1024, 3), "wrist": (120, 160, 3)}
    features = robot_features(JOINTS, cameras)
    raw = raw_observation(2, JOINTS, cameras)
    payload = pickle.dumps(TimedObservation(5.0, 0, raw, must_go=True))
    assert len(payload) > CHUNK_BYTES
    with lerobot_server() as (thread, policy), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        client.send_instructions(instructions(features))
        client.send_payload(payload)
        actions = decode_actions(fetch(client))
    np.testing.assert_array_equal(
        np.stack([a.action for a in actions]), expected_chunk(policy, raw)
    )


def test_chunk_with_middle_messages_and_begin_restart() -> None:
    """BEGIN, MIDDLE..., END reassemble; a second BEGIN starts the payload afresh."""
    raw = raw_observation(3, JOINTS, CAMERAS)
    payload = pickle.dumps(TimedObservation(5.0, 0, raw, must_go=True))
    third = len(payload) // 3
    messages = [
        (TRANSFER_BEGIN, b"garbage"),
        (TRANSFER_BEGIN, payload[:third]),
        (TRANSFER_MIDDLE, payload[third : 2 * third]),
        (TRANSFER_END, payload[2 * third :]),
    ]
    with lerobot_server() as (thread, policy), AsyncInferenceClient(door_port(thread)) as client:
        start_robot(client)
        client.send_messages(messages)
        actions = decode_actions(fetch(client))
    np.testing.assert_array_equal(
        np.stack([a.action for a in actions]), expected_chunk(policy, raw)
    )


def test_several_robots_share_batches_and_get_their_own_chunks() -> None:
    """Four robots on four channels: batches hold several of them; each gets its own chunk."""
    slow = make_policy(linear=type(FAST_LINEAR)(intercept_s=0.15, slope_s=0.01))
    results: dict[int, tuple[dict[str, Any], list[Any]]] = {}
    errors: list[BaseException] = []
    with lerobot_server(slow) as (thread, policy):
        barrier = threading.Barrier(4)

        def robot(seed: int) -> None:
            try:
                with AsyncInferenceClient(door_port(thread)) as client:
                    start_robot(client)
                    barrier.wait(5)
                    raw = raw_observation(10 + seed, JOINTS, CAMERAS)
                    client.send_observation(TimedObservation(1.0, 0, raw, must_go=True))
                    results[seed] = (raw, decode_actions(fetch(client)))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=robot, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        stats = thread.stats()
    assert not errors, errors
    assert max(policy.batch_sizes) > 1, policy.batch_sizes
    for raw, actions in results.values():
        np.testing.assert_array_equal(
            np.stack([a.action for a in actions]), expected_chunk(policy, raw)
        )
    assert stats.num_replies == 4


def test_pickle_refused_without_the_unsafe_option() -> None:
    """With the option off, instructions and observations fail with FAILED_PRECONDITION."""
    with (
        lerobot_server(allow_unsafe_pickle_on_untrusted_networks=False) as (thread, _),
        AsyncInferenceClient(door_port(thread)) as client,
    ):
        client.ready()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_instructions(instructions(FEATURES))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert UNSAFE_PICKLE_OPTION in refused.value.details()
        assert "arbitrary code" in refused.value.details()
        raw = raw_observation(1, JOINTS, CAMERAS)
        with pytest.raises(grpc.RpcError) as refused:
            client.send_observation(TimedObservation(1.0, 0, raw))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION


class _Evil:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    """With the option on, a pickle that would run os.system is refused; nothing ran."""
    marker = tmp_path / "pwned"
    with lerobot_server() as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_instructions(pickle.dumps(_Evil(marker)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "system" in refused.value.details()
        client.send_instructions(instructions(FEATURES))
        with pytest.raises(grpc.RpcError) as refused:
            client.send_payload(pickle.dumps(TimedObservation(1.0, 0, {"x": _Evil(marker)})))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not marker.exists()


def test_bad_observation_fails_only_that_robot() -> None:
    """A robot missing a joint gets INVALID_ARGUMENT naming it; another robot is served."""
    with (
        lerobot_server() as (thread, policy),
        AsyncInferenceClient(door_port(thread)) as bad,
        AsyncInferenceClient(door_port(thread)) as good,
    ):
        start_robot(bad)
        start_robot(good)
        raw = raw_observation(4, JOINTS, CAMERAS)
        broken = {k: v for k, v in raw.items() if k != "joint_3.pos"}
        with pytest.raises(grpc.RpcError) as refused:
            bad.send_observation(TimedObservation(1.0, 0, broken))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "joint_3.pos" in refused.value.details()
        wrong = {**raw, "front": np.zeros((224, 224), np.uint8)}
        with pytest.raises(grpc.RpcError) as refused:
            bad.send_observation(TimedObservation(1.0, 0, wrong))
        assert "'front'" in refused.value.details()
        good.send_observation(TimedObservation(1.0, 0, raw, must_go=True))
        actions = decode_actions(fetch(good))
        assert thread.stats().num_errors == 2
    np.testing.assert_array_equal(
        np.stack([a.action for a in actions]), expected_chunk(policy, raw)
    )


def test_observation_before_instructions_is_refused() -> None:
    with lerobot_server() as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_observation(TimedObservation(1.0, 0, raw_observation(1, JOINTS, CAMERAS)))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "SendPolicyInstructions" in refused.value.details()


def test_instructions_that_do_not_fit_the_policy_are_refused() -> None:
    """Seven joints for an 6-value state input, or one camera for two image inputs."""
    with lerobot_server() as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_instructions(instructions(robot_features([*JOINTS, "extra"], CAMERAS)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "7 values" in refused.value.details()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_instructions(instructions(robot_features(JOINTS, {"front": (4, 4, 3)})))
        assert "observation/wrist_image" in refused.value.details()


def test_more_joints_than_action_values_is_refused_at_instructions() -> None:
    """A policy whose actions have 6 values cannot drive 8 joints: refused when the robot
    sends its instructions (LeRobot's client would fail later, running out of values),
    unless the operator allows it."""
    joints = [f"joint_{i}.pos" for i in range(8)]
    features = robot_features(joints, CAMERAS)
    policy = make_policy(state_dim=8, action_dim=6)
    with lerobot_server(policy) as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_instructions(instructions(features))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "actions of 6 values but the robot has 8 joints" in refused.value.details()
    assert "--lerobot.allow-mismatched-policy" in refused.value.details()
    allowed = lerobot_server(policy, allow_mismatched_policy=True)
    with allowed as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        client.send_instructions(instructions(features))


def test_another_policy_type_than_the_served_one_is_refused() -> None:
    """A robot asking for 'diffusion' from a server of LeRobot's 'act' is told what is
    served; a policy without a LeRobot type (the mock) serves any robot."""
    asked = decode_instructions(instructions(FEATURES, policy_type="diffusion"))
    mock = make_policy().metadata
    served = dataclasses.replace(mock, name="lerobot-act", extra={"lerobot_type": "act"})
    refusal = mismatch(asked, served)
    assert refusal is not None
    assert "serves the LeRobot policy type 'act' ('lerobot-act'), not 'diffusion'" in refusal
    assert mismatch(decode_instructions(instructions(FEATURES)), served) is None
    assert mismatch(asked, mock) is None


CHECKPOINT = "/srv/checkpoints/models--user--act_cube/snapshots/0a1b2c"


def test_another_checkpoint_than_the_served_one_is_refused_over_the_door() -> None:
    """A robot asking for another checkpoint is refused at SendPolicyInstructions with
    what is served (and its observations are refused); the served directory, its last folders or
    its hub repository id are accepted; the operator can allow any."""
    config = MockPolicyConfig(latency_profile="linear", linear=FAST_LINEAR, state_dim=6)
    policy = LeRobotCheckpointMock(config, CHECKPOINT)
    other = instructions(FEATURES, pretrained_name_or_path="user/act_towel")
    with lerobot_server(policy) as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        with pytest.raises(grpc.RpcError) as refused:
            client.send_instructions(other)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = refused.value.details()
        assert f"serves the LeRobot checkpoint {CHECKPOINT!r} ('lerobot-act')" in details
        assert "not 'user/act_towel'" in details
        assert "--lerobot.allow-mismatched-policy" in details
        raw = raw_observation(1, JOINTS, CAMERAS)
        with pytest.raises(grpc.RpcError) as not_instructed:
            client.send_observation(TimedObservation(0.0, 0, raw))
        assert not_instructed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        for name in ("user/act_cube", "snapshots/0a1b2c", CHECKPOINT, CHECKPOINT + "/"):
            client.send_instructions(instructions(FEATURES, pretrained_name_or_path=name))
        client.send_observation(TimedObservation(0.0, 0, raw))
        assert len(decode_actions(fetch(client))) == 10
    allowed = lerobot_server(policy, allow_mismatched_policy=True)
    with allowed as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        client.send_instructions(other)


@pytest.mark.parametrize(
    ("asked", "served", "named"),
    [
        ("act_cube", "/ckpt/user/act_cube", True),
        ("user/act_cube", "/ckpt/user/act_cube", True),
        ("./act_cube/", "/ckpt/user/act_cube", True),
        ("/ckpt/user/act_cube", "/ckpt/user/act_cube", True),
        ("other/act_cube", "/ckpt/user/act_cube", False),
        ("cube", "/ckpt/user/act_cube", False),
        ("", "/ckpt/user/act_cube", False),
        ("/", "/ckpt/user/act_cube", False),
        ("user/act_cube", "/hf/hub/models--user--act_cube/snapshots/abc", True),
        ("user/act_towel", "/hf/hub/models--user--act_cube/snapshots/abc", False),
    ],
)
def test_which_names_name_the_served_checkpoint(asked: str, served: str, named: bool) -> None:
    assert names_checkpoint(asked, served) is named


@pytest.mark.parametrize(
    ("messages", "code", "words"),
    [
        ([(TRANSFER_UNKNOWN, b"x")], grpc.StatusCode.INVALID_ARGUMENT, "transfer_state"),
        ([(TRANSFER_BEGIN, b"x")], grpc.StatusCode.INVALID_ARGUMENT, "TRANSFER_END"),
        ([(TRANSFER_END, b"not a pickle")], grpc.StatusCode.INVALID_ARGUMENT, "pickle"),
        (
            [(TRANSFER_BEGIN, b"x" * 3000), (TRANSFER_END, b"x" * 3000)],
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "limit of 4096",
        ),
    ],
)
def test_malformed_streams_get_clear_statuses(
    messages: list[tuple[int, bytes]], code: grpc.StatusCode, words: str
) -> None:
    with (
        lerobot_server(max_payload_bytes=4096) as (thread, _),
        AsyncInferenceClient(door_port(thread)) as client,
    ):
        start_robot(client)
        with pytest.raises(grpc.RpcError) as refused:
            client.send_messages(messages)
        assert refused.value.code() == code
        assert words in refused.value.details()


def test_identical_observations_are_all_served() -> None:
    """No similarity filter: the same joint state again (later timestep) gets a new chunk."""
    with lerobot_server() as (thread, _), AsyncInferenceClient(door_port(thread)) as client:
        start_robot(client)
        raw = raw_observation(5, JOINTS, CAMERAS)
        client.send_observation(TimedObservation(1.0, 0, raw, must_go=True))
        first = decode_actions(fetch(client))
        client.send_observation(TimedObservation(1.2, 6, raw))
        second = decode_actions(fetch(client))
    assert [a.timestep for a in second] == list(range(6, 16))
    np.testing.assert_array_equal(
        np.stack([a.action for a in second]), np.stack([a.action for a in first])
    )


def test_actions_per_chunk_and_policy_name_mismatches_are_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A robot asking for 'act' and 4 actions gets the mock's first 4 rows, and warnings."""
    with lerobot_server() as (thread, policy), AsyncInferenceClient(door_port(thread)) as client:
        client.ready()
        with caplog.at_level(logging.INFO, logger="armory.transports.lerobot_grpc"):
            client.send_instructions(instructions(FEATURES, actions_per_chunk=4))
            client.send_instructions(instructions(FEATURES, actions_per_chunk=50))
        assert "serves 'mock' and never loads another" in caplog.text
        assert "asks for 50 actions per chunk; the policy's horizon is 10" in caplog.text
        client.send_instructions(instructions(FEATURES, actions_per_chunk=4))
        raw = raw_observation(6, JOINTS, CAMERAS)
        client.send_observation(TimedObservation(1.0, 0, raw, must_go=True))
        actions = decode_actions(fetch(client))
    np.testing.assert_array_equal(
        np.stack([a.action for a in actions]), expected_chunk(policy, raw)[:4]
    )


def test_ready_again_restarts_and_idle_robots_are_forgotten() -> None:
    """Ready twice keeps one session; a robot silent for session_timeout_s loses it."""
    with (
        lerobot_server(session_timeout_s=0.8) as (thread, _),
        AsyncInferenceClient(door_port(thread)) as client,
    ):
        client.ready()
        client.ready()
        assert thread.stats().num_sessions == 1
        deadline = time.monotonic() + 5
        while thread.stats().num_sessions and time.monotonic() < deadline:
            time.sleep(0.1)
        assert thread.stats().num_sessions == 0


def test_door_config_checks_and_closed_door() -> None:
    with pytest.raises(ValueError, match="LeRobot door is closed"):
        LeRobotDoorConfig().door("127.0.0.1")
    with pytest.raises(ValueError, match="actions-wait-s"):
        LeRobotDoorConfig(port=0, actions_wait_s=20.0)
    with pytest.raises(ValueError, match="camera=input"):
        LeRobotDoorConfig(port=0, mapping=type(LeRobotDoorConfig().mapping)(images=("front",)))
