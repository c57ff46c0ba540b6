"""The cluster's front door without Ray: robots told their replica (redirect or JSON),
replicas coming and going, and the supervisor that notices a dead one."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
from http import HTTPStatus

import pytest
from armory_client import (
    AsyncPolicyClient,
    PolicyClient,
    RequestTimeout,
    RobotRuntime,
    RuntimeConfig,
)
from armory_client.wire.placement import placement_query
from fleet_files import mixed_fleet
from server_harness import armory_serve, make_mock, make_obs

from armory.cluster.front_door import MOVE_COOLDOWN_S, FrontDoor
from armory.cluster.health import (
    MIN_LEARNED_BATCHES,
    Probe,
    ReplicaPresence,
    learned_profile,
    replica_presence,
)
from armory.cluster.placement_request import parse_placement_request
from armory.cluster.replica_table import ReplicaAddress, ReplicaTable
from armory.cluster.supervisor import PROFILE_TOLERANCE, Supervisor, SupervisorConfig
from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.fleet import FleetOptions, run_fleet
from armory.placement.base import ReplicaProfile, RobotDemand
from armory.placement.fluid_load import replica_load
from armory.placement.query import robot_demand
from armory.placement.registry import make_placement
from armory.serve import ArmoryServer
from armory.sim.bound import fleet_bound
from armory.transports.tickets import TicketGate

GPU = ReplicaProfile((0.05, 0.06, 0.07, 0.08))


def _address(name: str, port: int) -> ReplicaAddress:
    return ReplicaAddress(replica_id=name, host="127.0.0.1", openpi_port=port, groot_port=port + 1)


def _door(num_slots: int = 2, placement: str = "least-robots", **kwargs: object) -> FrontDoor:
    table = ReplicaTable(num_slots)
    door = FrontDoor(table, make_placement(placement, [GPU] * num_slots), port=0, **kwargs)
    for slot in range(num_slots):
        door.replica_up(_address(f"r{slot}", 9000 + 10 * slot), None)
    return door


def test_parse_reads_name_door_and_demand() -> None:
    """The query names the robot, its door and what it asks of a GPU."""
    request = parse_placement_request("/place?robot=arm-3&door=groot&control_hz=30&weight=2")
    assert (request.path, request.robot, request.door) == ("/place", "arm-3", "groot")
    assert request.demand == RobotDemand(control_hz=30.0, weight=2.0)
    assert parse_placement_request("/").demand == RobotDemand()


def test_a_placement_query_reads_back_as_it_was_written() -> None:
    """What a robot writes into its URI (placement_query) is what the front door reads."""
    demand = RobotDemand(control_hz=33.3, max_execution_horizon=7, round_trip_s=0.0125, weight=2.5)
    asks = dataclasses.asdict(demand)
    request = parse_placement_request("/?" + placement_query("arm-3:left", **asks))
    assert (request.robot, request.demand) == ("arm-3:left", demand)
    assert parse_placement_request("/?" + placement_query(None, **asks)).robot is None


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("/?control_hz=fast", "control_hz must be a number"),
        ("/?control_hz=-1", "control_hz must be > 0"),
        ("/?max_execution_horizon=2.5", "whole number"),
        ("/?speed=3", "unknown query parameter 'speed'"),
        ("/?robot=a&robot=b", "given 2 times"),
        ("/?robot=" + "x" * 200, "robot name"),
        ("/?door=ros", "door must be"),
        ("/?control_hz=nan", "finite"),
        ("/?control_hz=1e12", "control_hz must be <= 10000"),
        ("/?weight=1e300", "weight must be <= 1e"),
    ],
)
def test_parse_refuses_bad_queries_naming_the_parameter(target: str, message: str) -> None:
    """Each bad query is refused with the parameter it got wrong."""
    with pytest.raises(ValueError, match=message):
        parse_placement_request(target)


def test_redirect_place_and_listing() -> None:
    """A handshake is redirected to the replica's openpi door; /place answers every door of
    the same replica; robots spread over the replicas; a named robot keeps its replica."""
    door = _door()
    status, _, location = door.answer("/?robot=a", None)
    assert status == HTTPStatus.TEMPORARY_REDIRECT and location == "ws://127.0.0.1:9000"
    status, body, _ = door.answer("/place?robot=b&door=groot", None)
    assert status == HTTPStatus.OK
    assert json.loads(body)["doors"]["groot"] == "tcp://127.0.0.1:9011"
    assert door.answer("/?robot=a", None)[2] == "ws://127.0.0.1:9000"  # kept
    listing = json.loads(door.answer("/replicas", None)[1])
    assert [entry["num_robots"] for entry in listing] == [1, 1]


def test_listing_gives_each_replica_its_fluid_load() -> None:
    """/replicas says how loaded each replica's GPU is by the robots placed there: 0 for
    none, the fluid load of its robots' demands otherwise, more for more robots alike."""
    door = _door()
    assert [entry["load"] for entry in json.loads(door.answer("/replicas", None)[1])] == [0, 0]
    query = "control_hz=30&max_execution_horizon=10&round_trip_s=0.02"
    for name in ("a", "b", "c"):
        door.answer(f"/?robot={name}&{query}", None)
    listing = json.loads(door.answer("/replicas", None)[1])
    demand = door.placement.demand_of("a")
    assert [entry["num_robots"] for entry in listing] == [2, 1]
    loads = [entry["load"] for entry in listing]
    assert loads == [round(replica_load([demand] * n, GPU), 4) for n in (2, 1)]
    assert loads[0] > loads[1] > 0.0


