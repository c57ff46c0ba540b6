"""One door's robots without sockets: opening, the limit, eviction and the idle sweep."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from armory.engine.session import Session
from armory.transports.sessions import SessionRegistry, TooManyRobots


class FakeEngine:
    """Opens and closes sessions as the server engine does, and remembers the calls."""

    def __init__(self) -> None:
        self.opened: list[Session] = []

    def open_session(
        self, *, peer: str, evict: Callable[[str], None] | None = None, door: str = "openpi"
    ) -> Session:
        session = Session(peer=peer, evict=evict, door=door)
        self.opened.append(session)
        return session

    def close_session(self, session: Session) -> None:
        session.closed = True


def make_registry(
    *, max_robots: int | None = None, idle_timeout_s: float | None = None
) -> tuple[SessionRegistry[str, Session], FakeEngine, list[tuple[str, str]]]:
    """A registry whose robots are their sessions; closes land in the returned list as
    (peer, reason), evictions after them as ("evict " + key, reason)."""
    engine = FakeEngine()
    closed: list[tuple[str, str]] = []
    registry: SessionRegistry[str, Session] = SessionRegistry(
        engine,
        door="test",
        make=lambda _key, session: session,
        on_close=lambda session, reason: closed.append((session.peer, reason)),
        on_evict=lambda key, reason: closed.append((f"evict {key}", reason)),
        max_robots=max_robots,
        idle_timeout_s=idle_timeout_s,
    )
    return registry, engine, closed


def test_a_key_keeps_its_robot_and_session() -> None:
    """The same key gets the same robot; another key gets its own session."""
    registry, engine, _ = make_registry()
    a = registry.robot("a", peer="a", now_s=0.0)
    assert registry.robot("a", peer="a", now_s=1.0) is a
    b = registry.robot("b", peer="b", now_s=1.0)
    assert b is not a
    assert engine.opened == [a, b]
    assert len(registry) == 2 and "a" in registry and registry.get("c") is None


def test_a_new_robot_past_the_limit_is_refused_and_known_ones_still_served() -> None:
    """At max_robots a new key gets TooManyRobots naming the limit's option; known keys
    are served, and a closed robot frees its place."""
    registry, _, _ = make_registry(max_robots=2)
    registry.robot("a", peer="a", now_s=0.0)
    registry.robot("b", peer="b", now_s=0.0)
    with pytest.raises(TooManyRobots, match=r"2 robots are connected.*--server.max-connections"):
        registry.robot("c", peer="c", now_s=0.0)
    registry.check_room("a")
    registry.robot("a", peer="a", now_s=0.0)
    registry.close("b", "it left")
    registry.robot("c", peer="c", now_s=0.0)


def test_the_sweep_closes_idle_robots_only() -> None:
    """A robot unheard of for longer than idle_timeout_s is closed, with the idle time as
    its reason; one seen recently stays."""
    registry, _, closed = make_registry(idle_timeout_s=10.0)
    old = registry.robot("old", peer="old", now_s=0.0)
    registry.robot("new", peer="new", now_s=5.0)
    assert registry.sweep(10.0) == 0
    assert registry.sweep(12.5) == 1
    assert closed == [("old", "no call for 12.5 s")]
    assert old.closed and registry.get("old") is None and registry.get("new") is not None


def test_the_sweep_skips_a_robot_in_a_call_and_the_call_end_counts_as_seen() -> None:
    """A robot whose call outlasts the timeout is not swept; its idle time then starts at
    the end of the call."""
    registry, _, closed = make_registry(idle_timeout_s=10.0)
    registry.robot("a", peer="a", now_s=0.0)
    now_s = [0.0]
    with registry.calling("a", lambda: now_s[0]):
        assert registry.sweep(50.0) == 0
        now_s[0] = 50.0
    assert registry.sweep(55.0) == 0
    assert registry.sweep(60.5) == 1
    assert closed == [("a", "no call for 10.5 s")]


def test_no_timeout_means_no_sweep() -> None:
    """idle_timeout_s None: a robot stays however long it is quiet."""
    registry, _, _ = make_registry()
    registry.robot("a", peer="a", now_s=0.0)
    assert registry.sweep(1e9) == 0 and registry.get("a") is not None


def test_an_evicted_robot_is_closed_and_its_key_opens_a_new_session() -> None:
    """The engine's evict callback (a newer connection took the robot id) closes the robot
    with the engine's reason, then tells the door; the key's next call opens a new
    session."""
    registry, engine, closed = make_registry()
    first = registry.robot("a", peer="a", now_s=0.0)
    assert first.evict is not None
    reason = "replaced by a newer connection of robot 'r'"
    first.evict(reason)
    assert closed == [("a", reason), ("evict a", reason)]
    assert first.closed and "a" not in registry
    second = registry.robot("a", peer="a", now_s=1.0)
    assert second is not first and engine.opened == [first, second]
    first.evict("late")  # an old session's evict leaves the new robot alone
    assert registry.get("a") is second and len(closed) == 2


def test_a_session_the_engine_closed_is_replaced_on_the_next_call() -> None:
    """A session closed behind the registry's back counts as gone: its robot is closed
    and the key gets a new one."""
    registry, _, closed = make_registry()
    first = registry.robot("a", peer="a", now_s=0.0)
    first.closed = True
    assert registry.get("a") is None
    assert registry.robot("a", peer="a", now_s=1.0) is not first
    assert closed == [("a", "its session was closed")]


def test_close_all_closes_every_robot_once() -> None:
    """The door stops: every robot is closed with the reason, and a second close does
    nothing."""
    registry, _, closed = make_registry()
    for key in "abc":
        registry.robot(key, peer=key, now_s=0.0)
    registry.close_all("the server stops")
    registry.close_all("again")
    registry.close("a", "again")
    assert closed == [(key, "the server stops") for key in "abc"]
    assert len(registry) == 0
