"""A tiny openpi-style WebSocket server for the client tests.

The server sends a metadata frame after the handshake, then answers each binary
frame according to a `mode`. Running it in a thread lets the blocking client and
the asyncio client be tested against the very same server.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from armory_client import packb, unpackb
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response


@dataclass
class FakeServer:
    """What the test server does and what it saw."""

    # Behaviour
    mode: str = "echo"
    """echo: reply {"echo": obs, "count": n}; text: send an error text frame, close 1011;
    silent: never reply; once: reply to the first request, then close the connection;
    slow: reply after `delay_s`; big: reply with a frame of `big_bytes` zero bytes;
    moved: close 1012 (service restart, an Armory cluster's replica letting the robot go)
    on the first request of each of `moves` connections without answering it, then echo."""
    moves: int = 1
    metadata: Any = field(default_factory=lambda: {"reset_pose": [0.0, 1.0]})
    """Sent first: packed if a map or list, as a text frame (then close) if a str."""
    api_key: str | None = None
    """If set, handshakes without ``Authorization: Api-Key <key>`` get HTTP 401."""
    redirect_to: str | None = None
    """If set, handshakes at ``/`` (that pass the key check) get ``307`` to this URI."""
    delay_s: float = 0.0
    big_bytes: int = 0
    port: int = 0
    """Port to bind (0: ephemeral); the bound port after start."""
    # Observations
    requests: list[Any] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    """Handshake request headers, one per connection attempt (case-insensitive)."""
    paths: list[str] = field(default_factory=list)
    """Handshake request targets (path and query), one per connection attempt."""
    closed: threading.Event = field(default_factory=threading.Event)
    """Set once the server has finished closing a connection itself."""

    def check_key(self, conn: ServerConnection, request: Request) -> Response | None:
        """Refuse the handshake with 401 when an API key is required and wrong; redirect it
        when asked to."""
        self.headers.append(request.headers)
        self.paths.append(request.path)
        if self.api_key and request.headers.get("Authorization") != f"Api-Key {self.api_key}":
            return conn.respond(HTTPStatus.UNAUTHORIZED, "bad key\n")
        if self.redirect_to is not None and request.path.split("?", 1)[0] == "/":
            response = conn.respond(HTTPStatus.TEMPORARY_REDIRECT, "elsewhere\n")
            response.headers["Location"] = self.redirect_to
            return response
        return None

    async def handle(self, ws: ServerConnection) -> None:
        """One connection: metadata frame, then replies according to `mode`."""
        if isinstance(self.metadata, str):
            await ws.send(self.metadata)
            await self._close(ws, 1011)
            return
        await ws.send(packb(self.metadata))
        async for frame in ws:
            obs = unpackb(frame)
            self.requests.append(obs)
            if self.mode == "text":
                await ws.send("bad observation: missing 'state'")
                await self._close(ws, 1011)
                return
            if self.mode == "silent":
                continue
            if self.mode == "moved" and self.moves > 0:
                self.moves -= 1
                await self._close(ws, 1012)
                return
            if self.mode == "big":
                await ws.send(b"\x00" * self.big_bytes)
                continue
            if self.mode == "slow":
                await asyncio.sleep(self.delay_s)
            await ws.send(packb({"echo": obs, "count": len(self.requests)}))
            if self.mode == "once":
                await self._close(ws, 1000)
                return

    async def _close(self, ws: ServerConnection, code: int) -> None:
        """Close from the server side; the client has seen the close frame on return."""
        await ws.close(code)
        self.closed.set()


def free_port() -> int:
    """A port nothing listens on right now (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(**kwargs: Any) -> tuple[FakeServer, Callable[[], None]]:
    """Start a FakeServer on its own event loop thread; return it and its stop function."""
    server = FakeServer(**kwargs)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = loop.create_future()

    async def main() -> None:
        ws_server = serve(
            server.handle,
            "127.0.0.1",
            server.port,
            compression=None,
            process_request=server.check_key,
        )
        async with ws_server as running:
            server.port = running.sockets[0].getsockname()[1]
            ready.set()
            await stop

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(5), "test server did not start"

    def shutdown() -> None:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(5)
        loop.close()

    return server, shutdown