def test_errors_go_to_the_one_robot_concerned() -> None:
    """A bad query is 400, a wrong key 401 (health needs none), an unknown path 404, a
    door the replicas lack 400, and no replica up 503."""
    door = _door(api_key="k")
    assert door.answer("/?control_hz=x", "Api-Key k")[0] == HTTPStatus.BAD_REQUEST
    assert door.answer("/", "Api-Key wrong")[0] == HTTPStatus.UNAUTHORIZED
    assert door.answer("/healthz", None)[0] == HTTPStatus.OK
    assert door.answer("/stats", "Api-Key k")[0] == HTTPStatus.NOT_FOUND
    status, body, _ = door.answer("/place?door=lerobot&robot=x", "Api-Key k")
    assert status == HTTPStatus.BAD_REQUEST and "no lerobot door" in body
    assert door.placement.replica_of("x") is None  # a refused robot is not placed
    door.replica_down(0)
    door.replica_down(1)
    assert door.answer("/", "Api-Key k")[0] == HTTPStatus.SERVICE_UNAVAILABLE
    assert door.answer("/healthz", None)[0] == HTTPStatus.SERVICE_UNAVAILABLE


def test_replica_down_sends_its_robots_elsewhere_and_a_new_one_takes_the_slot() -> None:
    """When a replica dies its robots are redirected to the other; a restarted replica
    takes the free slot and new robots go there; the dead one never returns."""
    door = _door()
    for name in "abcd":
        door.answer(f"/?robot={name}", None)
    moved = door.replica_down(0)
    assert sorted(moved) == ["a", "c"] and set(moved.values()) == {1}
    assert door.answer("/?robot=a", None)[2] == "ws://127.0.0.1:9010"
    assert door.replica_up(_address("r0", 9000), None) is None  # retired
    assert door.replica_up(_address("r0-new", 9100), None) == 0
    assert door.answer("/?robot=e", None)[2] == "ws://127.0.0.1:9100"


def test_anonymous_robots_are_forgotten_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Robots without a name are remembered up to a bound, then dropped from placement."""
    monkeypatch.setattr("armory.cluster.front_door.MAX_ANONYMOUS", 3)
    door = _door()
    for _ in range(5):
        door.answer("/", None)
    assert sum(len(door.placement.members(k)) for k in range(2)) == 3


def test_robots_that_left_are_forgotten_after_a_grace() -> None:
    """A placed robot its replica stops reporting is forgotten once unseen for the grace
    (its load no longer counts); one its replica reports by name is kept however long;
    robots known at the replica only by their connections are kept as many as it has
    such connections; a forgotten robot that comes back is placed again."""
    now = [0.0]
    door = _door(clock=lambda: now[0])
    for name in "abcd":
        door.answer(f"/?robot={name}", None)
    assert door.placement.members(0) == ["a", "c"] and door.placement.members(1) == ["b", "d"]
    only_a = ReplicaPresence(names=frozenset({"a"}))
    one_plain = ReplicaPresence(num_unnamed=1)
    now[0] = 10.0
    assert door.reconcile(0, only_a, after_s=10.0) == []  # c within its grace
    assert door.reconcile(1, one_plain, after_s=10.0) == []
    now[0] = 10.5
    assert door.reconcile(0, only_a, after_s=10.0) == ["c"]
    assert door.reconcile(1, one_plain, after_s=10.0) == ["b"]  # d, the later, kept
    now[0] = 100.0
    assert door.reconcile(0, only_a, after_s=10.0) == []
    assert door.reconcile(1, one_plain, after_s=10.0) == []  # d stays while counted
    listing = json.loads(door.answer("/replicas", None)[1])
    assert [entry["num_robots"] for entry in listing] == [1, 1]
    assert door.placement.replica_of("c") is None
    door.answer("/?robot=c", None)
    assert door.placement.replica_of("c") is not None
    now[0] = 105.0  # c on its way: its grace runs from when it was sent on
    assert "c" in door.placement.members(door.placement.replica_of("c"))
    assert door.reconcile(door.placement.replica_of("c"), only_a, after_s=10.0) == []


def test_a_plain_clients_connection_is_never_credited_to_a_robot_that_reports_by_name() -> None:
    """A plain client and an Armory robot on one replica; the robot drops out (moving,
    reconnecting). The replica's one unnamed connection is the plain client's, never the
    robot's (it would show by name): the plain client is kept however long, the robot is
    forgotten once its grace runs out."""
    now = [0.0]
    door = _door(num_slots=1, clock=lambda: now[0])
    door.answer("/?robot=plain", None)
    door.answer("/?robot=arm", None)  # placed last: first in line for a guess
    here = ReplicaPresence(names=frozenset({"arm"}), num_unnamed=1)
    assert door.reconcile(0, here, after_s=10.0) == []
    gone = []
    for step in range(1, 30):
        now[0] = 0.5 * step
        gone += door.reconcile(0, ReplicaPresence(num_unnamed=1), after_s=10.0)
    assert gone == ["arm"]
    assert door.placement.members(0) == ["plain"]


def _forgotten_on_its_way(query: str) -> tuple[FrontDoor, int]:
    """A door that placed robot ``c`` by ``query`` and forgot it on its way (it did not
    show on its replica within the 10 s grace); the door and that replica's slot."""
    now = [0.0]
    door = _door(clock=lambda: now[0])
    door.answer(query, None)
    slot = door.placement.replica_of("c")
    assert slot is not None
    now[0] = 10.5
    assert door.reconcile(slot, ReplicaPresence(), after_s=10.0) == ["c"]
    return door, slot


