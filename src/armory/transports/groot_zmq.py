"""The GR00T front door: Isaac-GR00T's ZeroMQ REQ/REP protocol, many robots at once.

Robots keep their unmodified REQ sockets. The server binds a ROUTER socket, which
keeps one identity per connected REQ socket, so each identity is one robot (one
engine session) and requests of different robots are served concurrently while
each robot still sees strict request/reply. ROUTER cannot see a peer disconnect:
a session unheard of for ``session_timeout_s`` is closed (its next request opens a
new one). Every request gets exactly one reply, ``{"error": ...}`` for anything
that cannot be served, so a bad request never wedges a robot's socket.
See docs/groot.md.

What to answer is decided by the door's I/O-free core,
:class:`~armory.transports.groot_core.GrootDoorCore`; this module receives frames,
hands ``get_action`` to the engine and sends the replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from armory.core.errors import ObservationError
from armory.engine.server_engine import ServerEngine
from armory.transports.base import Transport
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.groot_core import BUSY, ActionCall, GrootDoorCore
from armory.transports.groot_protocol import decode_request, error_reply
from armory.transports.listen import ListenError, bind_failure
from armory.transports.off_loop import RECEIVE_HEADROOM, decode_off_loop

logger = logging.getLogger(__name__)


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
        self.core = GrootDoorCore(
            engine,
            config,
            can_stop_server=on_kill is not None,
            api_token=config.api_token or api_key or None,
        )
        self._context = zmq.asyncio.Context()
        self._socket: zmq.asyncio.Socket | None = None
        self._port: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the GR00T door is not started")
        return self._port

    @property
    def requires_credentials(self) -> bool:
        return self.core.api_token is not None

    def describe(self) -> str:
        encoding = self.core.config.encoding
        only = "" if encoding == "auto" else f" ({encoding.upper()} only)"
        return f"GR00T ZeroMQ on tcp://{self.host}:{self.port}{only}"

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
        self.core.close()
        if self._socket is not None:
            self._socket.close(linger=0)
        self._context.term()

    # ---- the socket ----------------------------------------------------

    async def _receive_loop(self) -> None:
        assert self._socket is not None
        sweep_every_s = min(self.config.session_timeout_s, 5.0)
        next_sweep_s = self.engine.clock() + sweep_every_s
        while True:
            try:
                async with asyncio.timeout(sweep_every_s):
                    parts = await self._socket.recv_multipart(copy=True)
            except TimeoutError:
                self.core.robots.sweep(self.engine.clock())
                continue
            # Under a steady stream of requests the sweep (a pass over every robot) runs
            # once per period, not once per request.
            now_s = self.engine.clock()
            if now_s >= next_sweep_s:
                self.core.robots.sweep(now_s)
                next_sweep_s = now_s + sweep_every_s
            # A REQ peer sends [identity, b"", frame].
            if len(parts) != 3 or parts[1] != b"":
                logger.info("GR00T door: dropped a message of %d parts", len(parts))
                continue
            identity, _, frame = parts
            received_s = self.engine.clock()
            if len(self._tasks) >= self.engine.config.max_connections:
                # One request per REQ socket: this many at once is a flood (a DEALER).
                await self._send(identity, error_reply(BUSY))
                continue
            task = asyncio.ensure_future(self._serve(identity, frame, received_s))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, identity: bytes, reply: bytes) -> None:
        if self._socket is not None:
            with contextlib.suppress(zmq.ZMQError):
                await self._socket.send_multipart([identity, b"", reply])

    # ---- one request ---------------------------------------------------

    async def _serve(self, identity: bytes, frame: bytes, received_s: float) -> None:
        try:
            limit = self.engine.config.max_message_bytes
            request = await decode_off_loop(
                functools.partial(decode_request, max_message_bytes=limit), frame
            )
            step = self.core.receive(identity, request, received_s)
            if isinstance(step, ActionCall):
                reply = await self._get_action(identity, step, received_s)
            else:
                reply = step.frame
                if step.kill:
                    assert self.on_kill is not None
                    asyncio.get_running_loop().call_later(0.05, self.on_kill)
        except Exception as exc:
            reply = self.core.refusal(exc, identity)
        await self._send(identity, reply)

    async def _get_action(self, identity: bytes, call: ActionCall, received_s: float) -> bytes:
        with self.core.robots.calling(identity, self.engine.clock):
            try:
                reply = await self.engine.infer(
                    call.session, call.observation, received_s=received_s
                )
            except ObservationError as exc:
                raise call.in_robot_terms(exc) from None
        return self.core.action_reply(call, reply, self.engine.clock())
