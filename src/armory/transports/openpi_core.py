"""One openpi WebSocket connection without the socket: requests in, frames to send out.

:class:`OpenpiConnection` keeps a connection's state: how many requests await replies
(``--server.max-pipelined-requests``), the order replies go out in (that of the
requests, whichever is computed first), and error-then-close (an error goes out after
the replies before it, then the connection closes and nothing after it is sent).
The socket side (:mod:`armory.transports.openpi_ws`) decodes frames, hands the
observations to :meth:`~OpenpiConnection.accept`, waits for the engine's answers,
settles them with :meth:`~OpenpiConnection.settle` and sends what that returns, in
order. No I/O here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from armory.core.errors import INTERNAL_ERROR as INTERNAL
from armory.core.errors import RequestError, SessionClosed
from armory.engine.server_engine import AcceptedRequest, Reply, ServerEngine
from armory.engine.session import Session
from armory.transports.openpi_protocol import encode_reply

logger = logging.getLogger("armory.transports.openpi_ws")
"""The door's logger: its lines keep the name they are filtered by."""


@dataclass(frozen=True)
class Pending:
    """A request the engine accepted; :meth:`OpenpiConnection.settle` takes its answer."""

    seq: int
    """Its place among the connection's requests (replies go out in this order)."""
    request: AcceptedRequest


@dataclass(frozen=True)
class SendReply:
    """Send ``frame`` (binary), then tell the engine ``reply`` was sent."""

    frame: bytes
    reply: Reply
    encode_s: float
    """Seconds encoding the reply took."""


@dataclass(frozen=True)
class SendError:
    """Send ``message`` as a text frame, then close the connection (1011)."""

    message: str


Outgoing = SendReply | SendError
Outcome = Reply | BaseException
"""What the engine answered a request: its reply, or the exception it raised."""


class OpenpiConnection:
    """The state of one openpi connection (one engine session)."""

    def __init__(
        self,
        engine: ServerEngine,
        session: Session,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``clock`` times reply encoding (default: the engine's)."""
        self.engine = engine
        self.session = session
        self._clock = clock or engine.clock
        self._num_accepted = 0
        self._num_released = 0
        """Requests whose answer left the core (sent, or dropped), in order."""
        self._settled: dict[int, Outcome] = {}
        self.closing = False
        """An error went out: the connection closes, nothing more is sent."""

    @property
    def num_waiting(self) -> int:
        """Requests accepted whose answer has not left the core."""
        return self._num_accepted - self._num_released

    def admit(self) -> None:
        """Called before a request frame is decoded; RequestError when too many of this
        connection's requests already await replies."""
        limit = self.engine.config.max_pipelined_requests
        if self.num_waiting >= limit:
            raise RequestError(
                f"more than {limit} requests of this connection await replies "
                "(--server.max-pipelined-requests); wait for replies before sending more"
            )

    def accept(self, observation: Mapping[str, Any], received_s: float) -> Pending:
        """Hand a decoded request to the engine at once (a robot may send the next before
        this one is answered). Raises RequestError (give it to :meth:`refuse`) or
        SessionClosed (the connection is over)."""
        request = self.engine.accept(self.session, observation, received_s=received_s)
        pending = Pending(seq=self._num_accepted, request=request)
        self._num_accepted += 1
        return pending

    def refuse(self, exc: RequestError) -> list[Outgoing]:
        """A request that could not be accepted: the connection ends. Requests still
        waiting are dropped, replies already released go first, then the error."""
        self.engine.close_session(self.session)
        seq = self._num_accepted
        self._num_accepted += 1
        return self.settle(seq, exc)

    def settle(self, seq: int, outcome: Outcome) -> list[Outgoing]:
        """The engine's answer to request ``seq``; what to send now, in order (nothing
        while an earlier request is unanswered)."""
        self._settled[seq] = outcome
        outgoing: list[Outgoing] = []
        while self._num_released in self._settled:
            item = self._release(self._settled.pop(self._num_released))
            self._num_released += 1
            if item is not None:
                outgoing.append(item)
        return outgoing

    def _release(self, outcome: Outcome) -> Outgoing | None:
        if self.closing or isinstance(outcome, SessionClosed):
            return None
        if isinstance(outcome, RequestError):
            self.closing = True
            self.engine.count_error("openpi", type(outcome).__name__, session=self.session)
            logger.info(
                "request of %s (%s) refused: %s",
                self.session.robot_name,
                self.session.peer,
                outcome,
            )
            return SendError(str(outcome))
        if isinstance(outcome, BaseException):
            self.closing = True
            logger.error(
                "a request of %s (%s) failed",
                self.session.robot_name,
                self.session.peer,
                exc_info=outcome,
            )
            return SendError(INTERNAL)
        if self.session.closed:
            return None
        encode_started_s = self._clock()
        frame = encode_reply(outcome)
        return SendReply(frame=frame, reply=outcome, encode_s=self._clock() - encode_started_s)
