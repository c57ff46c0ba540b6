"""The cluster's front door: tells each robot its replica; carries no robot traffic.

A robot's WebSocket handshake at ``ws://host:port/`` is answered ``307 Temporary
Redirect`` to its replica's openpi door (websockets' clients follow it, so the Armory
clients and openpi's do; the robot then talks to its replica directly, and reconnects
through the front door, which sends it to a replica that is up). With an API key the
redirect carries a short-lived ticket for that replica, since clients do not send the
key to another host or port (:mod:`armory.transports.tickets`). ``GET /place``
answers the same choice as JSON with every door of the replica (GR00T and LeRobot
robots, which cannot follow an HTTP redirect, ask there first). ``GET /replicas``
lists the slots; ``GET /healthz`` answers 200 while some replica is up.

The door keeps the cluster's :class:`~armory.placement.base.Placement`: a robot that
names itself keeps its replica while that replica is up and not over capacity; when a
replica is found dead its robots are placed again at once, so the next connection of
each goes to a replica that is up. A replica over capacity sheds robots on Armory's client to one
with room (:meth:`FrontDoor.rebalance`; the supervisor asks the replica to let each
go after its next reply, and its client reconnects through this door). A robot that
has left (its replica no longer reports it) is forgotten, so that its load no longer
counts where new robots are placed (:meth:`FrontDoor.reconcile`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from armory.cluster.health import ReplicaPresence
from armory.cluster.placement_request import PlacementRequest, parse_placement_request
from armory.cluster.replica_table import ReplicaAddress, ReplicaTable
from armory.placement.base import NoReplicaError, Placement, ReplicaProfile, RobotDemand
from armory.server_stats import REPLICAS_PATH
from armory.transports import http
from armory.transports.tickets import DEFAULT_TICKET_TTL_S, MAX_TICKET_TTL_S, ticket_query

logger = logging.getLogger(__name__)

MAX_ANONYMOUS = 4096
"""Robots without a name the placement remembers (the oldest are forgotten first)."""
MAX_FORGOTTEN = 4096
"""Robots the door forgot that it still recognises, with what it knew of them, when their
replica reports them by name (the oldest drop out first; a name the door gave is never
reported so)."""
MOVE_COOLDOWN_S = 30.0
"""A robot moved off a replica over capacity is not moved again for this long."""
PLACE_PATH = "/place"


class FrontDoor:
    """Answers robots with their replica (redirect or JSON) on ``host:port``."""

    def __init__(
        self,
        table: ReplicaTable,
        placement: Placement,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        # Security
        api_key: str | None = None,
        ticket_ttl_s: float = DEFAULT_TICKET_TTL_S,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """With ``api_key`` every request but ``/healthz`` needs the key, and each redirect
        carries a ticket good for ``ticket_ttl_s`` seconds (``wall_clock``: Unix seconds)
        at the robot's replica, in place of the key (:mod:`armory.transports.tickets`).
        ``clock`` (seconds) times when each robot was last known to be there. With
        ``ssl_context`` (a TLS server context) the door speaks ``wss://`` and HTTPS."""
        if not 0 < ticket_ttl_s <= MAX_TICKET_TTL_S:
            raise ValueError(
                f"ticket_ttl_s must be in (0, {MAX_TICKET_TTL_S:g}], got {ticket_ttl_s}"
            )
        if placement.num_replicas != len(table.slots):
            raise ValueError(
                f"placement has {placement.num_replicas} replicas, the table "
                f"{len(table.slots)} slots"
            )
        self.table = table
        self.placement = placement
        self.host = host
        self._requested_port = port
        self._api_key = api_key
        self._ticket_ttl_s = ticket_ttl_s
        self._wall_clock = wall_clock
        self._clock = clock
        self._ssl_context = ssl_context
        self._seen_s: dict[str, float] = {}
        """Per placed robot: when it was last placed, sent on, or reported by its replica."""
        self._reported_at: dict[str, int] = {}
        """Robots on Armory's client: the slot whose replica last reported them by name."""
        self._moved_s: dict[str, float] = {}
        """Robots moved off a replica over capacity: when."""
        self._forgotten: dict[str, RobotDemand] = {}
        """Robots forgotten as gone, oldest first (at most ``MAX_FORGOTTEN``): their demand
        when forgotten."""
        self._server: Server | None = None
        self._anonymous: deque[str] = deque()
        self._num_anonymous = 0
        for slot, held in enumerate(table.slots):
            if held is None:
                placement.fail(slot)

    # ---- replicas coming and going (called on the door's loop) ---------

    def replica_up(self, address: ReplicaAddress, profile: ReplicaProfile | None) -> int | None:
        """A replica announced itself: the slot it took, if any."""
        slot = self.table.arrive(address)
        if slot is not None:
            self.placement.restore(slot, profile)
            logger.info("replica %s up in slot %d: %s", address.replica_id, slot, address.host)
        return slot

    def replica_down(self, slot: int) -> dict[str, int]:
        """The replica in ``slot`` is dead: its robots are placed again (robot -> slot)."""
        address = self.table.retire(slot)
        moved = self.placement.fail(slot)
        # With no replica up its robots were removed from placement: forget them here too.
        for robot in [r for r in self._seen_s if self.placement.replica_of(r) is None]:
            self._forget(robot)
        logger.warning(
            "replica %s in slot %d is down; %d robots placed again",
            address.replica_id if address else "?",
            slot,
            len(moved),
        )
        return moved

    # ---- robots ---------------------------------------------------------

    def assign(self, request: PlacementRequest) -> tuple[int, ReplicaAddress]:
        """The slot and replica that serve the robot (``NoReplicaError`` when none is up)."""
        robot = request.robot
        if robot is None:
            self._num_anonymous += 1
            robot = f"anonymous-{self._num_anonymous}"
            self._anonymous.append(robot)
            if len(self._anonymous) > MAX_ANONYMOUS:
                self._forget(self._anonymous.popleft())
        slot = self.placement.replica_of(robot)
        if slot is None or self.table.slots[slot] is None:
            slot = self.placement.place(robot, request.demand)
        self._seen_s[robot] = self._clock()
        address = self.table.slots[slot]
        if address is None:  # placement and table disagree: a bug
            raise AssertionError(f"slot {slot} is placed on but holds no replica")
        return slot, address

    def reconcile(self, slot: int, presence: ReplicaPresence, *, after_s: float) -> list[str]:
        """Placement of ``slot`` made to agree with who its replica serves: a robot it
        reports is weighed by the rate, horizon and weight it reported there, and the
        robots it has not served for ``after_s`` seconds are forgotten (a robot on its way
        or reconnecting is not); returns those. A robot is there while the replica
        reports it connected under its name. Plain clients are known there only by their
        connections, and a robot placed without a name (``anonymous-N``) under a name the
        door never heard, so as many of the other robots as the replica has such
        connections are taken to be there (the most recently seen first): for them the
        count is exact, which robot it is a guess (never one known to report by name). A
        named robot forgotten so (sent on, then slower to connect than ``after_s``) that
        the replica then reports by name is placed back on it."""
        now_s = self._clock()
        # A robot forgotten on its way (sent on, then slower to reach its replica than
        # the grace) that its replica now serves by name is placed back there, with what
        # the door knew of it; below, its replica's report then weighs it as any other.
        for robot in sorted(presence.names.intersection(self._forgotten)):
            said = self._forgotten.pop(robot)
            if self.placement.replica_of(robot) is None and self.placement.alive[slot]:
                self.placement.place(robot, said)
                self.placement.move(robot, slot)
        members = self.placement.members(slot)
        num_others = presence.num_unnamed + len(presence.names.difference(members))
        unseen = []
        for robot in reversed(members):  # the latest placed first
            if robot not in presence.names:
                unseen.append(robot)
                continue
            self._seen_s[robot] = now_s
            self._reported_at[robot] = slot
            reported = presence.demands.get(robot)
            if reported is not None:
                said = self.placement.demand_of(robot)
                self.placement.update_demand(
                    robot, dataclasses.replace(reported, round_trip_s=said.round_trip_s)
                )
        # A robot the door has known to report by name (Armory's client) is never one of
        # those connections; it is protected by its own grace only (on its way, moving).
        guessed = [robot for robot in unseen if robot not in self._reported_at]
        guessed.sort(key=lambda robot: self._seen_s.get(robot, now_s), reverse=True)
        for robot in guessed[:num_others]:
            self._seen_s[robot] = now_s
        gone = [robot for robot in unseen if now_s - self._seen_s.get(robot, now_s) > after_s]
        for robot in gone:
            self._forgotten[robot] = self.placement.demand_of(robot)
            self._forget(robot)
            if len(self._forgotten) > MAX_FORGOTTEN:
                del self._forgotten[next(iter(self._forgotten))]
        return gone

    def rebalance(self) -> list[tuple[str, int, int]]:
        """Move robots off a replica over capacity (``Placement.rebalance``): only robots
        on Armory's client that their replica reports where placement has them (their
        client reconnects on its own) and that were not moved within
        ``MOVE_COOLDOWN_S``. Returns (robot, old slot, new slot) for each; the caller asks
        the old replica to let the robot go (:meth:`undo_move` if it cannot)."""
        now_s = self._clock()
        old = {robot: self.placement.replica_of(robot) for robot in self._reported_at}

        def movable(robot: str) -> bool:
            return (
                robot in old
                and self._reported_at[robot] == old[robot]
                and now_s - self._moved_s.get(robot, -MOVE_COOLDOWN_S) >= MOVE_COOLDOWN_S
            )

        moves = []
        for robot, slot in self.placement.rebalance(movable).items():
            source = old[robot]
            assert source is not None  # placed, since rebalance moved it
            self._moved_s[robot] = now_s
            self._seen_s[robot] = now_s  # its grace to reconnect runs from the move
            moves.append((robot, source, slot))
        return moves

    def undo_move(self, robot: str, slot: int) -> None:
        """Put a robot back on ``slot`` (its replica could not let it go); it may be moved
        again after the cooldown."""
        if self.placement.replica_of(robot) is not None and self.table.slots[slot] is not None:
            self.placement.move(robot, slot)

    def _forget(self, robot: str) -> None:
        """A robot left: placement and the door forget it."""
        self.placement.remove(robot)
        self._seen_s.pop(robot, None)
        self._reported_at.pop(robot, None)
        self._moved_s.pop(robot, None)

    def listing(self) -> list[dict[str, object]]:
        """Each slot: its replica's doors, the robots placed there and their fluid load
        on its GPU (:mod:`armory.placement.fluid_load`; below 1, ``1 - load`` is headroom),
        whatever the placement policy."""
        return [
            {
                "slot": slot,
                "replica_id": held.replica_id if held else None,
                "doors": held.door_addresses() if held else {},
                "num_robots": len(self.placement.members(slot)),
                "load": round(self.placement.load(slot), 4),
            }
            for slot, held in enumerate(self.table.slots)
        ]

    # ---- I/O ------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the front door is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await serve(
            self._refuse_websocket,
            self.host,
            self._requested_port,
            process_request=self._process_request,
            server_header="armory-front-door",
            ssl=self._ssl_context,
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _refuse_websocket(self, ws: ServerConnection) -> None:
        """Never reached: every handshake is answered before it completes."""
        await ws.close(1011, "the front door carries no robot traffic")

    def _process_request(self, connection: ServerConnection, request: Request) -> Response:
        status, body, location = self.answer(request.path, request.headers.get(http.AUTH_HEADER))
        if status >= 400:
            logger.info("front door refused %s: HTTP %d %s", request.path, status, body.strip())
        response = connection.respond(status, body)
        if location is not None:
            response.headers["Location"] = location
        if body.startswith(("{", "[")):
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
        return response

    def answer(self, target: str, auth_header: str | None) -> tuple[HTTPStatus, str, str | None]:
        """(status, body, redirect location) for a request target; pure but for placing."""
        path = target.split("?", 1)[0]
        if path == http.HEALTH_PATH:
            up = self.table.num_up
            status = HTTPStatus.OK if up else HTTPStatus.SERVICE_UNAVAILABLE
            return status, f"{up}/{len(self.table.slots)} replicas up\n", None
        if not http.api_key_ok(auth_header, self._api_key):
            return (
                HTTPStatus.UNAUTHORIZED,
                f"missing or wrong API key: send the header "
                f"'{http.AUTH_HEADER}: {http.AUTH_SCHEME} <key>'\n",
                None,
            )
        if path == REPLICAS_PATH:
            return HTTPStatus.OK, json.dumps(self.listing(), indent=2) + "\n", None
        if path not in ("/", PLACE_PATH):
            return HTTPStatus.NOT_FOUND, f"no such path {path!r}: ws:// here, or /place\n", None
        try:
            request = parse_placement_request(target)
        except ValueError as exc:
            return HTTPStatus.BAD_REQUEST, f"{exc}\n", None
        up = [held for held in self.table.slots if held is not None]
        if not up:
            return HTTPStatus.SERVICE_UNAVAILABLE, "no replica is up; try again shortly\n", None
        open_doors = up[0].door_addresses()  # every replica opens the same doors
        if path == PLACE_PATH and request.door not in open_doors:
            return (
                HTTPStatus.BAD_REQUEST,
                f"the replicas have no {request.door} door open; open: {', '.join(open_doors)}\n",
                None,
            )
        try:
            slot, address = self.assign(request)
        except NoReplicaError:
            return HTTPStatus.SERVICE_UNAVAILABLE, "no replica is up; try again shortly\n", None
        doors = address.door_addresses()
        if path == PLACE_PATH:
            body = {"slot": slot, "replica_id": address.replica_id, "doors": doors}
            return HTTPStatus.OK, json.dumps(body) + "\n", None
        return (
            HTTPStatus.TEMPORARY_REDIRECT,
            f"robot served at {doors['openpi']}\n",
            self._location(doors["openpi"], address.replica_id, request.robot),
        )

    def _location(self, door_uri: str, replica_id: str, robot: str | None) -> str:
        """Where a robot is redirected: its replica's openpi door, with a ticket there in
        place of the API key when the cluster has one."""
        if self._api_key is None:
            return door_uri
        expires_s = self._wall_clock() + self._ticket_ttl_s
        query = ticket_query(self._api_key, audience=replica_id, robot=robot, expires_s=expires_s)
        return f"{door_uri}/?{query}"
