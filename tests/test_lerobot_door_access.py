"""Who the LeRobot gRPC door serves: the API key in gRPC metadata, an address allowlist for
clients that cannot send one, and TLS with the server's certificate pair."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from lerobot_client.wire import (
    AsyncInferenceClient,
    TimedObservation,
    install_upstream_classes,
    instructions,
    raw_observation,
    robot_features,
)
from server_harness import FAST_LINEAR, armory_serve
from tls_certs import CertificateFiles, write_test_certificates

from armory.engine.config import ServerConfig
from armory.policies.mock import MockPolicyConfig
from armory.serve import ArmoryServer, ServerThread
from armory.transports.grpc_access import CallAccess, parse_networks, peer_address
from armory.transports.lerobot_grpc import LeRobotDoorConfig
from armory.transports.lerobot_protocol import decode_actions

JOINTS = [f"joint_{i}.pos" for i in range(6)]
CAMERAS = {"front": (64, 64, 3), "wrist": (64, 64, 3)}
API_KEY = "door-key"


@pytest.fixture(autouse=True)
def upstream_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    install_upstream_classes(monkeypatch)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return write_test_certificates(tmp_path_factory.mktemp("certs"))


@contextmanager
def door(
    *, api_key: str | None = None, server: ServerConfig | None = None, **options: Any
) -> Iterator[tuple[ServerThread, int]]:
    """A server with only the LeRobot door (pickle on), on an ephemeral port."""
    policy = MockPolicyConfig(latency_profile="linear", linear=FAST_LINEAR, state_dim=6).make()
    config = LeRobotDoorConfig(
        port=0, allow_unsafe_pickle_on_untrusted_networks=True, actions_wait_s=0.3, **options
    )
    armory = ArmoryServer(
        policy,
        server or ServerConfig(),
        port=None,
        doors=[config.door("127.0.0.1", api_key=api_key)],
    )
    with ServerThread(armory) as thread:
        yield thread, armory.doors[0].port  # type: ignore[attr-defined]


def round_trip(client: AsyncInferenceClient) -> int:
    """Ready, instructions, one observation; the number of actions that came back."""
    client.ready()
    client.send_instructions(instructions(robot_features(JOINTS, CAMERAS)))
    client.send_observation(TimedObservation(1.0, 0, raw_observation(1, JOINTS, CAMERAS), True))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        data = client.get_actions()
        if data:
            return len(decode_actions(data))
    raise AssertionError("no chunk within 5 s")


def refused_code(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value.code()


def test_key_required_in_metadata_when_the_server_has_one(tmp_path: Path) -> None:
    """Without the key, or with a wrong one, every call fails UNAUTHENTICATED before any of
    it is read (a pickle is never opened, no session is opened); with it, the robot is served."""
    marker = tmp_path / "pwned"
    evil = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()  # os.system("touch ...")
    with door(api_key=API_KEY) as (thread, port):
        for key in (None, "wrong", f"Api-Key {API_KEY}"):
            with AsyncInferenceClient(port, api_key=key, timeout_s=5) as client:
                assert refused_code(client.ready) == grpc.StatusCode.UNAUTHENTICATED
                assert refused_code(lambda c=client: c.send_instructions(evil)) == (
                    grpc.StatusCode.UNAUTHENTICATED
                )
                assert refused_code(lambda c=client: c.send_payload(evil)) == (
                    grpc.StatusCode.UNAUTHENTICATED
                )
                assert refused_code(client.get_actions) == grpc.StatusCode.UNAUTHENTICATED
        assert thread.stats().num_sessions == 0
        with AsyncInferenceClient(port, api_key=API_KEY) as client:
            assert round_trip(client) == 10
        with AsyncInferenceClient(port) as client, pytest.raises(grpc.RpcError) as refused:
            client.ready()
        assert "authorization: Api-Key <key>" in refused.value.details()
        assert API_KEY not in refused.value.details()
    assert not marker.exists()


def test_allowed_network_needs_no_key_and_others_still_do() -> None:
    """A keyless client (as LeRobot's RobotClient is) is served from an allowed network; from
    outside it, only with the key."""
    with (
        door(api_key=API_KEY, allowed_networks=("127.0.0.1/32",)) as (_, port),
        AsyncInferenceClient(port) as client,
    ):
        assert round_trip(client) == 10
    with door(api_key=API_KEY, allowed_networks=("10.0.0.0/8", "::1")) as (_, port):
        with AsyncInferenceClient(port) as client:
            assert refused_code(client.ready) == grpc.StatusCode.UNAUTHENTICATED
        with AsyncInferenceClient(port, api_key=API_KEY) as client:
            assert round_trip(client) == 10


def test_allowlist_alone_serves_only_its_networks() -> None:
    """With networks and no key, a caller from elsewhere cannot get in at all."""
    with (
        door(allowed_networks=("127.0.0.0/8",)) as (_, port),
        AsyncInferenceClient(port) as client,
    ):
        assert round_trip(client) == 10
    with (
        door(allowed_networks=("192.168.0.0/16",)) as (_, port),
        AsyncInferenceClient(port, api_key="any") as client,
    ):
        assert refused_code(client.ready) == grpc.StatusCode.UNAUTHENTICATED


def test_tls_door_serves_a_secure_channel_only(certs: CertificateFiles) -> None:
    """With the server's pair the door speaks TLS: a channel trusting the CA is served (with
    its key); a plaintext channel gets no connection."""
    tls = ServerConfig(tls_cert_file=str(certs.cert_file), tls_key_file=str(certs.key_file))
    with door(api_key=API_KEY, server=tls) as (thread, port):
        assert "(TLS)" in thread.server.doors[0].describe()  # type: ignore[attr-defined]
        ca = certs.ca_file.read_bytes()
        with AsyncInferenceClient(port, api_key=API_KEY, root_certificates=ca) as client:
            assert round_trip(client) == 10
        with AsyncInferenceClient(port, api_key=API_KEY, timeout_s=2) as client:
            assert refused_code(client.ready) == grpc.StatusCode.UNAVAILABLE


def test_no_tls_option_keeps_the_door_plaintext(certs: CertificateFiles) -> None:
    """--lerobot.no-tls serves LeRobot's plaintext client while the openpi door has TLS."""
    tls = ServerConfig(tls_cert_file=str(certs.cert_file), tls_key_file=str(certs.key_file))
    with door(server=tls, tls=False) as (thread, port):
        assert "(plaintext)" in thread.server.doors[0].describe()  # type: ignore[attr-defined]
        with AsyncInferenceClient(port) as client:
            assert round_trip(client) == 10


