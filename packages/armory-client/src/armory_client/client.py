"""Policy clients speaking the openpi WebSocket protocol: one blocking, one asyncio.

Protocol (see openpi's websocket_client_policy.py): connect to ``ws://host:port``; the
server first sends one binary frame, a msgpack map of metadata; then each request is
one binary frame (the packed observation) answered by one binary frame (the packed
action map). A text frame from the server is an error message, after which it closes.

Both clients share everything but the I/O (`_ClientBase`): they retry the connection
with exponential backoff and jitter until the connect timeout, bound every reply by
a request timeout and a frame size, and reconnect once, transparently, when the
connection was found closed before a request was sent. `infer` returns or raises
within its request timeout, reconnecting included: with the server down it raises
`ConnectTimeout` after the request timeout, not the (longer) connect timeout. A
request whose reply times out or fails closes the connection, so a late reply can
never answer the next one.

HTTP redirects of the handshake are followed by websockets itself (the blocking
client's from websockets 17.1), which sends the API key on only to the same host and
port: an Armory cluster's front door redirects each robot to its replica with a
short-lived ticket in place of the key. Reconnects start again at the URI given. A
cluster's replica that lets a robot go to another replica closes with 1012 (service
restart) after answering what it served; a request it left unanswered then was not
served, and goes again, once, through a new connection (to the front door, which sends
the robot to its new replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import websockets.asyncio.client
import websockets.sync.client
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.typing import Data
from websockets.uri import parse_uri

from armory_client.errors import (
    ArmoryClientError,
    CertificateRejected,
    ConnectionLost,
    ConnectTimeout,
    HandshakeRejected,
    ProtocolError,
    RequestTimeout,
    ServerError,
)
from armory_client.wire import ordering
from armory_client.wire.codec import packb, unpackb
from armory_client.wire.placement import (
    is_robot_name,
    names_a_robot,
    placement_query,
    with_query,
)

__all__ = ["DEFAULT_MAX_SIZE", "DEFAULT_PORT", "AsyncPolicyClient", "PolicyClient"]

DEFAULT_PORT = 8000
"""openpi's default server port."""

DEFAULT_MAX_SIZE = 64 * 2**20
"""Largest incoming frame accepted by default (bytes): several full-resolution images."""

# WebSocket close code for "message too big" (RFC 6455).
_CLOSE_TOO_BIG = 1009
# WebSocket close code for "service restart" (RFC 6455): an Armory cluster's replica lets
# a robot go to another replica; the requests it had not answered were not served.
_CLOSE_MOVED = 1012


class _Moved(ConnectionLost):
    """The server let the robot go (it moves to another replica) before this request's
    reply: the request was not served, and goes again through a new connection."""


# Bytes of a refused handshake's answer quoted in HandshakeRejected.
_MAX_REASON_BYTES = 300


