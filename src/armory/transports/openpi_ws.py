"""The openpi-compatible WebSocket front door (websockets' asyncio server).

Per connection: the metadata frame right after the handshake, then one binary
frame in, one binary frame out, for as long as the robot likes. The handler keeps
reading while requests wait for their batches: a robot that drops mid-batch is
forgotten at once (its chunk, when ready, is thrown away), and a pipelined
every-tick robot's newer observation replaces one still waiting (answered
"deferred"); replies keep the order of requests. A bad request gets its error as
a text frame, then close 1011, on that connection only. With the server's TLS pair
the door speaks only TLS (``wss://``, and HTTPS for health and stats). See
docs/protocol.md and docs/security.md.

The connection's rules (pipelining limit, reply order, error then close) are its
I/O-free core's, :class:`~armory.transports.openpi_core.OpenpiConnection`; the
connections are in a :class:`~armory.transports.sessions.SessionRegistry`. This
module reads frames, awaits the engine and sends what the core releases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from armory.core.errors import RequestError, SessionClosed
from armory.engine.server_engine import ServerEngine
from armory.transports import http
from armory.transports.base import Transport
from armory.transports.listen import ListenError, bind_failure
from armory.transports.observe_pages import (
    MAX_LIVE_VIEWERS,
    is_live_feed,
    observe_pages,
    serve_live_feed,
)
from armory.transports.off_loop import decode_off_loop
from armory.transports.openpi_core import (
    INTERNAL,
    OpenpiConnection,
    Outcome,
    Outgoing,
    Pending,
    SendError,
)
from armory.transports.openpi_protocol import (
    ERROR_CLOSE_CODE,
    ERROR_CLOSE_REASON,
    MOVED_CLOSE_CODE,
    MOVED_CLOSE_REASON,
    REPLACED_CLOSE_CODE,
    decode_request,
    encode_metadata,
    metadata_map,
)
from armory.transports.sessions import SessionRegistry
from armory.transports.tickets import TicketGate
from armory.transports.tls import server_ssl_context

logger = logging.getLogger(__name__)

_MAX_CLOSE_REASON_BYTES = 123
"""RFC 6455: a close frame's reason holds at most 123 bytes."""


