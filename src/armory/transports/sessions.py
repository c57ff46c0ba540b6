"""One door's robots by peer key: opening, the connection limit, eviction and the idle sweep.

Every door keeps its robots here, keyed by what tells them apart on its wire (a
WebSocket connection, a ZeroMQ identity, a gRPC peer). The registry opens each
robot's engine session, refuses a new robot once ``max_robots`` are known, closes a
robot the engine evicts (a newer connection of the same robot id) and, where the
wire cannot see a peer leave, forgets robots unheard of for ``idle_timeout_s``. No
I/O and no clock of its own: the door passes the time, so tests drive it with a
fake clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from armory.core.errors import RequestError
from armory.engine.session import Session

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class SessionHost(Protocol):
    """What the registry needs of the engine (the server engine opens and closes sessions)."""

    def open_session(
        self, *, peer: str, evict: Callable[[str], None] | None = None, door: str = "openpi"
    ) -> Session: ...

    def close_session(self, session: Session) -> None: ...


class TooManyRobots(RequestError):
    """A new robot while the door already serves ``--server.max-connections`` robots."""


@dataclass
class _Entry(Generic[R]):
    robot: R
    session: Session
    last_seen_s: float
    num_active_calls: int = 0
    """Calls of the robot in progress: the idle sweep skips a robot while it has one."""


class SessionRegistry(Generic[K, R]):
    """The robots of one door, each with its engine session."""

    def __init__(
        self,
        engine: SessionHost,
        *,
        door: str,
        make: Callable[[K, Session], R],
        on_close: Callable[[R, str], None] | None = None,
        on_evict: Callable[[K, str], None] | None = None,
        # Limits
        max_robots: int | None = None,
        # Timeouts
        idle_timeout_s: float | None = None,
    ) -> None:
        """``door``: the door's name, given to its sessions; ``make(key, session)``: the
        door's state of a new robot; ``on_close(robot, reason)``: called once when a robot
        is closed, whatever closed it (its session is already closed then);
        ``on_evict(key, reason)``: called after that when the engine evicted the robot (the
        door closes its connection). ``max_robots`` None: no limit; ``idle_timeout_s`` None:
        robots are never swept."""
        self._engine = engine
        self.door = door
        """The front door's name (openpi, groot, lerobot), given to each session."""
        self._make = make
        self._on_close = on_close
        self._on_evict = on_evict
        self.max_robots = max_robots
        self.idle_timeout_s = idle_timeout_s
        self._entries: dict[K, _Entry[R]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> R | None:
        """The open robot behind ``key``, or None."""
        entry = self._live(key)
        return None if entry is None else entry.robot

    def robots(self) -> list[R]:
        return [entry.robot for entry in self._entries.values()]

    def check_room(self, key: K) -> None:
        """Raises TooManyRobots when ``key`` is a new robot and the door is full."""
        if self._live(key) is not None or self.max_robots is None:
            return
        if len(self._entries) >= self.max_robots:
            raise TooManyRobots(
                f"{len(self._entries)} robots are connected, the most this door serves "
                "(--server.max-connections); try again later"
            )

    def robot(self, key: K, *, peer: str, now_s: float) -> R:
        """The robot behind ``key``, seen at ``now_s``; a new one (with a new session) for a
        key not known or whose session was closed. Raises TooManyRobots."""
        entry = self._live(key)
        if entry is None:
            self.check_room(key)
            session = self._engine.open_session(
                peer=peer,
                evict=lambda reason: self._evicted(key, session, reason),
                door=self.door,
            )
            entry = _Entry(robot=self._make(key, session), session=session, last_seen_s=now_s)
            self._entries[key] = entry
        entry.last_seen_s = now_s
        return entry.robot

    @contextlib.contextmanager
    def calling(self, key: K, clock: Callable[[], float]) -> Iterator[None]:
        """Marks the robot busy for the duration of a call (the idle sweep skips it); it is
        seen when the call ends."""
        entry = self._entries.get(key)
        if entry is None:
            yield
            return
        entry.num_active_calls += 1
        try:
            yield
        finally:
            entry.num_active_calls -= 1
            entry.last_seen_s = clock()

    def close(self, key: K, reason: str) -> None:
        """Close the robot behind ``key`` (its session too); nothing if none."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._closed(entry, reason)

    def close_all(self, reason: str) -> None:
        """Close every robot (the door stops)."""
        for key in list(self._entries):
            self.close(key, reason)

    def sweep(self, now_s: float) -> int:
        """Close robots with no call in progress and none for ``idle_timeout_s``; how many."""
        if self.idle_timeout_s is None:
            return 0
        num_closed = 0
        for key, entry in list(self._entries.items()):
            idle_s = now_s - entry.last_seen_s
            if entry.num_active_calls == 0 and idle_s > self.idle_timeout_s:
                self.close(key, f"no call for {idle_s:.1f} s")
                num_closed += 1
        return num_closed

    # ---- internals -----------------------------------------------------

    def _live(self, key: K) -> _Entry[R] | None:
        entry = self._entries.get(key)
        if entry is not None and entry.session.closed:
            # The engine closed it (a newer connection took its robot id): forget it.
            self.close(key, "its session was closed")
            return None
        return entry

    def _evicted(self, key: K, session: Session, reason: str) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.session is session:
            self.close(key, reason)
            if self._on_evict is not None:
                self._on_evict(key, reason)

    def _closed(self, entry: _Entry[R], reason: str) -> None:
        self._engine.close_session(entry.session)
        if self._on_close is not None:
            self._on_close(entry.robot, reason)
