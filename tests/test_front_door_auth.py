"""The cluster's front door with an API key, without Ray: the redirect's ticket (pure),
and over real sockets robots holding the key reach their replica through the redirect
(both Armory clients and openpi's own), a wrong key is refused at the front door, a bad
ticket at the replica, and /place answers GR00T robots, who then use the key there."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import pytest
from armory_client import AsyncPolicyClient, HandshakeRejected, PolicyClient
from server_harness import FAST_LINEAR, make_obs

from armory.cli import Serve
from armory.cluster.front_door import FrontDoor
from armory.cluster.ray_cluster import replica_options
from armory.cluster.replica_table import ReplicaAddress, ReplicaTable
from armory.cluster.supervisor import Supervisor, SupervisorConfig
from armory.engine.config import ServerConfig
from armory.placement.base import ReplicaProfile
from armory.placement.registry import make_placement
from armory.policies.mock import MockPolicyConfig
from armory.serve import ArmoryServer
from armory.transports import http
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.tickets import MAX_TICKET_TTL_S, TicketGate, TicketRefused, ticket_query

pytest.importorskip("zmq")  # the replicas open a GR00T door too
from groot_client import GrootClient, groot_observation

GPU = ReplicaProfile((0.05, 0.06, 0.07, 0.08))
KEY = "cluster-key"


class FakeClock:
    """Unix seconds that move only when told."""

    def __init__(self, now_s: float = 1_800_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _front_door(clock: FakeClock, **kwargs: object) -> FrontDoor:
    door = FrontDoor(
        ReplicaTable(2),
        make_placement("least-robots", [GPU] * 2),
        port=0,
        wall_clock=clock,
        **kwargs,  # type: ignore[arg-type]
    )
    for slot in range(2):
        door.replica_up(ReplicaAddress(f"r{slot}", "127.0.0.1", 9000 + 10 * slot), None)
    return door


def test_with_a_key_the_redirect_carries_a_ticket_for_that_replica_and_robot() -> None:
    """The Location names the replica's door with a ticket its gate admits once, within the
    ticket's life only; without a key the Location is the bare door."""
    clock = FakeClock()
    door = _front_door(clock, api_key=KEY, ticket_ttl_s=5.0)
    status, _, location = door.answer("/?robot=arm-1", f"Api-Key {KEY}")
    assert status == HTTPStatus.TEMPORARY_REDIRECT and location is not None
    assert location.startswith("ws://127.0.0.1:9000/?robot=arm-1&ticket=")
    target = location.removeprefix("ws://127.0.0.1:9000")
    other = TicketGate(KEY, "r1", clock=clock)
    with pytest.raises(TicketRefused, match="not this replica's"):
        other.admit(target)
    gate = TicketGate(KEY, "r0", clock=clock)
    clock.now_s += 5.0
    with pytest.raises(TicketRefused, match=r"expired 0\.0 s ago"):
        gate.admit(target)
    clock.now_s -= 0.01
    gate.admit(target)
    with pytest.raises(TicketRefused, match="used already"):
        gate.admit(target)
    assert door.answer("/?robot=arm-1", "Api-Key wrong")[0] == HTTPStatus.UNAUTHORIZED
    plain = _front_door(clock)
    assert plain.answer("/?robot=arm-1", None)[2] == "ws://127.0.0.1:9000"


def test_an_anonymous_robot_gets_a_ticket_without_a_name() -> None:
    """A robot that gives no name gets a ticket for no name, which its replica admits."""
    clock = FakeClock()
    location = _front_door(clock, api_key=KEY).answer("/", f"Api-Key {KEY}")[2]
    assert location is not None and "robot=" not in location
    TicketGate(KEY, "r0", clock=clock).admit(location.removeprefix("ws://127.0.0.1:9000"))


def test_the_gate_forgets_expired_tickets_and_refuses_long_lived_ones() -> None:
    """A gate remembers each admitted ticket until it expires, no longer; a ticket good
    for longer than the most a front door issues is refused; so are malformed ones."""
    clock = FakeClock()
    gate = TicketGate(KEY, "r0", clock=clock)
    for robot in ("a", "b"):
        gate.admit("/?" + ticket_query(KEY, audience="r0", robot=robot, expires_s=clock() + 2))
    assert gate.num_remembered == 2
    clock.now_s += 3
    gate.admit("/?" + ticket_query(KEY, audience="r0", robot="c", expires_s=clock() + 2))
    assert gate.num_remembered == 1
    far = ticket_query(KEY, audience="r0", robot="d", expires_s=clock() + MAX_TICKET_TTL_S + 1)
    with pytest.raises(TicketRefused, match="more than 60 s"):
        gate.admit("/?" + far)
    for query, reason in [
        ("ticket=a&ticket=b", "one ticket"),
        ("ticket=" + "1" * 200, "longer than"),
        ("ticket=x.abc", "malformed"),
        ("ticket=123.%FF%FE", "malformed"),
        ("&".join(f"k{i}=1" for i in range(20)), "unreadable query"),
    ]:
        with pytest.raises(TicketRefused, match=reason):
            gate.admit("/?" + query)
    with pytest.raises(ValueError, match="ticket_ttl_s"):
        _front_door(clock, api_key=KEY, ticket_ttl_s=0.0)


