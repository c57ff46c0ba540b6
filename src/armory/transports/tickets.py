"""Front-door tickets: a cluster's front door lets a robot holding the API key through
to its replica without the key travelling on.

A robot's handshake at ``armory cluster``'s front door carries the API key; the door
answers ``307`` to the replica's openpi door with a ticket in the query
(``?robot=arm-3&ticket=<expiry>.<signature>``). The signature is an HMAC-SHA256, keyed
by a key derived from the API key, over the replica's id, the robot's name and the
expiry (Unix milliseconds), so a ticket is good for one replica, one robot name, a
few seconds, and one handshake. WebSocket clients drop the ``Authorization`` header on
a redirect to another host or port (websockets >= 13 does), so the replica sees the
ticket and not the key. Pure but for the replica's memory of the tickets it admitted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlencode, urlsplit

from armory_client.wire.placement import ROBOT_PARAM

TICKET_PARAM = "ticket"
DEFAULT_TICKET_TTL_S = 5.0
"""Seconds a ticket stays good: the redirect is followed at once."""
MAX_TICKET_TTL_S = 60.0
"""A replica refuses a ticket expiring further ahead than this (bounds its memory)."""
MAX_TICKET_CHARS = 128
"""Longest ticket text read (a real one is about 60 characters)."""
_CONTEXT = b"armory front-door ticket v1"


class TicketRefused(Exception):
    """A ticket that does not admit the handshake; the message says why."""


def _ticket_key(api_key: str) -> bytes:
    """The HMAC key of tickets: derived from the API key, never the key itself."""
    return hmac.new(api_key.encode("utf-8", "surrogateescape"), _CONTEXT, hashlib.sha256).digest()


def _signature(key: bytes, audience: str, robot: str, expires_ms: int) -> bytes:
    message = f"{audience}\n{robot}\n{expires_ms}".encode("utf-8", "surrogateescape")
    return hmac.new(key, message, hashlib.sha256).digest()


def ticket_query(api_key: str, *, audience: str, robot: str | None, expires_s: float) -> str:
    """The query (without ``?``) that admits ``robot`` at the replica ``audience`` until
    ``expires_s`` (Unix seconds)."""
    expires_ms = int(expires_s * 1000)
    signature = _signature(_ticket_key(api_key), audience, robot or "", expires_ms)
    ticket = f"{expires_ms}.{base64.urlsafe_b64encode(signature).decode().rstrip('=')}"
    params = {ROBOT_PARAM: robot} if robot else {}
    return urlencode({**params, TICKET_PARAM: ticket})


def has_ticket(target: str) -> bool:
    """Whether a request target (path and query) carries a ticket (or a query too long
    to tell, which :meth:`TicketGate.admit` refuses)."""
    try:
        return TICKET_PARAM in parse_qs(urlsplit(target).query, max_num_fields=16)
    except ValueError:
        return True


class TicketGate:
    """A replica's check of front-door tickets: each good ticket admits one handshake."""

    def __init__(
        self, api_key: str, audience: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        """``audience`` is this replica's id (as the front door knows it); ``clock`` gives
        Unix seconds (the front door's and the replicas' clocks must agree to well within
        a ticket's life: NTP on every node)."""
        if not api_key:
            raise ValueError("tickets need the cluster's API key")
        self._key = _ticket_key(api_key)
        self.audience = audience
        self._clock = clock
        self._admitted: dict[bytes, int] = {}
        """Signature -> expiry (ms) of each ticket admitted and not yet expired."""

    def admit(self, target: str) -> None:
        """Admit the handshake of ``target`` (path and query) or raise
        :class:`TicketRefused` naming why."""
        try:
            query = parse_qs(urlsplit(target).query, max_num_fields=16)
        except ValueError as exc:
            raise TicketRefused(f"unreadable query: {exc}") from None
        tickets, robots = query.get(TICKET_PARAM, []), query.get(ROBOT_PARAM, [""])
        if len(tickets) != 1 or len(robots) != 1:
            raise TicketRefused("give one ticket and at most one robot name")
        expires_ms, signature = self._parse(tickets[0])
        expected = _signature(self._key, self.audience, robots[0], expires_ms)
        if not hmac.compare_digest(signature, expected):
            raise TicketRefused(
                "the ticket is not this replica's: minted for another replica or robot, "
                "or not by this cluster's front door"
            )
        now_ms = int(self._clock() * 1000)
        self._forget_expired(now_ms)
        if expires_ms <= now_ms:
            raise TicketRefused(f"the ticket expired {(now_ms - expires_ms) / 1000:.1f} s ago")
        if expires_ms - now_ms > MAX_TICKET_TTL_S * 1000:
            raise TicketRefused(f"the ticket is good for more than {MAX_TICKET_TTL_S:g} s")
        if signature in self._admitted:
            raise TicketRefused("the ticket was used already")
        self._admitted[signature] = expires_ms

    @staticmethod
    def _parse(ticket: str) -> tuple[int, bytes]:
        """(expiry in ms, signature) of a ticket's text."""
        if len(ticket) > MAX_TICKET_CHARS:
            raise TicketRefused(f"the ticket is longer than {MAX_TICKET_CHARS} characters")
        expiry, _, encoded = ticket.partition(".")
        try:
            expires_ms = int(expiry) if expiry.isdigit() else None
            signature = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            expires_ms = None
        if expires_ms is None or len(signature) != hashlib.sha256().digest_size:
            raise TicketRefused("malformed ticket: want <expiry ms>.<signature>")
        return expires_ms, signature

    def _forget_expired(self, now_ms: int) -> None:
        for signature in [s for s, expires_ms in self._admitted.items() if expires_ms <= now_ms]:
            del self._admitted[signature]

    @property
    def num_remembered(self) -> int:
        """Admitted tickets not yet expired (each can never admit again)."""
        return len(self._admitted)
