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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from armory_client.ordering import after
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from armory.engine.errors import RequestError, SessionClosed
from armory.engine.server_engine import AcceptedRequest, ServerEngine
from armory.engine.session import Session
from armory.transports import http
from armory.transports.base import Transport
from armory.transports.listen import ListenError, bind_failure
from armory.transports.off_loop import decode_off_loop
from armory.transports.openpi_protocol import (
    ERROR_CLOSE_CODE,
    ERROR_CLOSE_REASON,
    REPLACED_CLOSE_CODE,
    decode_request,
    encode_metadata,
    encode_reply,
    metadata_map,
)
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
    ) -> None:
        """Limits and timeouts come from ``engine.config``; ``port=0`` picks a free port."""
        self.engine = engine
        self.host = host
        self._requested_port = port
        self._api_key = api_key or None
        self._server: Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._metadata_frame = encode_metadata(
            metadata_map(engine.metadata, engine.config, scheduler=engine.scheduler_name)
        )

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

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        answer = http.route(
            request.path,
            request.headers.get(http.AUTH_HEADER),
            api_key=self._api_key,
            stats=self.engine.stats,
            max_connections=self.engine.config.max_connections,
            num_connections=len(self._server.connections) if self._server else 0,
        )
        if answer is None:
            return None
        if answer.status >= 400:
            logger.info("refused %s %s: HTTP %d", _peer(connection), request.path, answer.status)
        response = connection.respond(answer.status, answer.body)
        if not answer.content_type.startswith("text/plain"):
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = answer.content_type
        return response

    # ---- one connection ------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        session = self.engine.open_session(
            peer=_peer(ws), evict=lambda reason: self._close_later(ws, reason)
        )
        watcher = asyncio.ensure_future(ws.wait_closed())
        watcher.add_done_callback(lambda _: self.engine.close_session(session))
        answers: set[asyncio.Task[None]] = set()
        try:
            await ws.send(self._metadata_frame)
            previous: asyncio.Task[None] | None = None
            while True:
                frame = await ws.recv()
                received_s = self.engine.clock()
                accepted = await self._accept(
                    session, frame, received_s, num_waiting=len(answers)
                )
                del frame
                if accepted is None:
                    break  # the session closed
                if isinstance(accepted, RequestError):
                    # The connection ends: requests still waiting are dropped, replies
                    # already being sent go first, then the error, then close.
                    self.engine.close_session(session)
                    await after(previous)
                    await self._refuse(ws, session, accepted)
                    break
                previous = asyncio.create_task(self._answer(ws, session, accepted, previous))
                answers.add(previous)
                previous.add_done_callback(answers.discard)
        except ConnectionClosed:
            pass
        except Exception:
            logger.exception("connection %s (%s) failed", session.robot_name, session.peer)
            await self._send_error(ws, "internal server error; the server log has the details")
        finally:
            watcher.cancel()
            self.engine.close_session(session)
            if answers:
                await asyncio.wait(answers)

    async def _accept(
        self, session: Session, frame: bytes | str, received_s: float, *, num_waiting: int
    ) -> AcceptedRequest | RequestError | None:
        """Decode a request and hand it to the engine at once (a robot may send the next
        before this one is answered); its error to send, or None if the session closed."""
        limit = self.engine.config.max_pipelined_requests
        try:
            if num_waiting >= limit:
                raise RequestError(
                    f"more than {limit} requests of this connection await replies "
                    "(--server.max-pipelined-requests); wait for replies before sending more"
                )
            observation = await decode_off_loop(decode_request, frame)
            return self.engine.accept(session, observation, received_s=received_s)
        except SessionClosed:
            return None
        except RequestError as exc:
            return exc

    async def _answer(
        self,
        ws: ServerConnection,
        session: Session,
        accepted: AcceptedRequest,
        previous: asyncio.Task[None] | None,
    ) -> None:
        """Wait for one request's reply and send it once the replies before it are sent
        (replies keep the order of requests); an error is sent, then the connection closed."""
        try:
            try:
                reply = await self.engine.answer(accepted)
            finally:
                await after(previous)
        except SessionClosed:
            return
        except RequestError as exc:
            await self._refuse(ws, session, exc)
            return
        except Exception:
            logger.exception("a request of %s (%s) failed", session.robot_name, session.peer)
            await self._send_error(ws, "internal server error; the server log has the details")
            return
        if session.closed:
            return
        encode_started_s = self.engine.clock()
        frame = encode_reply(reply)
        encode_s = self.engine.clock() - encode_started_s
        try:
            await ws.send(frame)
        except ConnectionClosed:
            return
        self.engine.reply_sent(session, reply, self.engine.clock(), encode_s=encode_s)

    async def _refuse(self, ws: ServerConnection, session: Session, exc: RequestError) -> None:
        """A request's error, counted, logged and sent to its robot alone."""
        self.engine.count_error()
        logger.info("request of %s (%s) refused: %s", session.robot_name, session.peer, exc)
        await self._send_error(ws, str(exc))

    async def _send_error(self, ws: ServerConnection, message: str) -> None:
        """The error as a text frame, then close 1011 (openpi's convention)."""
        with contextlib.suppress(ConnectionClosed):
            await ws.send(message)
            await ws.close(ERROR_CLOSE_CODE, ERROR_CLOSE_REASON)

    def _close_later(self, ws: ServerConnection, reason: str) -> None:
        """Close ``ws`` from outside its handler (a newer connection replaced it)."""
        reason = reason.encode()[:_MAX_CLOSE_REASON_BYTES].decode(errors="ignore")
        task = asyncio.ensure_future(ws.close(REPLACED_CLOSE_CODE, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _peer(connection: ServerConnection) -> str:
    address = connection.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
