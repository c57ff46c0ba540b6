"""Plain HTTP beside the WebSocket: health, stats, extra pages and the API-key check.

Pure decisions (path and headers in, status and body out); the WebSocket
transport turns them into responses during its opening handshake.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from armory.transports.tickets import TicketGate, TicketRefused, has_ticket

HEALTH_PATH = "/healthz"
STATS_PATH = "/stats"
MOVE_PATH = "/move"
"""A cluster replica's: ``GET /move?robot=NAME`` closes that robot's connection after its
next reply, so that it reconnects through the front door to its new replica."""
MAX_ROBOT_NAME_CHARS = 256
"""Longest robot name ``/move`` reads (an Armory robot id's limit on the wire)."""
AUTH_HEADER = "Authorization"
AUTH_SCHEME = "Api-Key"
BASIC_SCHEME = "Basic"
"""A browser's own login prompt: any user name, the API key as password."""


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP response that replaces the WebSocket handshake."""

    status: HTTPStatus
    body: str
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    """Further response headers."""


Page = Callable[[], HttpAnswer | Awaitable[HttpAnswer]]
"""Answers a GET of one path (``/metrics``, ``/dashboard``, ...), at once or awaited."""


def api_key_ok(header: str | None, api_key: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``Api-Key <api_key>``, or HTTP Basic
    credentials whose password is the key (a browser's login prompt); constant time.

    Without a configured key every request passes.
    """
    if not api_key:
        return True
    expected = api_key.encode("utf-8", "surrogateescape")
    received = (header or "").encode("utf-8", "surrogateescape")
    scheme, _, credentials = received.partition(b" ")
    if scheme == BASIC_SCHEME.encode():
        try:
            _, _, received_key = base64.b64decode(credentials, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(received_key, expected)
    return hmac.compare_digest(received, f"{AUTH_SCHEME} ".encode() + expected)


def stats_json(stats: Callable[[], Any], *, indent: int | None = None) -> str:
    """``stats()`` as JSON (a dataclass as its fields): the body of ``/stats`` and of each
    frame of the dashboard's feed."""
    value = stats()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, indent=indent)


def route(
    path: str,
    auth_header: str | None,
    *,
    api_key: str | None,
    stats: Callable[[], Any],
    max_connections: int | None = None,
    num_connections: int = 0,
    pages: Mapping[str, Page] | None = None,
    tickets: TicketGate | None = None,
    move_robot: Callable[[str], bool] | None = None,
) -> HttpAnswer | Awaitable[HttpAnswer] | None:
    """The answer to an HTTP request on the WebSocket port, or None to go on with the
    WebSocket handshake.

    ``/healthz`` always answers ``OK``; everything else needs the API key when one
    is configured (a browser is asked for it, as the password of its login prompt);
    ``/stats`` answers the engine's counters as JSON, each of ``pages`` its own answer;
    a handshake while
    ``num_connections`` robots hold all ``max_connections`` is refused with 503.
    ``path`` may carry a query: with ``tickets`` (a replica of ``armory cluster``) a
    robot's handshake at ``/`` is let in by a front-door ticket in place of the key.
    With ``move_robot`` (a replica of ``armory cluster``) ``/move?robot=NAME`` asks it
    to move that robot (:func:`move_answer`).
    """
    target, path = path, path.split("?", 1)[0]
    if path == HEALTH_PATH:
        return HttpAnswer(HTTPStatus.OK, "OK\n")
    if not api_key_ok(auth_header, api_key):
        refusal = _refusal_without_key(target, path, tickets)
        if refusal is not None:
            return refusal
    page = (pages or {}).get(path)
    if page is not None:
        return page()
    if path == MOVE_PATH and move_robot is not None:
        return move_answer(target, move_robot)
    if path == STATS_PATH:
        return HttpAnswer(
            HTTPStatus.OK, stats_json(stats, indent=2) + "\n", content_type="application/json"
        )
    if max_connections is not None and num_connections >= max_connections:
        return HttpAnswer(
            HTTPStatus.SERVICE_UNAVAILABLE,
            f"{num_connections} robots are connected, the most this door serves "
            "(--server.max-connections); try again later\n",
        )
    return None


def move_answer(target: str, move_robot: Callable[[str], bool]) -> HttpAnswer:
    """The answer to ``/move?robot=NAME``: 200 once ``move_robot(NAME)`` took it, 404 when
    no such robot can be moved here, 400 naming what is wrong with the query."""
    try:
        query = parse_qs(urlsplit(target).query, keep_blank_values=True, max_num_fields=4)
    except ValueError as exc:
        return HttpAnswer(HTTPStatus.BAD_REQUEST, f"bad query: {exc}\n")
    names = query.get("robot", [])
    if len(names) != 1 or not 0 < len(names[0]) <= MAX_ROBOT_NAME_CHARS:
        return HttpAnswer(
            HTTPStatus.BAD_REQUEST,
            f"name one robot of 1 to {MAX_ROBOT_NAME_CHARS} characters: {MOVE_PATH}?robot=NAME\n",
        )
    name = names[0]
    if not move_robot(name):
        return HttpAnswer(
            HTTPStatus.NOT_FOUND,
            f"no robot {name!r} on Armory's client is connected to this replica's openpi door\n",
        )
    return HttpAnswer(HTTPStatus.OK, f"robot {name!r} reconnects after its next reply\n")


def _refusal_without_key(target: str, path: str, tickets: TicketGate | None) -> HttpAnswer | None:
    """The 401 for a request without the API key, or None when a robot's handshake
    carries a front-door ticket that admits it."""
    if tickets is None or path != "/" or not has_ticket(target):
        return HttpAnswer(
            HTTPStatus.UNAUTHORIZED,
            f"missing or wrong API key: send the header '{AUTH_HEADER}: {AUTH_SCHEME} <key>' "
            "(a browser: any user name, the key as password)\n",
            headers=(("WWW-Authenticate", f'{BASIC_SCHEME} realm="armory"'),),
        )
    try:
        tickets.admit(target)
    except TicketRefused as exc:
        return HttpAnswer(
            HTTPStatus.UNAUTHORIZED,
            f"front-door ticket refused: {exc}; connect through the cluster's front door again\n",
        )
    return None
