"""A TCP proxy on loopback that behaves like a slower network: delay, jitter, bandwidth.

Each byte a side writes reaches the other side one drawn delay later (median
plus uniform jitter, drawn per read), after the bytes before it (TCP keeps
order, so jitter never reorders), and no faster than ``rate_bytes_per_s``
allows. It sits between a robot and ``armory serve`` unchanged on both ends:

    async with DelayProxy("127.0.0.1", server_port, uplink=DelaySpec(0.02, 0.01)) as proxy:
        client = AsyncPolicyClient("127.0.0.1", proxy.port)

The integration tests use it to put real network delay under real sockets, and
``benchmarks/wire_images.py`` to time image payloads over a bounded link.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import numpy as np

from armory.fleet_spec import DelaySpec

_READ_BYTES = 64 * 1024
"""Largest piece read (and delayed) at once."""


class DelayProxy:
    """Forwards every connection on ``127.0.0.1:port`` to the target with link delays."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        uplink: DelaySpec | None = None,
        downlink: DelaySpec | None = None,
        rate_bytes_per_s: float | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``uplink`` delays client-to-target bytes, ``downlink`` the replies (None: no
        delay); ``rate_bytes_per_s`` bounds each direction of each connection (None:
        unbounded)."""
        if rate_bytes_per_s is not None and not rate_bytes_per_s > 0:
            raise ValueError(f"rate_bytes_per_s must be > 0, got {rate_bytes_per_s}")
        self.target_host = target_host
        self.target_port = target_port
        self.uplink = uplink
        self.downlink = downlink
        self.rate_bytes_per_s = rate_bytes_per_s
        self._rng = np.random.default_rng(seed)
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The proxy's port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        """Stop accepting and cut every connection."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

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

    # ---- one connection ------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]
            return
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, self.uplink),
                self._pipe(up_reader, writer, self.downlink),
            )
        except asyncio.CancelledError:
            # stop() cuts the connection; asyncio's stream server would log a handler
            # that ends cancelled.
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: DelaySpec | None
    ) -> None:
        """Copy ``reader`` to ``writer``, each piece delivered at its due time, in order."""
        pieces: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._deliver(pieces, writer))
        due_s = 0.0
        try:
            while data := await reader.read(_READ_BYTES):
                now_s = self._clock()
                due_s = max(due_s, now_s + self._draw_s(delay))
                if self.rate_bytes_per_s is not None:
                    due_s += len(data) / self.rate_bytes_per_s
                pieces.put_nowait((due_s, data))
            pieces.put_nowait((due_s, b""))
            await sender
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender

    async def _deliver(
        self, pieces: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        while True:
            due_s, data = await pieces.get()
            wait_s = due_s - self._clock()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    def _draw_s(self, delay: DelaySpec | None) -> float:
        if delay is None:
            return 0.0
        jitter_s = delay.jitter_s * (2.0 * self._rng.random() - 1.0) if delay.jitter_s else 0.0
        return max(delay.median_s + jitter_s, 0.0)