def test_a_robot_forgotten_on_its_way_is_placed_back_where_its_replica_serves_it() -> None:
    """A robot sent on to its replica but slower to connect there than the grace is
    forgotten; once its replica reports it by name it is placed back on that replica,
    weighed by what the replica reports. A name the door never heard is not placed."""
    door, slot = _forgotten_on_its_way("/?robot=c")
    assert door.placement.replica_of("c") is None
    reported = RobotDemand(control_hz=30.0, max_execution_horizon=8, weight=2.0)
    here = ReplicaPresence(names=frozenset({"c", "stranger"}), demands={"c": reported})
    assert door.reconcile(slot, here, after_s=10.0) == []
    assert door.placement.replica_of("c") == slot
    assert door.placement.demand_of("c") == reported
    assert door.placement.replica_of("stranger") is None
    assert door.reconcile(slot, here, after_s=10.0) == []
    assert door.placement.members(slot).count("c") == 1


def test_a_robot_placed_back_keeps_the_round_trip_it_told_the_door() -> None:
    """A robot forgotten on its way and placed back is weighed as any robot its replica
    reports: the replica's report, with the round trip the robot told the door (not the
    replica's link estimate), as it would be had it never been forgotten."""
    door, slot = _forgotten_on_its_way("/?robot=c&round_trip_s=0.05")
    reported = RobotDemand(control_hz=30.0, max_execution_horizon=8, round_trip_s=0.004)
    here = ReplicaPresence(names=frozenset({"c"}), demands={"c": reported})
    assert door.reconcile(slot, here, after_s=10.0) == []
    assert door.placement.demand_of("c") == dataclasses.replace(reported, round_trip_s=0.05)


@pytest.mark.parametrize(
    "stats",
    [
        {},
        {"robots": "x"},
        {"robots": [{"robot": "a", "connected": True}]},
        {"robots": [{"robot": 3, "named": True, "connected": True}]},
        {"robots": [{"robot": "a", "named": "yes", "connected": True}]},
        [],
    ],
)
def test_a_replica_whose_robot_rows_are_unreadable_says_nothing_of_who_is_there(
    stats: object,
) -> None:
    """Rows missing, of the wrong shape or type: no presence (nobody is forgotten)."""
    assert replica_presence(stats) is None


def test_presence_reads_connected_robots_by_name_and_counts_the_unnamed() -> None:
    """Named connected rows by name; unnamed connected rows counted; rows of robots that
    left are not there."""
    asks = {"control_hz": 30.0, "max_execution_horizon": 8, "weight": 2.0}
    rows = [
        {"robot": "arm-1", "named": True, "connected": True, **asks},
        {"robot": "arm-3", "named": True, "connected": True, **asks, "control_hz": 1e9},
        {"robot": "arm-4", "named": True, "connected": True, **asks, "weight": None},
        {"robot": "arm-5", "named": True, "connected": True, **asks, "max_execution_horizon": 8.5},
        {"robot": "conn-7", "named": False, "connected": True, **asks},
        {"robot": "arm-2", "named": True, "connected": False, **asks},
        {"robot": "conn-9", "named": False, "connected": False},
    ]
    presence = replica_presence({"robots": rows})
    assert presence is not None
    assert presence.names == {"arm-1", "arm-3", "arm-4", "arm-5"} and presence.num_unnamed == 1
    # Only a demand within the wire's bounds, of the right types, is taken.
    assert presence.demands == {"arm-1": RobotDemand(30.0, 8, weight=2.0)}


