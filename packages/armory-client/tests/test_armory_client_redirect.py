"""Both clients follow a redirected handshake (as from an Armory cluster's front door)
and send the API key on only to the host and port they were given."""

from __future__ import annotations

import asyncio

import pytest
from armory_client import AsyncPolicyClient, HandshakeRejected, PolicyClient


def _connect(client: PolicyClient | AsyncPolicyClient) -> dict[str, object]:
    """Connect, one request, close; the reply."""
    if isinstance(client, PolicyClient):
        with client:
            return client.infer({"x": 1})

    async def run() -> dict[str, object]:
        async with client:
            return await client.infer({"x": 1})

    return asyncio.run(run())


CLIENTS = [PolicyClient, AsyncPolicyClient]


@pytest.mark.parametrize("client_class", CLIENTS)
def test_a_redirect_to_another_port_is_followed_without_the_key(fake_server, client_class) -> None:
    """The server the robot named gets the key; the one it is redirected to (another port)
    serves it without ever seeing the key; reconnects start at the named server again."""
    replica = fake_server()
    front = fake_server(api_key="k", redirect_to=f"ws://127.0.0.1:{replica.port}/?ticket=t")
    client = client_class(f"ws://127.0.0.1:{front.port}/?robot=arm-1", api_key="k")
    assert _connect(client)["count"] == 1
    assert front.paths == ["/?robot=arm-1"] and front.headers[0]["Authorization"] == "Api-Key k"
    assert replica.paths == ["/?ticket=t"]
    assert "Authorization" not in replica.headers[0]
    assert client.uri == f"ws://127.0.0.1:{front.port}/?robot=arm-1"


@pytest.mark.parametrize("client_class", CLIENTS)
def test_a_redirect_on_the_same_host_and_port_keeps_the_key(fake_server, client_class) -> None:
    """A redirect to another path of the very server the robot named keeps the key."""
    server = fake_server(api_key="k")
    server.redirect_to = f"ws://127.0.0.1:{server.port}/robots"
    assert _connect(client_class(f"ws://127.0.0.1:{server.port}", api_key="k"))["count"] == 1
    assert server.paths == ["/", "/robots"]
    assert [h["Authorization"] for h in server.headers] == ["Api-Key k"] * 2


@pytest.mark.parametrize("client_class", CLIENTS)
def test_a_refusal_after_the_redirect_names_the_servers_reason(fake_server, client_class) -> None:
    """A 401 from the server redirected to is raised at once, with that server's words."""
    replica = fake_server(api_key="k")
    front = fake_server(api_key="k", redirect_to=f"ws://127.0.0.1:{replica.port}/")
    client = client_class(f"ws://127.0.0.1:{front.port}", api_key="k", connect_timeout_s=5.0)
    with pytest.raises(HandshakeRejected, match=r"HTTP 401 .*: bad key$") as raised:
        _connect(client)
    assert raised.value.reason == "bad key"
    assert len(replica.headers) == 1  # not retried


@pytest.mark.parametrize("client_class", CLIENTS)
def test_a_named_robot_says_who_it_is_and_what_it_asks_in_every_handshake(
    fake_server, client_class
) -> None:
    """`name_robot` puts the robot's name and demand in the query of the URI the client
    connects to (the front door reads it; a server ignores it)."""
    server = fake_server()
    client = client_class(f"ws://127.0.0.1:{server.port}")
    client.name_robot("arm-1", control_hz=30.0, max_execution_horizon=8, weight=2.0)
    assert _connect(client)["count"] == 1
    assert server.paths == ["/?robot=arm-1&control_hz=30.0&max_execution_horizon=8&weight=2.0"]


def test_naming_keeps_a_uri_that_names_a_robot_and_leaves_out_a_refused_name() -> None:
    """A URI naming a robot already is kept as given; an id the front door would refuse
    (a space in it) goes anonymous with its demand; a query already there is kept."""
    named = PolicyClient("ws://door:8000/?robot=left-arm")
    named.name_robot("arm-1", control_hz=30.0)
    assert named.uri == "ws://door:8000/?robot=left-arm"
    spaced = AsyncPolicyClient("ws://door:8000/?lang=en")
    spaced.name_robot("left arm", control_hz=30.0)
    assert spaced.uri == "ws://door:8000/?lang=en&control_hz=30.0"


def test_the_placement_query_reads_back_field_by_field() -> None:
    """What `placement_query` writes parses back to the same fields; names follow the
    front door's rule."""
    from urllib.parse import parse_qs

    from armory_client.wire.placement import MAX_ROBOT_NAME, is_robot_name, placement_query

    query = placement_query("arm-3:left", control_hz=33.3, round_trip_s=0.0125)
    assert parse_qs(query) == {
        "robot": ["arm-3:left"],
        "control_hz": ["33.3"],
        "round_trip_s": ["0.0125"],
    }
    assert placement_query(None) == ""
    assert is_robot_name("a" * MAX_ROBOT_NAME) and not is_robot_name("a" * (MAX_ROBOT_NAME + 1))
    assert not is_robot_name("left arm") and not is_robot_name("")