def test_a_ticket_opens_only_a_robots_handshake_not_stats_or_pages() -> None:
    """On a replica, a ticket stands in for the key at ``/`` only: /stats still needs it."""
    clock = FakeClock()
    gate = TicketGate(KEY, "r0", clock=clock)
    query = ticket_query(KEY, audience="r0", robot="a", expires_s=clock() + 2)
    kwargs = {"api_key": KEY, "stats": lambda: {}, "tickets": gate}
    answer = http.route(f"/stats?{query}", None, **kwargs)  # type: ignore[arg-type]
    assert isinstance(answer, http.HttpAnswer) and answer.status == HTTPStatus.UNAUTHORIZED
    assert http.route(f"/?{query}", None, **kwargs) is None  # type: ignore[arg-type]


@dataclass
class Cluster:
    """Two key-protected replicas of the mock policy behind a front door."""

    door: FrontDoor
    servers: list[ArmoryServer]

    @property
    def front_uri(self) -> str:
        return f"ws://127.0.0.1:{self.door.port}"

    def requests_served(self) -> list[int]:
        return [server.engine.stats().num_requests for server in self.servers]


def _replica(replica_id: str) -> tuple[ArmoryServer, ReplicaAddress]:
    """A replica's server built as ``armory cluster`` builds one (openpi and GR00T doors),
    not yet started, and its address once started."""
    options = replica_options(
        Serve(
            port=0,
            api_key=KEY,
            server=ServerConfig(max_batch_size=4),
            groot=GrootDoorConfig(port=0),
            policy=MockPolicyConfig(latency_profile="linear", linear=FAST_LINEAR),
        )
    )
    return options.make_server(ticket_audience=replica_id), ReplicaAddress(
        replica_id=replica_id, host="127.0.0.1", openpi_port=0
    )


@asynccontextmanager
async def running_cluster() -> AsyncIterator[Cluster]:
    made = [_replica(f"r{k}") for k in range(2)]
    servers = [server for server, _ in made]
    door = FrontDoor(
        ReplicaTable(2), make_placement("least-robots", [GPU] * 2), port=0, api_key=KEY
    )

    async def registry() -> list[ReplicaAddress]:
        return [
            dataclasses.replace(address, openpi_port=server.port, groot_port=server.doors[0].port)
            for server, address in made
        ]

    try:
        for server in servers:
            await server.start()
        await door.start()
        await Supervisor(door, registry, SupervisorConfig(), api_key=KEY).round()
        assert door.table.num_up == 2
        yield Cluster(door, servers)
    finally:
        await door.stop()
        for server in servers:
            await server.stop()  # one never started stops at once


def test_both_clients_reach_their_replica_through_the_front_door_with_the_key() -> None:
    """The blocking and the asyncio client, holding the key, are redirected to their
    replicas and get chunks there; the two robots are spread over both replicas."""

    async def scenario() -> None:
        async with running_cluster() as cluster:
            blocking = PolicyClient(
                f"{cluster.front_uri}/?robot=arm-1", api_key=KEY, request_timeout_s=10.0
            )
            try:
                reply = await asyncio.to_thread(blocking.infer, make_obs(1))
                assert reply["actions"].shape[0] > 0
            finally:
                blocking.close()
            async with AsyncPolicyClient(
                f"{cluster.front_uri}/?robot=arm-2", api_key=KEY, request_timeout_s=10.0
            ) as client:
                assert (await client.infer(make_obs(2)))["actions"].shape[0] > 0
            assert sorted(cluster.requests_served()) == [1, 1]

    asyncio.run(scenario())


OPENPI_PYTHON = Path(__file__).resolve().parents[1] / ".venv-openpi" / "bin" / "python"
_OPENPI_SCRIPT = """
import sys
import numpy as np
from openpi_client import websocket_client_policy

policy = websocket_client_policy.WebsocketClientPolicy(
    host="127.0.0.1", port=int(sys.argv[1]), api_key=sys.argv[2]
)
image = np.zeros((224, 224, 3), dtype=np.uint8)
obs = {"observation/image": image, "observation/wrist_image": image,
       "observation/state": np.zeros(8), "prompt": "pick"}
print(policy.infer(obs)["actions"].shape)
"""