class OpenpiWebSocketTransport(Transport):
    """Serves the engine over openpi's WebSocket + msgpack protocol."""

    def __init__(
        self,
        engine: ServerEngine,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        # Security
        api_key: str | None = None,
        tickets: TicketGate | None = None,
        movable: bool = False,
    ) -> None:
        """Limits and timeouts come from ``engine.config``; ``port=0`` picks a free port.
        ``tickets`` (a replica of ``armory cluster``) lets robots in with a front-door
        ticket in place of the key (:mod:`armory.transports.tickets`); ``movable`` (a
        replica of ``armory cluster``) opens ``/move``, by which the front door moves a
        robot to another replica (:meth:`ServerEngine.move_robot`)."""
        self.engine = engine
        self.host = host
        self._requested_port = port
        self._api_key = api_key or None
        self._tickets = tickets
        self._movable = movable
        self._server: Server | None = None
        self.connections: SessionRegistry[ServerConnection, OpenpiConnection] = SessionRegistry(
            engine,
            door="openpi",
            make=lambda _ws, session: OpenpiConnection(engine, session),
            on_evict=self._close_later,
        )
        """Open connections (their number is limited at the handshake, see _process_request)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._metadata_frame = encode_metadata(
            metadata_map(engine.metadata, engine.config, scheduler=engine.scheduler_name)
        )
        self._pages = observe_pages(engine)
        self._viewers: set[ServerConnection] = set()
        """Open dashboard feeds (not robots: they do not count against max_connections)."""

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the transport is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def requires_credentials(self) -> bool:
        return self._api_key is not None

    async def start(self) -> None:
        config = self.engine.config
        ssl = server_ssl_context(config)  # a bad certificate file is not a port problem
        try:
            self._server = await serve(
                self._handle,
                self.host,
                self._requested_port,
                process_request=self._process_request,
                compression=None,
                max_size=config.max_message_bytes,
                close_timeout=config.close_timeout_s,
                server_header="armory",
                ssl=ssl,
            )
        except OSError as exc:
            address = f"{self.host}:{self._requested_port}"
            raise ListenError("openpi", address, bind_failure(exc)) from None

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        await self._server.wait_closed()
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task

    # ---- HTTP (health, stats, API key) ---------------------------------

    async def _process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        live_feed = bool(self._pages) and is_live_feed(request.path)
        num_robots = (len(self._server.connections) if self._server else 0) - len(self._viewers)
        answer = http.route(
            request.path,
            request.headers.get(http.AUTH_HEADER),
            api_key=self._api_key,
            stats=self.engine.stats,
            # Dashboard viewers have their own limit, so open pages never take robots' slots.
            max_connections=None if live_feed else self.engine.config.max_connections,
            num_connections=num_robots,
            pages=self._pages,
            tickets=self._tickets,
            move_robot=self._move_robot if self._movable else None,
        )
        if answer is None and live_feed and len(self._viewers) >= MAX_LIVE_VIEWERS:
            answer = http.HttpAnswer(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"{len(self._viewers)} dashboards are open, the most this server feeds; "
                "close one and reload\n",
            )
        if answer is None:
            return None
        if not isinstance(answer, http.HttpAnswer):
            answer = await answer
        if answer.status >= 400:
            logger.info("refused %s %s: HTTP %d", _peer(connection), request.path, answer.status)
        response = connection.respond(answer.status, answer.body)
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = answer.content_type
        for name, value in answer.headers:
            response.headers[name] = value
        return response

    # ---- one connection ------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        if self._pages and ws.request is not None and is_live_feed(ws.request.path):
            self._viewers.add(ws)
            try:
                await serve_live_feed(ws, self.engine.stats)
            finally:
                self._viewers.discard(ws)
            return
        connection = self.connections.robot(ws, peer=_peer(ws), now_s=self.engine.clock())
        session = connection.session
        watcher = asyncio.ensure_future(ws.wait_closed())
        watcher.add_done_callback(lambda _: self.connections.close(ws, "the connection closed"))
        send_lock = asyncio.Lock()
        answers: set[asyncio.Task[None]] = set()
        try:
            await ws.send(self._metadata_frame)
            while True:
                frame = await ws.recv()
                received_s = self.engine.clock()
                try:
                    connection.admit()
                    observation = await decode_off_loop(decode_request, frame)
                    del frame
                    pending = connection.accept(observation, received_s)
                except SessionClosed:
                    break
                except RequestError as exc:
                    await self._deliver(ws, connection, send_lock, connection.refuse(exc))
                    break
                answer = asyncio.create_task(self._answer(ws, connection, send_lock, pending))
                answers.add(answer)
                answer.add_done_callback(answers.discard)
        except ConnectionClosed:
            pass
        except Exception:
            logger.exception("connection %s (%s) failed", session.robot_name, session.peer)
            await self._send_error(ws, INTERNAL)
        finally:
            watcher.cancel()
            self.connections.close(ws, "the handler ended")
            if answers:
                await asyncio.wait(answers)

    async def _answer(
        self,
        ws: ServerConnection,
        connection: OpenpiConnection,
        send_lock: asyncio.Lock,
        pending: Pending,
    ) -> None:
        """Wait for one request's answer and send what the connection then releases
        (replies keep the order of requests; an error goes out, then the close)."""
        outcome: Outcome
        try:
            outcome = await self.engine.answer(pending.request)
        except Exception as exc:
            outcome = exc
        except asyncio.CancelledError:
            # The answers after this one still go out, in order.
            dropped = SessionClosed("the request's task was cancelled")
            released = connection.settle(pending.seq, dropped)
            self._in_background(self._deliver(ws, connection, send_lock, released))
            raise
        await self._deliver(ws, connection, send_lock, connection.settle(pending.seq, outcome))

    async def _deliver(
        self,
        ws: ServerConnection,
        connection: OpenpiConnection,
        send_lock: asyncio.Lock,
        outgoing: list[Outgoing],
    ) -> None:
        """Send frames released by the connection's core, one delivery after another."""
        if not outgoing:
            return
        session = connection.session
        async with send_lock:
            for item in outgoing:
                if isinstance(item, SendError):
                    await self._send_error(ws, item.message)
                    return
                try:
                    await ws.send(item.frame)
                except ConnectionClosed:
                    return
                self.engine.reply_sent(
                    session, item.reply, self.engine.clock(), encode_s=item.encode_s
                )
            if session.move_reason is not None and connection.num_waiting == 0:
                # Moved by the cluster: the robot has every reply it waited for. The
                # session ends now, so that a request already on its way is not served
                # here: Armory's client sends it again through the front door.
                self.connections.close(ws, session.move_reason)
                self._close_later(ws, session.move_reason, code=MOVED_CLOSE_CODE)

    async def _send_error(self, ws: ServerConnection, message: str) -> None:
        """The error as a text frame, then close 1011 (openpi's convention)."""
        with contextlib.suppress(ConnectionClosed):
            await ws.send(message)
            await ws.close(ERROR_CLOSE_CODE, ERROR_CLOSE_REASON)

    def _close_later(
        self, ws: ServerConnection, reason: str, *, code: int = REPLACED_CLOSE_CODE
    ) -> None:
        """Close ``ws`` from outside its handler (a newer connection replaced it, or the
        cluster moved its robot)."""
        reason = reason.encode()[:_MAX_CLOSE_REASON_BYTES].decode(errors="ignore")
        self._in_background(ws.close(code, reason))

    def _move_robot(self, robot_name: str) -> bool:
        """``/move``: the robot reconnects after its next reply (False: not here)."""
        return self.engine.move_robot(robot_name, MOVED_CLOSE_REASON)

    def _in_background(self, step: Coroutine[Any, Any, None]) -> None:
        """Run ``step`` in a task of its own; :meth:`stop` waits for it."""
        task = asyncio.ensure_future(step)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _peer(connection: ServerConnection) -> str:
    address = connection.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