def test_a_robot_placed_without_a_name_is_kept_while_its_replica_serves_one() -> None:
    """A robot that gave the door no name reports one at its replica that the door never
    heard: it counts for one of the door's anonymous robots there, which is kept."""
    now = [0.0]
    door = _door(num_slots=1, clock=lambda: now[0])
    door.answer("/", None)
    door.answer("/", None)
    now[0] = 100.0
    presence = ReplicaPresence(names=frozenset({"my-own-name"}))
    assert door.reconcile(0, presence, after_s=10.0) == ["anonymous-1"]
    assert door.placement.members(0) == ["anonymous-2"]


def test_a_robot_is_weighed_by_what_its_replica_reports() -> None:
    """A robot placed at the defaults (it declared nothing) is weighed by the rate,
    horizon and weight its replica reports, keeping the round trip it declared; it stays
    on its replica."""
    door = _door()
    door.answer("/?robot=a&round_trip_s=0.02", None)
    slot = door.placement.replica_of("a")
    reported = RobotDemand(control_hz=50.0, max_execution_horizon=7, weight=3.0)
    presence = ReplicaPresence(names=frozenset({"a"}), demands={"a": reported})
    assert door.reconcile(slot, presence, after_s=10.0) == []
    assert door.placement.demand_of("a") == RobotDemand(50.0, 7, round_trip_s=0.02, weight=3.0)
    assert door.placement.replica_of("a") == slot


def test_only_robots_their_replica_reports_by_name_move_and_not_twice_at_once() -> None:
    """Off a replica over capacity the door moves only robots its replica reports by name
    (Armory's client, which reconnects on its own), never plain clients' connections; a
    robot just moved is not moved again within the cooldown; a move the old replica
    could not carry out is undone."""
    clock = [100.0]
    door = _door(placement="fluid", clock=lambda: clock[0])
    fast = "control_hz=40&max_execution_horizon=10"
    for i in range(10):
        door.answer(f"/?robot=r{i}&{fast}", None)
    for robot in door.placement.members(1):
        door.placement.move(robot, 0)
    assert door.placement.load(0) > 1.0
    named = frozenset({"r1", "r2"})
    door.reconcile(0, ReplicaPresence(names=named, num_unnamed=8), after_s=10.0)
    moves = door.rebalance()
    assert moves and {robot for robot, _, _ in moves} <= named
    assert all((source, target) == (0, 1) for _, source, target in moves)
    robot = moves[0][0]
    door.undo_move(robot, 0)
    assert door.placement.replica_of(robot) == 0
    door.reconcile(0, ReplicaPresence(names=named, num_unnamed=8), after_s=10.0)
    assert robot not in {r for r, _, _ in door.rebalance()}  # within the cooldown
    clock[0] += MOVE_COOLDOWN_S
    assert robot in {r for r, _, _ in door.rebalance()}


