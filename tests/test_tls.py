"""TLS on the openpi door: ``wss://`` with the server's certificate pair, reached by
Armory's own clients (sync and asyncio) and by HTTPS health checks; config errors."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from armory_client import (
    AsyncPolicyClient,
    CertificateRejected,
    ConnectTimeout,
    HandshakeRejected,
    PolicyClient,
)
from server_harness import expected_actions, make_mock, make_obs, running_server
from tls_certs import CertificateFiles, write_test_certificates

from armory.cluster.front_door import FrontDoor
from armory.cluster.replica_table import ReplicaAddress, ReplicaTable
from armory.cluster.supervisor import Supervisor, SupervisorConfig
from armory.engine.config import ServerConfig
from armory.placement.base import ReplicaProfile
from armory.placement.registry import make_placement
from armory.policies.base import conform_observation
from armory.serve import ArmoryServer, ServerThread
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.tickets import TicketGate
from armory.transports.tls import server_ssl_context, server_trust

API_KEY = "tls-key"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return write_test_certificates(tmp_path_factory.mktemp("certs"))


def _tls(certs: CertificateFiles) -> dict[str, str]:
    return {"tls_cert_file": str(certs.cert_file), "tls_key_file": str(certs.key_file)}


def _trust(certs: CertificateFiles) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs.ca_file))


def test_armory_clients_round_trip_over_wss(certs: CertificateFiles) -> None:
    """The blocking and the asyncio client, trusting the CA, get their own chunks over TLS."""
    policy = make_mock()
    obs = make_obs(1)
    expected = expected_actions(policy, conform_observation(obs, policy.metadata.inputs))
    with running_server(policy, api_key=API_KEY, **_tls(certs)) as server:
        assert server.uri == f"wss://127.0.0.1:{server.port}"
        with PolicyClient(server.uri, api_key=API_KEY, ssl_context=_trust(certs)) as client:
            np.testing.assert_array_equal(client.infer(obs)["actions"], expected)

        async def infer_async() -> np.ndarray:
            async with AsyncPolicyClient(
                server.uri, api_key=API_KEY, ssl_context=_trust(certs)
            ) as client:
                return (await client.infer(obs))["actions"]

        np.testing.assert_array_equal(asyncio.run(infer_async()), expected)
        assert server.stats().num_errors == 0


def test_untrusted_certificate_is_refused_at_once(certs: CertificateFiles) -> None:
    """A client that does not trust the server's certificate fails at once, saying why,
    instead of retrying until its connect timeout."""
    with running_server(api_key=API_KEY, **_tls(certs)) as server:
        start_s = time.monotonic()
        client = PolicyClient(server.uri, api_key=API_KEY, connect_timeout_s=20.0)
        with pytest.raises(CertificateRejected, match="not trusted"):
            client.connect()
        assert time.monotonic() - start_s < 5.0


def test_wrong_key_over_wss_is_refused(certs: CertificateFiles) -> None:
    """TLS does not replace the API key: a wrong key still gets HTTP 401."""
    with running_server(api_key=API_KEY, **_tls(certs)) as server:
        client = PolicyClient(server.uri, api_key="wrong", ssl_context=_trust(certs))
        with pytest.raises(HandshakeRejected, match="401"):
            client.connect()


def test_plaintext_client_cannot_reach_a_tls_door(certs: CertificateFiles) -> None:
    """A ws:// client gets no connection to a door that speaks only TLS."""
    with running_server(api_key=API_KEY, **_tls(certs)) as server:
        client = PolicyClient(
            f"ws://127.0.0.1:{server.port}", api_key=API_KEY, connect_timeout_s=1.0
        )
        with pytest.raises(ConnectTimeout):
            client.connect()


def test_healthz_answers_over_https(certs: CertificateFiles) -> None:
    """GET /healthz answers OK over HTTPS on the TLS door."""
    with running_server(api_key=API_KEY, **_tls(certs)) as server:
        url = f"https://127.0.0.1:{server.port}/healthz"
        with urllib.request.urlopen(url, timeout=5, context=_trust(certs)) as response:
            assert response.read() == b"OK\n"