def _openpi_websockets() -> tuple[int, ...]:
    """The websockets version of .venv-openpi, (0,) when it has none."""
    if not OPENPI_PYTHON.exists():
        return (0,)
    command = [str(OPENPI_PYTHON), "-c", "import websockets; print(websockets.__version__)"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return tuple(int(part) for part in done.stdout.split(".")[:2]) if done.returncode == 0 else (0,)


def test_the_unmodified_openpi_client_gets_through_with_its_key() -> None:
    """openpi-client 0.1.2 (its websockets, from 17.1, follows redirects) with the key is
    redirected to a replica and answered there; with a wrong key the front door refuses it."""
    if _openpi_websockets() < (17, 1):
        pytest.skip(".venv-openpi (scripts/test.sh) is absent or its websockets is before 17.1")

    async def scenario() -> None:
        async with running_cluster() as cluster:

            def run(key: str) -> subprocess.CompletedProcess[str]:
                command = [str(OPENPI_PYTHON), "-c", _OPENPI_SCRIPT, str(cluster.door.port), key]
                return subprocess.run(command, capture_output=True, text=True, timeout=60)

            done = await asyncio.to_thread(run, KEY)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "(10, 7)"
            assert sorted(cluster.requests_served()) == [0, 1]
            refused = await asyncio.to_thread(run, "wrong-key")
            assert refused.returncode != 0 and "HTTP 401" in refused.stderr

    asyncio.run(scenario())


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_a_missing_or_wrong_key_is_refused_at_the_front_door(key: str | None) -> None:
    """Without the key, or with a wrong one, the front door answers 401 and places no one."""

    async def scenario() -> None:
        async with running_cluster() as cluster:
            client = PolicyClient(
                f"{cluster.front_uri}/?robot=arm-1", api_key=key, connect_timeout_s=5.0
            )
            with pytest.raises(HandshakeRejected, match="HTTP 401"):
                await asyncio.to_thread(client.connect)
            assert cluster.door.placement.replica_of("arm-1") is None
            assert cluster.requests_served() == [0, 0]

    asyncio.run(scenario())


def test_place_answers_groot_robots_with_the_key_and_refuses_without() -> None:
    """GET /place needs the key as the doors do; with it a GR00T robot gets its replica's
    GR00T door and is answered there with the key as its api_token."""

    async def scenario() -> None:
        async with running_cluster() as cluster:
            url = f"http://127.0.0.1:{cluster.door.port}/place?robot=g1&door=groot"

            def get(headers: dict[str, str]) -> tuple[int, str]:
                request = urllib.request.Request(url, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=5) as response:
                        return response.status, response.read().decode()
                except urllib.error.HTTPError as exc:
                    with exc:  # it holds the answer's socket
                        return exc.code, exc.read().decode()

            status, body = await asyncio.to_thread(get, {})
            assert status == 401 and "API key" in body
            status, body = await asyncio.to_thread(get, {"Authorization": f"Api-Key {KEY}"})
            assert status == 200
            groot_port = int(json.loads(body)["doors"]["groot"].rsplit(":", 1)[1])

            def act() -> object:
                robot = GrootClient(groot_port, api_token=KEY, timeout_ms=10_000)
                try:
                    return robot.get_action(groot_observation(make_obs(3), "n1.6"))
                finally:
                    robot.close()

            actions, _ = await asyncio.to_thread(act)
            assert actions["joints"].shape[0] > 0
            assert sorted(cluster.requests_served()) == [0, 1]

    asyncio.run(scenario())


def _refusal_at_replica(cluster: Cluster, slot: int, query: str) -> HandshakeRejected:
    """The error a keyless client gets at replica ``slot``'s openpi door with ``query``."""
    client = PolicyClient(
        f"ws://127.0.0.1:{cluster.servers[slot].port}/?{query}", connect_timeout_s=5.0
    )
    with pytest.raises(HandshakeRejected) as raised:
        client.connect()
    return raised.value


def test_a_replica_refuses_forged_expired_reused_and_other_replicas_tickets() -> None:
    """At a replica's door, without the key: a ticket for another replica or robot, one
    signed with another key, an expired one and a used one are each refused with 401 and
    the reason; a good one admits exactly one handshake."""

    async def scenario() -> None:
        async with running_cluster() as cluster:
            now_s = time.time()

            def ticket(audience: str, robot: str = "arm-1", key: str = KEY, ttl_s: float = 30.0):
                return ticket_query(key, audience=audience, robot=robot, expires_s=now_s + ttl_s)

            cases = [
                (ticket("r1"), "not this replica's"),
                (ticket("r0", key="other-key"), "not this replica's"),
                (ticket("r0").replace("arm-1", "arm-2"), "not this replica's"),
                (ticket("r0", ttl_s=-2.0), "expired"),
                ("ticket=12345.abc", "malformed"),
                ("robot=arm-1", "missing or wrong API key"),
            ]
            for query, reason in cases:
                refused = await asyncio.to_thread(_refusal_at_replica, cluster, 0, query)
                assert refused.status_code == 401 and reason in refused.reason, query
            good = ticket("r0")
            client = PolicyClient(f"ws://127.0.0.1:{cluster.servers[0].port}/?{good}")
            try:
                reply = await asyncio.to_thread(client.infer, make_obs(4))
                assert reply["actions"].shape[0] > 0
            finally:
                client.close()
            refused = await asyncio.to_thread(_refusal_at_replica, cluster, 0, good)
            assert "used already" in refused.reason
            assert cluster.requests_served() == [1, 0]

    asyncio.run(scenario())