def test_the_supervisor_forgets_robots_once_they_leave_and_not_before() -> None:
    """Over real sockets: an `armory fleet` of six named robots and one plain client
    through the front door, the supervisor running with a half-second grace: nobody is
    forgotten while connected (several graces long), every robot is within a few seconds
    of leaving, and the replicas' loads are empty again. A robot the door first placed at
    the defaults is weighed, while it runs, by what its replica reports of it."""
    groups = [{"name": "arm", "count": 6, "control_hz": 20, "max_execution_horizon": 8}]
    fleet = mixed_fleet("threshold", [{**g, "min_execution_horizon": 2} for g in groups])

    async def placed(door: FrontDoor) -> set[str]:
        return {r for k in range(2) for r in door.placement.members(k)}

    async def scenario() -> None:
        servers, door, supervisor = await _two_replicas_behind_a_door(forget_after_s=0.5)
        task = asyncio.create_task(supervisor.run())
        first = fleet.robot_specs()[0]
        # Placed at the defaults but for the round trip it will declare itself: should it
        # be slower than the grace to connect, it is forgotten and placed again by its own
        # request, and either way the door holds the same round trip.
        round_trip_s = robot_demand(first).round_trip_s
        door.answer(f"/?robot={first.robot_id}&round_trip_s={round_trip_s}", None)
        assert door.placement.demand_of(first.robot_id) == RobotDemand(round_trip_s=round_trip_s)
        # The plain client's connection is told apart from robots on their way by when
        # each was placed (the latest first): placed last, it is never the one left out.
        plain = PolicyClient(f"ws://127.0.0.1:{door.port}/?robot=plain-0", request_timeout_s=10.0)
        try:
            assert (await asyncio.to_thread(plain.infer, make_obs(0)))["actions"].size
            run = asyncio.create_task(
                run_fleet(fleet, FleetOptions(port=door.port, duration_s=3.0))
            )
            await asyncio.sleep(2.5)  # five graces into the run
            everyone = {spec.robot_id for spec in fleet.robot_specs()} | {"plain-0"}
            assert await placed(door) == everyone
            assert door.placement.demand_of(first.robot_id) == RobotDemand(
                control_hz=first.control_hz,
                max_execution_horizon=first.max_execution_horizon,
                round_trip_s=round_trip_s,
                weight=first.weight,
            )
            report = await run
            assert all(r.inferences > 0 for r in report.robots)
            assert await placed(door) >= {"plain-0"}  # still connected
            plain.close()
            for _ in range(100):
                if not await placed(door):
                    break
                await asyncio.sleep(0.05)
            assert await placed(door) == set()
            listing = json.loads(door.answer("/replicas", None)[1])
            assert [entry["num_robots"] for entry in listing] == [0, 0]
        finally:
            plain.close()
            task.cancel()
            await door.stop()
            for server in servers:
                await server.stop()

    asyncio.run(scenario())


def _server() -> ArmoryServer:
    return ArmoryServer(make_mock(), ServerConfig(max_batch_size=4), port=0)


def _replica_address(k: int, server: ArmoryServer) -> ReplicaAddress:
    return ReplicaAddress(replica_id=f"r{k}", host="127.0.0.1", openpi_port=server.port)


async def _two_replicas_behind_a_door(
    forget_after_s: float = 30.0,
    *,
    servers: list[ArmoryServer] | None = None,
    announced: list[ReplicaAddress] | None = None,
    api_key: str | None = None,
) -> tuple[list[ArmoryServer], FrontDoor, Supervisor]:
    """Two started servers (of the mock, unless given), a front door (fluid placement)
    that admitted both in one supervision round, and the supervisor; the caller stops
    the door and servers. The registry answers ``announced`` (both replicas, unless
    given: the caller may announce more later, :func:`_replica_address`); with
    ``api_key`` the door and the supervisor hold it."""
    servers = servers or [_server(), _server()]
    for server in servers:
        await server.start()
    door = FrontDoor(ReplicaTable(2), make_placement("fluid", [GPU] * 2), port=0, api_key=api_key)
    await door.start()
    if announced is None:
        announced = [_replica_address(k, s) for k, s in enumerate(servers)]

    async def registry() -> list[ReplicaAddress]:
        return announced

    config = SupervisorConfig(period_s=0.05, timeout_s=1.0, forget_after_s=forget_after_s)
    supervisor = Supervisor(door, registry, config, api_key=api_key)
    await supervisor.round()
    return servers, door, supervisor


def test_clients_follow_the_redirect_and_the_supervisor_retires_a_dead_replica() -> None:
    """Over real sockets: the blocking and the asyncio client reach their replica through
    the front door; after one replica stops, the supervisor retires it within a round and
    the robot it served is answered by the other on its next request."""

    async def scenario() -> None:
        servers, door, supervisor = await _two_replicas_behind_a_door()
        table = door.table
        assert table.num_up == 2
        uri = f"ws://127.0.0.1:{door.port}/?robot="
        try:
            sync_clients = [PolicyClient(uri + f"s{i}", request_timeout_s=10.0) for i in range(2)]
            for i, client in enumerate(sync_clients):
                reply = await asyncio.to_thread(client.infer, make_obs(i))
                assert reply["actions"].shape[0] > 0
            async with AsyncPolicyClient(uri + "a0", request_timeout_s=10.0) as client:
                assert (await client.infer(make_obs(5)))["actions"].shape[0] > 0
            assert [s.engine.stats().num_requests for s in servers] == [2, 1] or [
                s.engine.stats().num_requests for s in servers
            ] == [1, 2]
            victim = door.placement.replica_of("s0")
            await servers[victim].stop()
            await supervisor.round()
            assert table.slots[victim] is None
            assert door.placement.replica_of("s0") == 1 - victim
            reply = await asyncio.to_thread(sync_clients[0].infer, make_obs(7))
            assert reply["actions"].shape[0] > 0
            assert sync_clients[0].num_connections == 2
            for client in sync_clients:
                client.close()
        finally:
            await door.stop()
            for server in servers:
                await server.stop()

    asyncio.run(scenario())


