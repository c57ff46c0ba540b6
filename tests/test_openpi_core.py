"""One openpi connection without the socket: pipelining limit, reply order, error then close."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from armory_client import unpackb
from server_harness import make_reply

from armory.core.errors import ObservationError, RequestError, SessionClosed
from armory.engine.server_engine import Reply
from armory.engine.session import Session
from armory.transports.openpi_core import (
    INTERNAL,
    OpenpiConnection,
    Pending,
    SendError,
    SendReply,
)


@dataclass(frozen=True)
class FakeConfig:
    max_pipelined_requests: int = 3


class FakeEngine:
    """Accepts every observation (or raises ``refusal``) and counts errors."""

    def __init__(self, *, max_pipelined_requests: int = 3) -> None:
        self.config = FakeConfig(max_pipelined_requests)
        self.num_errors = 0
        self.refusal: Exception | None = None

    def accept(self, session: Session, observation: Mapping[str, Any], *, received_s: float) -> Any:
        if session.closed:
            raise SessionClosed("the session is closed")
        if self.refusal is not None:
            raise self.refusal
        return observation

    def close_session(self, session: Session) -> None:
        session.closed = True

    def count_error(self, door: str, kind: str, *, session: Session | None = None) -> None:
        assert door == "openpi" and kind and session is not None
        self.num_errors += 1


class FakeClock:
    """Advances by ``step_s`` at each reading."""

    def __init__(self, step_s: float = 0.25) -> None:
        self.now_s = 0.0
        self.step_s = step_s

    def __call__(self) -> float:
        self.now_s += self.step_s
        return self.now_s


def make_connection(**engine: Any) -> tuple[OpenpiConnection, FakeEngine]:
    fake = FakeEngine(**engine)
    connection = OpenpiConnection(fake, Session(peer="test"), clock=FakeClock())  # type: ignore[arg-type]
    return connection, fake


def value_reply(value: float) -> Reply:
    """A plain client's reply whose actions are all ``value``."""
    return make_reply(np.full((2, 3), value, np.float32))


def accept_n(connection: OpenpiConnection, n: int) -> list[Pending]:
    pending = []
    for i in range(n):
        connection.admit()
        pending.append(connection.accept({"i": i}, received_s=float(i)))
    return pending


def sent_values(outgoing: list[Any]) -> list[float]:
    """The action value of each reply frame, in order."""
    assert all(isinstance(item, SendReply) for item in outgoing)
    return [float(unpackb(item.frame)["actions"][0, 0]) for item in outgoing]


def test_replies_leave_in_request_order_whichever_is_computed_first() -> None:
    """A later request's answer waits for the earlier ones, then all go out in order."""
    connection, _ = make_connection()
    a, b, c = accept_n(connection, 3)
    assert connection.settle(c.seq, value_reply(3.0)) == []
    assert sent_values(connection.settle(a.seq, value_reply(1.0))) == [1.0]
    assert sent_values(connection.settle(b.seq, value_reply(2.0))) == [2.0, 3.0]
    assert connection.num_waiting == 0


def test_a_replys_encoding_time_comes_with_it() -> None:
    """encode_s is the clock's advance across the encoding (the fake clock's step)."""
    connection, _ = make_connection()
    (a,) = accept_n(connection, 1)
    (item,) = connection.settle(a.seq, value_reply(1.0))
    assert isinstance(item, SendReply) and item.encode_s == pytest.approx(0.25)
    assert item.reply.batch_size == 1


def test_the_pipelining_limit_counts_requests_awaiting_replies() -> None:
    """Past max_pipelined_requests unanswered requests, admit refuses naming the option;
    an answer frees a place."""
    connection, _ = make_connection(max_pipelined_requests=2)
    a, _b = accept_n(connection, 2)
    with pytest.raises(
        RequestError, match=r"more than 2 requests.*--server\.max-pipelined-requests"
    ):
        connection.admit()
    connection.settle(a.seq, value_reply(1.0))
    connection.admit()


def test_an_error_goes_out_after_the_replies_before_it_and_nothing_after() -> None:
    """A request's error waits for earlier replies; then the connection closes: later
    replies are not sent. The error is counted once."""
    connection, engine = make_connection()
    a, b, c = accept_n(connection, 3)
    assert connection.settle(b.seq, ObservationError("missing input 'state'")) == []
    out = connection.settle(a.seq, value_reply(1.0))
    assert sent_values(out[:1]) == [1.0]
    assert out[1] == SendError("missing input 'state'")
    assert connection.closing
    assert connection.settle(c.seq, value_reply(3.0)) == []
    assert engine.num_errors == 1


def test_a_refused_request_closes_the_session_and_waits_for_earlier_answers() -> None:
    """An error at accept ends the connection: the session closes (waiting requests are
    dropped), and the error goes out once the earlier requests are settled."""
    connection, engine = make_connection()
    (a,) = accept_n(connection, 1)
    assert connection.refuse(RequestError("cannot decode the observation")) == []
    assert connection.session.closed
    out = connection.settle(a.seq, SessionClosed("the robot's connection closed"))
    assert out == [SendError("cannot decode the observation")]
    assert engine.num_errors == 1


def test_a_reply_computed_after_the_session_closed_is_dropped() -> None:
    """The robot left: its chunk, when ready, is thrown away."""
    connection, _ = make_connection()
    (a,) = accept_n(connection, 1)
    connection.session.closed = True
    assert connection.settle(a.seq, value_reply(1.0)) == []
    with pytest.raises(SessionClosed):
        connection.accept({}, received_s=0.0)


def test_a_failure_of_the_server_sends_a_generic_error_uncounted() -> None:
    """An unexpected exception sends the generic message (details stay in the log) and
    closes; it is not one of the robot's errors."""
    connection, engine = make_connection()
    (a,) = accept_n(connection, 1)
    assert connection.settle(a.seq, KeyError("secret detail")) == [SendError(INTERNAL)]
    assert connection.closing and engine.num_errors == 0