class _ClientBase:
    """Configuration, connection state and the I/O-free steps both clients share."""

    # Makes the lock that serialises connecting and sending (and, for the blocking
    # client, whole requests).
    _lock_factory: Callable[[], Any]

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        # Security
        api_key: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        # Timeouts
        connect_timeout_s: float = 30.0,
        request_timeout_s: float = 5.0,
        close_timeout_s: float = 1.0,
        # Retries
        initial_backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
        # Limits
        max_size: int = DEFAULT_MAX_SIZE,
    ) -> None:
        """Store the settings; no socket is opened until `connect` or the first `infer`.

        `host` may be a bare host (then ``ws://host:port``, port defaulting to 8000) or
        a full ``ws://``/``wss://`` URI (then `port`, if given, is appended).
        `ssl_context` (a ``wss://`` URI only) decides which server certificates are
        trusted, e.g. ``ssl.create_default_context(cafile="server.pem")`` for a
        self-signed one; without it a ``wss://`` server must present a certificate the
        system trusts (``SSL_CERT_FILE`` is honoured).
        """
        for name, value in [
            ("connect_timeout_s", connect_timeout_s),
            ("request_timeout_s", request_timeout_s),
            ("close_timeout_s", close_timeout_s),
            ("initial_backoff_s", initial_backoff_s),
            ("max_backoff_s", max_backoff_s),
        ]:
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not isinstance(max_size, int) or max_size <= 0:
            raise ValueError(f"max_size must be a positive int (bytes), got {max_size!r}")
        self._uri = _build_uri(host, port)
        if ssl_context is not None and not self._uri.startswith("wss://"):
            raise ValueError(f"ssl_context needs a wss:// server URI, got {self._uri!r}")
        self._ssl_context = ssl_context
        self._headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._close_timeout_s = close_timeout_s
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._max_size = max_size
        self._rng = random.Random()
        self._metadata: dict[str, Any] | None = None
        self._last_round_trip_s: float | None = None
        self.num_connections = 0
        """Connections opened so far (each one after the first is a reconnect): a
        request during which it grew waited for a connection, not only for its reply."""
        self._conn: Any = None
        self._lock = self._lock_factory()

    @property
    def uri(self) -> str:
        """The server's WebSocket URI."""
        return self._uri

    def name_robot(
        self,
        robot_id: str,
        *,
        control_hz: float | None = None,
        max_execution_horizon: int | None = None,
        round_trip_s: float | None = None,
        weight: float | None = None,
    ) -> None:
        """Say in the URI of every connection from now on who the robot is and what it
        asks of a GPU (`wire.placement`; each value given): the front door of ``armory
        cluster`` places it by that and keeps it on its replica across reconnects; a server
        ignores it. A URI that names a robot already is kept as it is; an id the front door
        would refuse as a name is left out (the robot's demand is still said)."""
        if names_a_robot(self._uri):
            return
        name = robot_id if is_robot_name(robot_id) else None
        query = placement_query(
            name,
            control_hz=control_hz,
            max_execution_horizon=max_execution_horizon,
            round_trip_s=round_trip_s,
            weight=weight,
        )
        self._uri = with_query(self._uri, query)

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata map the server sent on the latest connection."""
        if self._metadata is None:
            raise ArmoryClientError("no metadata yet: connect first")
        return self._metadata

    @property
    def last_round_trip_s(self) -> float | None:
        """Seconds from sending the latest answered request to holding its decoded reply."""
        return self._last_round_trip_s

    def _connect_kwargs(self, open_timeout_s: float) -> dict[str, Any]:
        """Keyword arguments for websockets' `connect`, sync and asyncio alike."""
        kwargs: dict[str, Any] = {
            "additional_headers": self._headers,
            "compression": None,
            "max_size": self._max_size,
            "open_timeout": open_timeout_s,
            "close_timeout": self._close_timeout_s,
        }
        if self._ssl_context is not None:
            kwargs["ssl"] = self._ssl_context
        return kwargs

    def _backoff_delays(self) -> Iterator[float]:
        """Sleep before each reconnect attempt: doubling up to the maximum, with jitter."""
        base_s = self._initial_backoff_s
        while True:
            yield base_s * self._rng.uniform(0.5, 1.0)
            base_s = min(2 * base_s, self._max_backoff_s)

    def _check_connect_error(self, exc: Exception) -> None:
        """Raise at once for a connect failure that retrying cannot fix."""
        if isinstance(exc, InvalidStatus) and 400 <= exc.response.status_code < 500:
            body = exc.response.body or b""
            reason = body[:_MAX_REASON_BYTES].decode("utf-8", "replace").split("\n", 1)[0]
            raise HandshakeRejected(exc.response.status_code, self._uri, reason) from exc
        if isinstance(exc, ssl.SSLCertVerificationError):
            raise CertificateRejected(self._uri, exc.verify_message or str(exc)) from exc

    def _connect_timeout(
        self, last_error: BaseException | None, budget_s: float, budget: str
    ) -> ConnectTimeout:
        """The error for a spent connect budget (``budget`` names it), naming the last
        failure."""
        cause = f"{type(last_error).__name__}: {last_error}" if last_error else "no attempt"
        return ConnectTimeout(
            f"no connection to {self._uri} within {budget_s} s ({budget}; {cause})"
        )

    def _open_budget(self, deadline_s: float | None) -> tuple[float, str]:
        """(seconds, name) a connect may take: the connect timeout, or what is left of a
        request's when one is waiting (``deadline_s``, monotonic)."""
        if deadline_s is None:
            return self._connect_timeout_s, "the connect timeout"
        left_s = max(deadline_s - time.monotonic(), 0.0)
        if left_s < self._connect_timeout_s:
            return left_s, "what was left of the request timeout"
        return self._connect_timeout_s, "the connect timeout"

    def _request_timeout(self, timeout_s: float) -> RequestTimeout:
        """The error for a reply that did not come in time."""
        return RequestTimeout(f"no reply from {self._uri} within {timeout_s} s; connection closed")

    def _connection_lost(self, exc: ConnectionClosed) -> ConnectionLost:
        """The error for a connection closed while a request was in flight."""
        if exc.rcvd is not None and exc.rcvd_then_sent and exc.rcvd.code == _CLOSE_MOVED:
            return _Moved(f"server at {self._uri} let the robot go: {exc.rcvd.reason}")
        if exc.rcvd is not None and exc.rcvd_then_sent and exc.rcvd.code == _CLOSE_TOO_BIG:
            # The server closed first: it refused our request as too large.
            return ConnectionLost(
                f"server at {self._uri} refused the request as too large: {exc.rcvd.reason}"
            )
        if exc.sent is not None and exc.sent.code == _CLOSE_TOO_BIG:
            return ConnectionLost(
                f"reply from {self._uri} exceeded max_size={self._max_size} bytes; "
                "raise max_size if the server legitimately sends more"
            )
        return ConnectionLost(f"connection to {self._uri} closed before the reply: {exc}")

    def _accept_metadata(self, frame: Data) -> None:
        """Decode the server's first frame and keep it as the metadata."""
        self._metadata = _decode_map_frame(frame, "metadata")

    def _accept_reply(self, frame: Data, start_s: float) -> dict[str, Any]:
        """Decode a reply frame and record the round trip that ended with it."""
        reply = _decode_map_frame(frame, "reply")
        self._last_round_trip_s = time.monotonic() - start_s
        return reply