def test_a_hung_replica_is_retired_and_its_robot_served_by_another() -> None:
    """A replica whose process hangs (SIGSTOP: its port still accepts, nothing answers)
    misses three probes and is retired; its robot's next request times out, the client
    reconnects through the front door and the other replica answers the one after."""
    args = ["--port", "0", "policy:mock", "--policy.latency-profile", "linear"]
    with armory_serve(*args, announce_lines=2) as (proc, lines):
        hung_port = int(lines[1].split(" on ", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])

        async def scenario() -> None:
            healthy = _server()
            await healthy.start()
            table = ReplicaTable(2)
            door = FrontDoor(table, make_placement("least-robots", [GPU] * 2), port=0)
            await door.start()
            announced = [
                ReplicaAddress(replica_id="hung", host="127.0.0.1", openpi_port=hung_port),
                ReplicaAddress(replica_id="ok", host="127.0.0.1", openpi_port=healthy.port),
            ]

            async def registry() -> list[ReplicaAddress]:
                return announced

            config = SupervisorConfig(period_s=0.05, timeout_s=0.5, misses_to_down=3)
            supervisor = Supervisor(door, registry, config)
            await supervisor.round()
            assert table.num_up == 2
            uri = f"ws://127.0.0.1:{door.port}/?robot="
            clients = [PolicyClient(uri + f"arm-{i}", request_timeout_s=2.0) for i in range(2)]
            try:
                for i, client in enumerate(clients):
                    assert (await asyncio.to_thread(client.infer, make_obs(i)))["actions"].size
                hung_slot = table.slot_of("hung")
                victim = next(
                    client
                    for i, client in enumerate(clients)
                    if door.placement.replica_of(f"arm-{i}") == hung_slot
                )
                os.kill(proc.pid, signal.SIGSTOP)
                for round_number in range(3):
                    assert table.slot_of("hung") is not None, f"retired after {round_number}"
                    await supervisor.round()
                assert table.slot_of("hung") is None
                with pytest.raises(RequestTimeout):
                    await asyncio.to_thread(victim.infer, make_obs(7))
                reply = await asyncio.to_thread(victim.infer, make_obs(8))
                assert reply["actions"].size
                assert healthy.engine.stats().num_requests == 2  # the other robot, then it
            finally:
                for client in clients:
                    client.close()
                await door.stop()
                await healthy.stop()
                os.kill(proc.pid, signal.SIGCONT)

        asyncio.run(scenario())


def test_armory_fleet_through_the_front_door_places_each_robot_by_name_and_demand() -> None:
    """`armory fleet` against a cluster's front door: each robot's URI names it and says
    what it asks of a GPU, so fluid placement weighs the fleet's own rates and horizons,
    the probe places no robot of its own, and the robots spread over both replicas. Its
    report's passes are both replicas' (read through the front door's listing), and its
    bound is that of two GPUs."""
    groups = [
        {"name": "arm", "count": 3, "control_hz": 30, "max_execution_horizon": 8},
        {"name": "base", "count": 3, "control_hz": 10, "max_execution_horizon": 5},
    ]
    fleet = mixed_fleet("directed", [{**g, "min_execution_horizon": 2} for g in groups])

    async def scenario() -> None:
        servers, door, _ = await _two_replicas_behind_a_door()
        try:
            options = FleetOptions(port=door.port, duration_s=1.5)
            report = await run_fleet(fleet, options, bound_of=fleet_bound)
            assert all(r.inferences > 0 for r in report.robots)
            passes = sum(s.engine.stats().num_batches for s in servers)
            assert 0 < report.system.num_batches <= passes
            assert report.system.gpu_utilization > 0
            assert report.system.bound_starvation == 0.0  # light for one GPU, so for two
            placed = {
                r: d
                for k in range(2)
                for r, d in zip(door.placement.members(k), door.placement.demands(k), strict=True)
            }
            assert placed == {spec.robot_id: robot_demand(spec) for spec in fleet.robot_specs()}
            assert all(s.engine.stats().num_requests > 0 for s in servers)
        finally:
            await door.stop()
            for server in servers:
                await server.stop()

    asyncio.run(scenario())


class _StillRobot:
    """A robot that holds still: the mock's observation each tick, actions discarded."""

    def __init__(self) -> None:
        self.step = 0

    def get_observation(self) -> dict[str, object]:
        self.step += 1
        return make_obs(0, self.step)

    def send_action(self, action: object) -> None:
        pass


