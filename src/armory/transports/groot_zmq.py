"""The GR00T front door: Isaac-GR00T's ZeroMQ REQ/REP protocol, many robots at once.

Robots keep their unmodified REQ sockets. The server binds a ROUTER socket, which
keeps one identity per connected REQ socket, so each identity is one robot (one
engine session) and requests of different robots are served concurrently while
each robot still sees strict request/reply. ROUTER cannot see a peer disconnect:
a session unheard of for ``session_timeout_s`` is closed (its next request opens a
new one). Every request gets exactly one reply, ``{"error": ...}`` for anything
that cannot be served, so a bad request never wedges a robot's socket.
See docs/groot.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.asyncio

from armory.engine.errors import ObservationError, RequestError, SessionClosed
from armory.engine.server_engine import Reply, ServerEngine
from armory.engine.session import Session
from armory.transports.base import Transport
from armory.transports.groot_adapter import GrootAdapter, StreamNames
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.groot_protocol import (
    ENDPOINTS,
    UNAUTHORIZED,
    Encoding,
    GrootProtocolError,
    GrootRequest,
    decode_request,
    encode_reply,
    error_reply,
    get_action_parts,
)
from armory.transports.listen import ListenError, bind_failure
from armory.transports.off_loop import RECEIVE_HEADROOM, decode_off_loop

logger = logging.getLogger(__name__)

_BUSY = (
    "more requests are in progress than robots may connect (--server.max-connections); "
    "send one request at a time"
)


@dataclass
class _Robot:
    session: Session
    last_seen_s: float
    encoding: Encoding | None = None
    """The encoding of its last get_action (None before its first)."""
    streams: StreamNames | None = None
    """The streams of its last get_action, as get_modality_config lists them."""


class GrootZmqTransport(Transport):
    """Serves the engine over GR00T's ZeroMQ protocol (ROUTER behind REQ clients)."""

    def __init__(
        self,
        engine: ServerEngine,
        config: GrootDoorConfig,
        *,
        host: str = "127.0.0.1",
        on_kill: Callable[[], None] | None = None,
        # Security
        api_key: str | None = None,
    ) -> None:
        """``api_key``: the server's key, the token required when ``config.api_token``
        is unset."""
        self.engine = engine
        self.config = config
        self.host = host
        self.on_kill = on_kill
        self._api_token = config.api_token or api_key or None
        meta = engine.metadata
        self.adapter = GrootAdapter(config.layout, meta.inputs, meta.action_horizon)
        self._context = zmq.asyncio.Context()
        self._socket: zmq.asyncio.Socket | None = None
        self._port: int | None = None
        self._robots: dict[bytes, _Robot] = {}
        self._last_encoding: Encoding = "n1.6"
        """The encoding of the door's last get_action, from any robot (see _encoding)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the GR00T door is not started")
        return self._port

    @property
    def requires_credentials(self) -> bool:
        return self._api_token is not None

    def describe(self) -> str:
        return f"GR00T ZeroMQ on tcp://{self.host}:{self.port}"

    async def start(self) -> None:
        socket = self._context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        # Over the limit, a frame gets an error reply (up to the headroom: a REQ client
        # waits forever for a reply that never comes).
        limit = self.engine.config.max_message_bytes
        socket.setsockopt(zmq.MAXMSGSIZE, RECEIVE_HEADROOM * limit)
        try:
            if self.config.port == 0:
                self._port = socket.bind_to_random_port(f"tcp://{self.host}")
            else:
                socket.bind(f"tcp://{self.host}:{self.config.port}")
                self._port = self.config.port
        except zmq.ZMQError as exc:
            socket.close()
            address = f"tcp://{self.host}:{self.config.port}"
            raise ListenError("GR00T", address, bind_failure(exc)) from None
        self._socket = socket
        self._loop_task = asyncio.ensure_future(self._receive_loop())
        if self.engine.config.tls:
            logger.warning(
                "the GR00T door on tcp://%s:%d is plaintext: GR00T's client has no TLS, so "
                "the server's certificate does not cover it; tunnel it (docs/security.md)",
                self.host,
                self._port,
            )

    async def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for robot in self._robots.values():
            self.engine.close_session(robot.session)
        self._robots.clear()
        if self._socket is not None:
            self._socket.close(linger=0)
        self._context.term()

    # ---- the socket ----------------------------------------------------

    async def _receive_loop(self) -> None:
        assert self._socket is not None
        sweep_every_s = min(self.config.session_timeout_s, 5.0)
        while True:
            try:
                async with asyncio.timeout(sweep_every_s):
                    parts = await self._socket.recv_multipart(copy=True)
            except TimeoutError:
                self._close_idle()
                continue
            # A REQ peer sends [identity, b"", frame].
            if len(parts) != 3 or parts[1] != b"":
                logger.info("GR00T door: dropped a message of %d parts", len(parts))
                continue
            identity, _, frame = parts
            received_s = self.engine.clock()
            if len(self._tasks) >= self.engine.config.max_connections:
                # One request per REQ socket: this many at once is a flood (a DEALER).
                await self._send(identity, error_reply(_BUSY))
                continue
            task = asyncio.ensure_future(self._serve(identity, frame, received_s))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            self._close_idle()

    async def _send(self, identity: bytes, reply: bytes) -> None:
        if self._socket is not None:
            with contextlib.suppress(zmq.ZMQError):
                await self._socket.send_multipart([identity, b"", reply])

    def _close_idle(self) -> None:
        now_s = self.engine.clock()
        for identity, robot in list(self._robots.items()):
            if now_s - robot.last_seen_s > self.config.session_timeout_s:
                self.engine.close_session(robot.session)
                del self._robots[identity]

    def _robot(self, identity: bytes, now_s: float) -> _Robot:
        robot = self._robots.get(identity)
        if robot is None or robot.session.closed:
            limit = self.engine.config.max_connections
            if len(self._robots) >= limit:
                raise GrootProtocolError(
                    f"{len(self._robots)} robots are connected, the most this door serves "
                    "(--server.max-connections); try again later"
                )
            session = self.engine.open_session(peer=f"zmq:{identity.hex()}")
            robot = self._robots[identity] = _Robot(session=session, last_seen_s=now_s)
        robot.last_seen_s = now_s
        return robot

    # ---- one request ---------------------------------------------------

    async def _serve(self, identity: bytes, frame: bytes, received_s: float) -> None:
        try:
            limit = self.engine.config.max_message_bytes
            request = await decode_off_loop(
                functools.partial(decode_request, max_message_bytes=limit), frame
            )
            self._check_token(request)
            reply = await self._dispatch(identity, request, received_s)
        except GrootProtocolError as exc:
            self.engine.count_error()
            logger.info("GR00T request refused: %s", exc)
            reply = error_reply(str(exc))
        except RequestError as exc:
            self.engine.count_error()
            logger.info("GR00T request refused: %s", exc)
            reply = error_reply(str(exc))
        except SessionClosed:
            reply = error_reply("the session was closed; send the request again")
        except Exception:
            logger.exception("GR00T request failed")
            reply = error_reply("internal server error; the server log has the details")
        await self._send(identity, reply)

    def _check_token(self, request: GrootRequest) -> None:
        expected = self._api_token
        if expected is None:
            return
        given = (request.api_token or "").encode()
        if not hmac.compare_digest(given, expected.encode()):
            raise GrootProtocolError(UNAUTHORIZED)

    async def _dispatch(self, identity: bytes, request: GrootRequest, received_s: float) -> bytes:
        endpoint = request.endpoint
        if endpoint == "ping":
            return encode_reply({"status": "ok", "message": "Server is running"})
        if endpoint == "kill":
            if not self.config.allow_kill or self.on_kill is None:
                raise GrootProtocolError(
                    "kill is disabled on this server (the operator enables it with "
                    "--groot.allow-kill)"
                )
            asyncio.get_running_loop().call_later(0.05, self.on_kill)
            return encode_reply({"status": "ok", "message": "Server is shutting down"})
        robot = self._robot(identity, received_s)
        if endpoint == "get_modality_config":
            configs = self.adapter.modality_configs(self._encoding(robot), robot.streams)
            return encode_reply(configs)
        if endpoint == "reset":
            # A new episode: the robot's queue starts empty.
            self.engine.close_session(robot.session)
            del self._robots[identity]
            return encode_reply({"status": "ok", "message": "reset"})
        if endpoint == "get_action":
            return await self._get_action(robot, request.data, received_s)
        raise GrootProtocolError(f"Unknown endpoint: {endpoint!r}; valid: {', '.join(ENDPOINTS)}")

    def _encoding(self, robot: _Robot) -> Encoding:
        """How to answer a robot's get_modality_config: the configured encoding; under auto,
        that of the robot's last get_action, else of the door's last one (both clients ask
        for the config with the same bytes, so a robot not yet heard from is assumed to be
        like the others), else N1.6."""
        configured = self.config.encoding
        if configured != "auto":
            return configured  # type: ignore[return-value]
        return robot.encoding or self._last_encoding

    async def _get_action(self, robot: _Robot, data: Any, received_s: float) -> bytes:
        obs, encoding = get_action_parts(data, self.config.encoding)
        robot.encoding = self._last_encoding = encoding
        mapped = self.adapter.observation(obs, encoding)
        robot.streams = mapped.streams
        try:
            reply = await self.engine.infer(
                robot.session, mapped.observation, received_s=received_s
            )
        except ObservationError as exc:
            raise ObservationError(mapped.in_robot_terms(str(exc))) from None
        actions = self.adapter.actions(reply.actions, encoding)
        if encoding == "n1.5":
            frame = encode_reply(actions)
        else:
            frame = encode_reply([actions, _info(reply, self.engine.metadata.name)])
        self.engine.reply_sent(robot.session, reply, self.engine.clock())
        return frame


def _info(reply: Reply, policy: str) -> dict[str, Any]:
    """The info map of an N1.6 reply: where the chunk came from and how long it took."""
    info: dict[str, Any] = {
        "policy": policy,
        "batch_size": reply.batch_size,
        "queue_ms": 1e3 * reply.wait_s,
        "infer_ms": 1e3 * reply.forward_s,
    }
    if reply.noise_sha256 is not None:
        info["noise_sha256"] = reply.noise_sha256
    return info