def test_peer_addresses_and_networks() -> None:
    """gRPC peer strings of every form give their address; bad networks are named."""
    assert peer_address("ipv4:10.1.2.3:5555") == ipaddress.ip_address("10.1.2.3")
    assert peer_address("ipv6:[::1]:5555") == ipaddress.ip_address("::1")
    assert peer_address("ipv6:%5B::1%5D:5555") == ipaddress.ip_address("::1")
    assert peer_address("ipv6:[::ffff:10.0.0.7]:80") == ipaddress.ip_address("10.0.0.7")
    assert peer_address("ipv6:[fe80::1%eth0]:80") == ipaddress.ip_address("fe80::1")
    assert peer_address("unix:/tmp/socket") is None
    assert peer_address("ipv4:not-an-address:1") is None
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        LeRobotDoorConfig(port=0, allowed_networks=("10.0.0.0/33",))
    networks = parse_networks(["10.0.0.0/24"], option="x")
    access = CallAccess(api_key=None, networks=networks)
    assert access.allows(None, "ipv4:10.0.0.9:1")
    assert not access.allows((("authorization", "Api-Key anything"),), "ipv4:10.0.1.9:1")
    assert CallAccess().allows(None, "unix:/x")


def test_armory_serve_applies_its_key_and_certificate_to_the_lerobot_door(
    certs: CertificateFiles,
) -> None:
    """`armory serve --api-key K --server.tls-*`: the openpi door announces wss://, the
    LeRobot door TLS and the key, and refuses a keyless call over a secure channel."""
    args = ["--port", "0", "--api-key", API_KEY, "--lerobot.port", "0"]
    args += ["--server.tls-cert-file", str(certs.cert_file)]
    args += ["--server.tls-key-file", str(certs.key_file)]
    args += ["policy:mock", "--policy.latency-profile", "linear"]
    with armory_serve(*args, announce_lines=3) as (_, lines):
        assert " on wss://127.0.0.1:" in lines[1] and "https://" in lines[1], lines
        assert "(TLS); API key required;" in lines[2], lines
        port = int(lines[2].split(" on ", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
        ca = certs.ca_file.read_bytes()
        with AsyncInferenceClient(port, root_certificates=ca, timeout_s=5) as client:
            assert refused_code(client.ready) == grpc.StatusCode.UNAUTHENTICATED
        with AsyncInferenceClient(port, api_key=API_KEY, root_certificates=ca) as client:
            client.ready()