def test_a_robot_on_armorys_runtime_is_placed_under_its_id_with_its_demand() -> None:
    """A `RobotRuntime` over a client given the bare front-door address names itself and
    says its rate, horizon and weight in its handshake, so it is placed under its id with
    that demand from its first connection (not anonymous at the defaults)."""
    config = RuntimeConfig(
        robot_id="solo-1", control_hz=25.0, max_execution_horizon=6, weight=2.0, duration_s=1.0
    )

    async def scenario() -> None:
        servers, door, _ = await _two_replicas_behind_a_door()
        try:
            client = AsyncPolicyClient(f"ws://127.0.0.1:{door.port}")
            summary = await RobotRuntime(_StillRobot(), client, config).run()
            assert summary.num_chunks_applied > 0 and summary.num_request_errors == 0
            slot = door.placement.replica_of("solo-1")
            assert slot is not None and door.placement.members(slot) == ["solo-1"]
            assert door.placement.demand_of("solo-1") == RobotDemand(25.0, 6, weight=2.0)
        finally:
            await door.stop()
            for server in servers:
                await server.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("key", [None, "move-key"])
def test_robots_move_off_a_replica_over_capacity_once_another_has_room(key: str | None) -> None:
    """Four robots on Armory's runtime (every-tick pipelined, directed, threshold) arrive
    while one replica of a slow GPU is up and all go there, over its capacity. When the
    second replica comes up the supervisor's next round moves robots to it (the first
    placed: the pipelined one and a directed one): their replica closes each connection
    after a reply, and the robot's next request reconnects through the front door to
    the new replica, with no request lost. With an API key the supervisor's ``/move``
    carries it, and the robots reach their new replica with the front door's ticket."""
    configs = [
        RuntimeConfig(
            robot_id=f"m{i}",
            control_hz=20.0,
            max_execution_horizon=6,
            duration_s=6.0,
            request_mode=mode,
        )
        for i, mode in enumerate(("every-tick", "directed", "threshold", "directed"))
    ]

    async def scenario() -> None:
        slow = LinearProfileConfig(intercept_s=0.1, slope_s=0.02)
        movable = [
            ArmoryServer(
                make_mock(linear=slow),
                ServerConfig(max_batch_size=4),
                port=0,
                api_key=key,
                tickets=None if key is None else TicketGate(key, f"r{k}"),
                movable=True,
            )
            for k in range(2)
        ]
        announced: list[ReplicaAddress] = []  # none at first, then one, then both
        servers, door, supervisor = await _two_replicas_behind_a_door(
            servers=movable, announced=announced, api_key=key
        )
        uri = f"ws://127.0.0.1:{door.port}"
        clients = [AsyncPolicyClient(uri, api_key=key) for _ in configs]
        try:
            announced.append(_replica_address(0, servers[0]))
            await supervisor.round()
            runs = [
                asyncio.ensure_future(RobotRuntime(_StillRobot(), client, config).run())
                for client, config in zip(clients, configs, strict=True)
            ]
            await asyncio.sleep(1.5)
            async with asyncio.timeout(10.0):  # its learned latency counts from then
                while servers[0].engine.stats().num_batches < MIN_LEARNED_BATCHES:
                    await asyncio.sleep(0.05)
            await supervisor.round()  # one replica up: nowhere to move to
            assert sorted(door.placement.members(0)) == ["m0", "m1", "m2", "m3"]
            load_before = door.placement.load(0)
            assert load_before > 1.0
            announced.append(_replica_address(1, servers[1]))
            await supervisor.round()
            moved = sorted(door.placement.members(1))
            assert moved, "no robot was moved to the replica with room"
            summaries = await asyncio.gather(*runs)
            for summary in summaries:
                assert summary.num_request_errors == 0 and summary.num_chunks_applied > 0
            for config, client in zip(configs, clients, strict=True):
                expected = 2 if config.robot_id in moved else 1
                assert client.num_connections == expected, (config.robot_id, moved)
            served_by_second = {row.robot for row in servers[1].engine.stats().robots}
            assert set(moved) <= served_by_second
            assert max(door.placement.load(0), door.placement.load(1)) < load_before
        finally:
            await door.stop()
            for server in servers:
                await server.stop()

    asyncio.run(scenario())


def test_the_supervisor_probes_every_replica_of_a_round_at_once() -> None:
    """Announced replicas that never answer are probed beside the held ones, not one after
    another: a round waits for one timeout however many of them there are; the silent
    ones are not admitted, the answering one is, and the held one stays."""
    from armory.cluster.health import Probe

    door = _door(num_slots=3)
    door.replica_down(1)
    door.replica_down(2)
    announced = [_address(f"silent-{k}", 9500 + 10 * k) for k in range(3)]
    announced.append(_address("fresh", 9600))
    in_flight = peak = 0

    class Watched(Supervisor):
        async def _probe(self, address: ReplicaAddress) -> Probe:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.01)
            in_flight -= 1
            return Probe(alive=not address.replica_id.startswith("silent"))

    async def registry() -> list[ReplicaAddress]:
        return announced

    supervisor = Watched(door, registry, SupervisorConfig(period_s=0.05, timeout_s=1.0))
    asyncio.run(supervisor.round())
    assert peak == 5  # three silent, the fresh one and the held r0
    assert [a.replica_id if a else None for a in door.table.slots] == ["r0", "fresh", None]


