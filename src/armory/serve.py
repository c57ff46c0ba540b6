"""``armory serve``: the engine behind its front doors, run until stopped.

:class:`ArmoryServer` is the asyncio object (``async with ArmoryServer(...)``);
:class:`ServerThread` runs one on its own event loop in a background thread, for
tests, benchmarks and the fleet runner; :func:`run_server` is the command line's
blocking entry point, stopped by SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Self

from armory.core.addresses import is_loopback
from armory.engine.batch_loop import Clock
from armory.engine.config import ServerConfig
from armory.engine.heap_trim import glibc_malloc_trim, trim_heap_every
from armory.engine.server_engine import EngineStats, ServerEngine
from armory.policies.base import Policy
from armory.scheduling.base import Scheduler
from armory.scheduling.registry import make_scheduler
from armory.transports.base import Transport
from armory.transports.openpi_ws import OpenpiWebSocketTransport
from armory.transports.tickets import TicketGate

logger = logging.getLogger(__name__)

DoorFactory = Callable[[ServerEngine], Transport]
"""Builds one more front door over the engine (GR00T ZeroMQ, LeRobot gRPC, ...)."""


class ArmoryServer:
    """One policy, one engine, the openpi WebSocket transport (with HTTP health and stats)
    and any other front doors, all feeding the same batches."""

    def __init__(
        self,
        policy: Policy,
        config: ServerConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = 8000,
        # Security
        api_key: str | None = None,
        tickets: TicketGate | None = None,
        movable: bool = False,
        # Plumbing
        scheduler: Scheduler | None = None,
        clock: Clock = time.monotonic,
        doors: Sequence[DoorFactory] = (),
    ) -> None:
        """Nothing is bound until :meth:`start`. ``scheduler`` defaults to the one
        ``config.scheduler`` names; ``port=0`` picks a free port, ``port=None`` opens no
        openpi door. ``doors`` build the front doors served beside (or instead of) it.
        ``tickets`` lets robots through the openpi door with a cluster front door's ticket
        in place of the key; ``movable`` lets the front door move robots off this server
        (``/move``, a replica of ``armory cluster``)."""
        self.config = config or ServerConfig()
        self.engine = ServerEngine(
            policy,
            scheduler or make_scheduler(self.config.scheduler),
            config=self.config,
            clock=clock,
        )
        self.transport = (
            None
            if port is None
            else OpenpiWebSocketTransport(
                self.engine,
                host=host,
                port=port,
                api_key=api_key,
                tickets=tickets,
                movable=movable,
            )
        )
        self.doors: list[Transport] = [make(self.engine) for make in doors]
        if self.transport is None and not self.doors:
            raise ValueError("no front door to open: give an openpi port or another door")
        self.host = host
        self._heap_trim: asyncio.Task[None] | None = None
        self.stop_requested = asyncio.Event()
        """Set by :meth:`request_stop`; :func:`run_server` stops when it is set."""

    @property
    def port(self) -> int:
        """The openpi door's bound port (after :meth:`start`)."""
        if self.transport is None:
            raise RuntimeError("this server has no openpi door")
        return self.transport.port

    @property
    def transports(self) -> list[Transport]:
        """Every front door, the openpi one first."""
        return [*([self.transport] if self.transport else []), *self.doors]

    def request_stop(self) -> None:
        """Ask :func:`run_server` to stop the server (call on the server's loop; a GR00T
        ``kill`` the operator allowed does)."""
        self.stop_requested.set()

    @property
    def uri(self) -> str:
        """Where robots reach the openpi door: ``wss://`` with the server's TLS pair."""
        scheme = "wss" if self.config.tls else "ws"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        """Start the engine, then every door; a door that cannot bind stops the rest."""
        await self.engine.start()
        started: list[Transport] = []
        try:
            for transport in self.transports:
                await transport.start()
                started.append(transport)
        except BaseException:
            for transport in reversed(started):
                with contextlib.suppress(Exception):
                    await transport.stop()
            await self.engine.stop()
            raise
        trim = glibc_malloc_trim()
        if self.config.heap_trim_interval_s is not None and trim is not None:
            self._heap_trim = asyncio.create_task(
                trim_heap_every(self.config.heap_trim_interval_s, trim)
            )

    async def stop(self) -> None:
        """Close every connection, finish a running batch, stop the worker."""
        if self._heap_trim is not None:
            self._heap_trim.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heap_trim
            self._heap_trim = None
        for transport in self.transports:
            await transport.stop()
        await self.engine.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class ServerThread:
    """An :class:`ArmoryServer` on its own event loop in a daemon thread."""

    def __init__(self, server: ArmoryServer, *, start_timeout_s: float = 10.0) -> None:
        self.server = server
        self._start_timeout_s = start_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="armory-server", daemon=True
        )

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def uri(self) -> str:
        return self.server.uri

    @property
    def alive(self) -> bool:
        """Whether the server's thread still runs."""
        return self._thread.is_alive()

    def start(self) -> Self:
        """Start the thread and the server; raises (with the thread stopped) if it cannot bind."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self.server.start(), self._loop)
        try:
            future.result(self._start_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server and its loop; idempotent."""
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop)
        try:
            future.result(timeout_s)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)
            self._loop.close()

    def stats(self) -> EngineStats:
        """The engine's counters, read on the server's loop."""

        async def read() -> EngineStats:
            return self.server.engine.stats()

        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(5.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def run_server(server: ArmoryServer, *, announce: bool = True) -> int:
    """Serve until SIGINT or SIGTERM; returns the exit status."""

    async def main() -> None:
        stop = server.stop_requested
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        async with server:
            if announce:
                engine = server.engine
                meta = engine.metadata
                print(
                    f"armory: serving policy {meta.name} (horizon {meta.action_horizon}, "
                    f"dim {meta.action_dim}); max batch {engine.config.max_batch_size}, "
                    f"scheduler {engine.scheduler_name}",
                    flush=True,
                )
                for line in door_lines(server):
                    print(f"armory: {line}", flush=True)
            for warning in exposure_warnings(server):
                logger.warning("%s", warning)
            await stop.wait()
            logger.info("stopping")

    asyncio.run(main())
    return 0


def exposure_warnings(server: ArmoryServer) -> list[str]:
    """Called at start-up: one warning per door that serves anyone while the server is
    bound beyond loopback (none on 127.0.0.1)."""
    if is_loopback(server.host):
        return []
    return [
        f"the {type(door).__name__} door on {server.host} serves anyone who can reach it: "
        "set --api-key (docs/security.md)"
        for door in server.transports
        if not door.requires_credentials
    ]


def door_lines(server: ArmoryServer) -> list[str]:
    """One line per open front door: its protocol and where robots connect."""
    lines = []
    if server.transport is not None:
        scheme = "https" if server.config.tls else "http"
        base = f"{scheme}://{server.host}:{server.port}"
        pages = f", dashboard at {base}/dashboard" if server.config.metrics else ""
        lines.append(f"openpi WebSocket on {server.uri} (health at {base}/healthz{pages})")
    for door in server.doors:
        describe = getattr(door, "describe", None)
        lines.append(describe() if callable(describe) else f"{type(door).__name__}")
    return lines