def test_the_door_speaks_tls_1_2_even_to_a_client_that_prefers_1_3(
    certs: CertificateFiles,
) -> None:
    """The openpi door negotiates TLS 1.2 (MAX_TLS_VERSION: Python 3.11's asyncio TLS can
    lose a TLS 1.3 client's first request, docs/security.md) with a client offering 1.3."""
    context = _trust(certs)
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    with (
        running_server(api_key=API_KEY, **_tls(certs)) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() == "TLSv1.2"


def test_ssl_context_needs_a_wss_uri() -> None:
    """A TLS context with a ws:// address is a mistake the client names."""
    with pytest.raises(ValueError, match="wss://"):
        PolicyClient("127.0.0.1", 8000, ssl_context=ssl.create_default_context())


def test_certificate_and_key_go_together(certs: CertificateFiles) -> None:
    """One of the pair alone is refused when the config is built."""
    with pytest.raises(ValueError, match=r"go together: got only --server\.tls-cert-file"):
        ServerConfig(tls_cert_file=str(certs.cert_file))
    with pytest.raises(ValueError, match=r"got only --server\.tls-key-file"):
        ServerConfig(tls_key_file=str(certs.key_file))


def test_unreadable_or_mismatched_pair_fails_the_start(
    certs: CertificateFiles, tmp_path: Path
) -> None:
    """A missing file or a key of another certificate stops the start, naming the files."""
    other = write_test_certificates(tmp_path)
    for cert_file, key_file in [
        (str(tmp_path / "missing.pem"), str(certs.key_file)),
        (str(certs.cert_file), str(other.key_file)),
    ]:
        server = ArmoryServer(
            make_mock(),
            ServerConfig(tls_cert_file=cert_file, tls_key_file=key_file),
            host="127.0.0.1",
            port=0,
        )

        async def start(server: ArmoryServer = server) -> None:
            await server.start()

        with pytest.raises(OSError, match="cannot load the TLS certificate") as info:
            asyncio.run(start())
        assert cert_file in str(info.value) and key_file in str(info.value)


def test_groot_door_says_it_is_plaintext(
    certs: CertificateFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """GR00T's client has no TLS: with a certificate set, its door warns that it is not
    covered and should be tunnelled."""
    server = ArmoryServer(
        make_mock(),
        ServerConfig(**_tls(certs)),
        port=None,
        doors=[GrootDoorConfig(port=0).door("127.0.0.1")],
    )
    with caplog.at_level(logging.WARNING), ServerThread(server):
        pass
    assert "GR00T door" in caplog.text and "plaintext" in caplog.text and "tunnel" in caplog.text


def test_a_cluster_front_door_and_its_replicas_speak_tls(
    certs: CertificateFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """`armory cluster` with a certificate: the front door speaks wss:// and redirects to
    the replicas' wss:// doors, the supervisor reads the replicas over TLS trusting the
    cluster's CA, and a robot that trusts the CA is served through the door with its key.
    A supervisor that does not trust the certificate admits no replica and says why."""
    config = ServerConfig(max_batch_size=4, **_tls(certs))
    door_context = server_ssl_context(config)
    trust_replicas = server_trust(config, str(certs.ca_file))

    async def scenario() -> None:
        servers = [
            ArmoryServer(
                make_mock(), config, port=0, api_key=API_KEY, tickets=TicketGate(API_KEY, f"r{k}")
            )
            for k in range(2)
        ]
        for server in servers:
            await server.start()
        announced = [
            ReplicaAddress(replica_id=f"r{k}", host="127.0.0.1", openpi_port=s.port, tls=True)
            for k, s in enumerate(servers)
        ]

        async def registry() -> list[ReplicaAddress]:
            return announced

        door = FrontDoor(
            ReplicaTable(2),
            make_placement("fluid", [ReplicaProfile((0.05, 0.06, 0.07, 0.08))] * 2),
            port=0,
            api_key=API_KEY,
            ssl_context=door_context,
        )
        await door.start()
        try:
            untrusting = Supervisor(
                door,
                registry,
                SupervisorConfig(),
                api_key=API_KEY,
                ssl_context=ssl.create_default_context(),
            )
            with caplog.at_level(logging.WARNING, logger="armory.cluster.supervisor"):
                await untrusting.round()
                await untrusting.round()
            assert door.table.num_up == 0
            told = [r for r in caplog.records if "certificate verify failed" in r.getMessage()]
            assert len(told) == 2  # once per replica, not once per round
            supervisor = Supervisor(
                door, registry, SupervisorConfig(), api_key=API_KEY, ssl_context=trust_replicas
            )
            await supervisor.round()
            assert door.table.num_up == 2
            assert all(d["openpi"].startswith("wss://") for d in map(_doors, door.listing()))
            uri = f"wss://127.0.0.1:{door.port}/?robot=arm-1"
            async with AsyncPolicyClient(uri, api_key=API_KEY, ssl_context=_trust(certs)) as robot:
                assert (await robot.infer(make_obs(3)))["actions"].size
            assert sum(s.engine.stats().num_requests for s in servers) == 1
        finally:
            await door.stop()
            for server in servers:
                await server.stop()

    asyncio.run(scenario())


def _doors(entry: dict[str, object]) -> dict[str, str]:
    doors = entry["doors"]
    assert isinstance(doors, dict)
    return doors