def test_cluster_cli_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    """armory cluster names a bad placement or replica count in one line, starting nothing."""
    from armory.cli import main

    assert main(["cluster", "--placement", "nearest"]) == 2
    assert "valid names: random" in capsys.readouterr().err
    assert main(["cluster", "--replicas", "0"]) == 2
    assert "--replicas must be >= 1" in capsys.readouterr().err
    assert main(["cluster", "--forget-after-s", "0"]) == 2
    assert "--forget-after-s must be > 0, got 0.0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "points",
    [
        '{"1": 0.05, "1000000000000": 9.0}',
        '{"1": Infinity}',
        '{"0": 0.05}',
        '{"1": -0.05}',
        "[1, 2]",
        "{}",
    ],
)
def test_a_replica_reporting_an_unusable_latency_is_alive_without_a_profile(points: str) -> None:
    """A /stats body whose learned latency has an absurd batch size, non-finite, zero or
    negative values or the wrong shape gives no profile (nothing is built from it)."""
    stats = json.loads(f'{{"latency_points_s": {points}, "batch_size_counts": {{"1": 50}}}}')
    assert learned_profile(stats, max_batch_size=4) is None


@pytest.mark.parametrize("counts", ['{"1": Infinity}', '{"1": NaN}', '{"1": "x"}', "[5]"])
def test_a_replica_reporting_unusable_batch_counts_is_alive_without_a_profile(counts: str) -> None:
    """Batch counts that are not finite numbers, or not a mapping, give no profile."""
    stats = json.loads(f'{{"latency_points_s": {{"1": 0.05}}, "batch_size_counts": {counts}}}')
    assert learned_profile(stats, max_batch_size=4) is None


def test_a_replicas_learned_latency_replaces_its_profile_only_once_it_moved() -> None:
    """A replica's medians wander a little with every probe; the profile placement holds
    for its slot is replaced only when some batch size moved by more than
    PROFILE_TOLERANCE (each new profile costs a fluid program per replica at the next
    rebalance, on the front door's loop)."""
    door = FrontDoor(ReplicaTable(1), make_placement("fluid", [GPU]), port=0)
    address = ReplicaAddress(replica_id="r0", host="127.0.0.1", openpi_port=9)
    learned = [GPU]

    class Probed(Supervisor):
        async def _probe(self, address: ReplicaAddress) -> Probe:
            return Probe(alive=True, profile=learned[0])

    async def registry() -> list[ReplicaAddress]:
        return [address]

    def scaled(factor: float, size: int = 4) -> ReplicaProfile:
        table = list(GPU.latency_table_s)
        table[size - 1] *= factor
        return ReplicaProfile(tuple(table))

    supervisor = Probed(door, registry, SupervisorConfig(move_robots=False))
    asyncio.run(supervisor.round())  # admitted, with the profile it reports
    assert door.table.slot_of("r0") == 0 and door.placement.profiles[0] == GPU
    learned[0] = scaled(1.0 + PROFILE_TOLERANCE / 2)
    asyncio.run(supervisor.round())
    assert door.placement.profiles[0] is GPU
    learned[0] = scaled(1.0 + 2 * PROFILE_TOLERANCE)
    asyncio.run(supervisor.round())
    assert door.placement.profiles[0] == learned[0]
    learned[0] = ReplicaProfile(GPU.latency_table_s[:3])  # another max batch size
    asyncio.run(supervisor.round())
    assert door.placement.profiles[0] == learned[0]


def test_a_replica_reported_latency_becomes_its_profile_once_it_ran_a_few_passes() -> None:
    """Learned points read back as the replica's latency per batch size, 1 to the max,
    once the replica has run MIN_LEARNED_BATCHES forward passes; before that (its first
    passes run cold) none, and the front door keeps the profile it has."""
    points = {"1": 0.05, "2": 0.06}
    counts = {"1": MIN_LEARNED_BATCHES - 2, "2": 1}
    stats = {"latency_points_s": points, "batch_size_counts": counts}
    assert learned_profile(stats, max_batch_size=3) is None
    counts["2"] += 1
    profile = learned_profile(stats, max_batch_size=3)
    assert profile is not None
    assert profile.latency_table_s == pytest.approx((0.05, 0.06, 0.07))
    assert learned_profile({"latency_points_s": points}, max_batch_size=3) is None