class PolicyClient(_ClientBase):
    """Blocking openpi client over websockets' threading implementation."""

    _lock_factory = threading.Lock
    _conn: websockets.sync.client.ClientConnection | None
    # Exits the connection's context (closes it); None when not connected.
    _exit_stack: contextlib.ExitStack | None = None

    def connect(self) -> Self:
        """Open the connection (if not open) and wait for the metadata frame."""
        with self._lock:
            if self._conn is None:
                self._open()
        return self

    def infer(self, obs: Mapping[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        """Send one observation map and return the server's action map, within
        `timeout_s` (the request timeout by default) of its turn on the connection (calls
        from other threads go one at a time), a reconnect included."""
        request = packb(obs)
        timeout_s = self._request_timeout_s if timeout_s is None else timeout_s
        with self._lock:
            deadline_s = time.monotonic() + timeout_s
            conn, start_s = self._send(request, deadline_s)
            try:
                frame = self._recv(conn, timeout_s, deadline_s)
            except _Moved:  # not served: once more, on a new connection
                conn, start_s = self._send(request, deadline_s)
                frame = self._recv(conn, timeout_s, deadline_s)
            try:
                return self._accept_reply(frame, start_s)
            except ServerError:
                self._discard()
                raise

    def close(self) -> None:
        """Close the connection, if any; `infer` may open a new one afterwards."""
        with self._lock:
            self._discard()

    def __enter__(self) -> Self:
        return self.connect()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(
        self, request: bytes, deadline_s: float
    ) -> tuple[websockets.sync.client.ClientConnection, float]:
        """Send `request`, reconnecting (by `deadline_s`) if there is no connection or
        it closed before the request left.

        Returns the connection used and the monotonic time the sending started.
        """
        conn = self._conn if self._conn is not None else self._open(deadline_s)
        start_s = time.monotonic()
        try:
            conn.send(request)
        except ConnectionClosed:
            self._discard()
            conn = self._open(deadline_s)
            start_s = time.monotonic()
            try:
                conn.send(request)
            except ConnectionClosed as exc:
                self._discard()
                raise self._connection_lost(exc) from exc
        return conn, start_s

    def _recv(
        self, conn: websockets.sync.client.ClientConnection, timeout_s: float, deadline_s: float
    ) -> Data:
        """Wait for the reply frame until `deadline_s` (the end of `timeout_s`); on any
        failure drop the connection (a late reply must never answer the next request)."""
        try:
            return conn.recv(timeout=max(deadline_s - time.monotonic(), 0.0))
        except TimeoutError:
            self._discard()
            raise self._request_timeout(timeout_s) from None
        except ConnectionClosed as exc:
            self._discard()
            raise self._connection_lost(exc) from exc
        except BaseException:
            self._discard()
            raise

    def _open(
        self, request_deadline_s: float | None = None
    ) -> websockets.sync.client.ClientConnection:
        """Connect, read the metadata frame and keep the connection; retry until the
        connect timeout, or until `request_deadline_s` when a request waits."""
        budget_s, budget = self._open_budget(request_deadline_s)
        deadline_s = time.monotonic() + budget_s
        delays = self._backoff_delays()
        last_error: BaseException | None = None
        while (remaining_s := deadline_s - time.monotonic()) > 0:
            # websockets >= 17.1 wants its connection entered as a context manager.
            stack = contextlib.ExitStack()
            try:
                conn = stack.enter_context(
                    websockets.sync.client.connect(self._uri, **self._connect_kwargs(remaining_s))
                )
            except (OSError, InvalidHandshake) as exc:
                self._check_connect_error(exc)
                last_error = exc
            else:
                try:
                    frame = conn.recv(timeout=max(deadline_s - time.monotonic(), 0.0))
                except (TimeoutError, ConnectionClosed) as exc:
                    stack.close()
                    last_error = exc
                else:
                    try:
                        self._accept_metadata(frame)
                    except ArmoryClientError:
                        stack.close()
                        raise
                    self._conn, self._exit_stack = conn, stack
                    self.num_connections += 1
                    return conn
            time.sleep(min(next(delays), max(deadline_s - time.monotonic(), 0.0)))
        raise self._connect_timeout(last_error, budget_s, budget)

    def _discard(self) -> None:
        """Close and forget the current connection."""
        stack, self._exit_stack, self._conn = self._exit_stack, None, None
        if stack is not None:
            stack.close()


class AsyncPolicyClient(_ClientBase):
    """asyncio openpi client over websockets' asyncio implementation."""

    _lock_factory = asyncio.Lock
    _conn: websockets.asyncio.client.ClientConnection | None
    # Done once the latest request sent has read its reply (None before any request).
    _last_turn: asyncio.Future[None] | None = None

    async def connect(self) -> Self:
        """Open the connection (if not open) and wait for the metadata frame."""
        async with self._lock:
            if self._conn is None:
                await self._open()
        return self

    async def infer(
        self, obs: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Send one observation map and return the server's action map.

        Calls may overlap (pipelining, for a server that allows it: ``"pipelining": true``
        under ``"armory"`` in its metadata): each sends at once, and replies are read in
        the order the requests were sent. The timeout (the request timeout by default)
        counts from the call, a reconnect and the wait for earlier replies included.
        """
        request = packb(obs)
        timeout_s = self._request_timeout_s if timeout_s is None else timeout_s
        deadline_s = time.monotonic() + timeout_s
        try:
            conn, start_s, frame = await self._exchange(request, timeout_s, deadline_s)
        except _Moved:  # not served: once more, on a new connection
            conn, start_s, frame = await self._exchange(request, timeout_s, deadline_s)
        try:
            return self._accept_reply(frame, start_s)
        except ServerError:
            await self._discard(conn)
            raise

    async def close(self) -> None:
        """Close the connection, if any; `infer` may open a new one afterwards."""
        async with self._lock:
            await self._discard()

    async def _exchange(
        self, request: bytes, timeout_s: float, deadline_s: float
    ) -> tuple[websockets.asyncio.client.ClientConnection, float, Data]:
        """Send `request` and read its reply frame in its turn: the connection, when the
        sending started and the frame."""
        async with self._lock:
            conn, start_s = await self._send(request, deadline_s)
            earlier, turn = self._last_turn, asyncio.get_running_loop().create_future()
            self._last_turn = turn
        try:
            return conn, start_s, await self._recv(conn, timeout_s, deadline_s, after=earlier)
        finally:
            turn.set_result(None)

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _send(
        self, request: bytes, deadline_s: float
    ) -> tuple[websockets.asyncio.client.ClientConnection, float]:
        """Send `request`, reconnecting (by `deadline_s`) if there is no connection or
        it closed before the request left.

        Returns the connection used and the monotonic time the sending started.
        """
        conn = self._conn if self._conn is not None else await self._open(deadline_s)
        start_s = time.monotonic()
        try:
            await conn.send(request)
        except ConnectionClosed:
            await self._discard()
            conn = await self._open(deadline_s)
            start_s = time.monotonic()
            try:
                await conn.send(request)
            except ConnectionClosed as exc:
                await self._discard()
                raise self._connection_lost(exc) from exc
        return conn, start_s

    async def _recv(
        self,
        conn: websockets.asyncio.client.ClientConnection,
        timeout_s: float,
        deadline_s: float,
        *,
        after: asyncio.Future[None] | None,
    ) -> Data:
        """Wait for the reply frame until `deadline_s` (the end of `timeout_s`), once the
        request sent before (``after``) has read its own; on any failure drop the
        connection (a late reply must never answer the next request)."""
        try:
            async with asyncio.timeout(max(deadline_s - time.monotonic(), 0.0)):
                await ordering.after(after)
                return await conn.recv()
        except TimeoutError:
            await self._discard(conn)
            raise self._request_timeout(timeout_s) from None
        except ConnectionClosed as exc:
            await self._discard(conn)
            raise self._connection_lost(exc) from exc
        except BaseException:
            # Cancelled: abort at once rather than await a close handshake.
            if self._conn is conn:
                self._conn = None
            conn.transport.abort()
            raise

    async def _open(
        self, request_deadline_s: float | None = None
    ) -> websockets.asyncio.client.ClientConnection:
        """Connect, read the metadata frame and keep the connection; retry until the
        connect timeout, or until `request_deadline_s` when a request waits."""
        budget_s, budget = self._open_budget(request_deadline_s)
        deadline_s = time.monotonic() + budget_s
        delays = self._backoff_delays()
        last_error: BaseException | None = None
        while (remaining_s := deadline_s - time.monotonic()) > 0:
            try:
                conn = await websockets.asyncio.client.connect(
                    self._uri, **self._connect_kwargs(remaining_s)
                )
            except (OSError, InvalidHandshake) as exc:
                self._check_connect_error(exc)
                last_error = exc
            else:
                try:
                    async with asyncio.timeout(max(deadline_s - time.monotonic(), 0.0)):
                        frame = await conn.recv()
                except (TimeoutError, ConnectionClosed) as exc:
                    await conn.close()
                    last_error = exc
                else:
                    try:
                        self._accept_metadata(frame)
                    except ArmoryClientError:
                        await conn.close()
                        raise
                    self._conn = conn
                    self.num_connections += 1
                    return conn
            await asyncio.sleep(min(next(delays), max(deadline_s - time.monotonic(), 0.0)))
        raise self._connect_timeout(last_error, budget_s, budget)

    async def _discard(
        self, conn: websockets.asyncio.client.ClientConnection | None = None
    ) -> None:
        """Close and forget the current connection; given ``conn``, close that one, and
        forget it only if it is still current (a later request may have reconnected)."""
        if conn is None:
            conn = self._conn
        if self._conn is conn:
            self._conn = None
        if conn is not None:
            await conn.close()


def _build_uri(host: str, port: int | None) -> str:
    """``ws://host:port`` from a bare host, or the given ws/wss URI; checked by websockets."""
    if host.startswith(("ws://", "wss://")):
        uri = host if port is None else f"{host}:{port}"
    else:
        uri = f"ws://{host}:{DEFAULT_PORT if port is None else port}"
    try:
        parse_uri(uri)
    except InvalidURI as exc:
        raise ValueError(f"invalid server address {uri!r}: {exc}") from exc
    return uri


def _decode_map_frame(frame: Data, what: str) -> dict[str, Any]:
    """Decode a binary frame that must hold a msgpack map; a text frame is a ServerError."""
    if isinstance(frame, str):
        raise ServerError(frame)
    decoded = unpackb(frame)
    if not isinstance(decoded, dict):
        raise ProtocolError(f"server {what} must be a map, got {type(decoded).__name__}")
    return decoded
