"""The server's exception tree: what can go wrong with one robot's request.

Every :class:`RequestError` concerns one robot alone. A transport sends its
message to that robot (openpi: a text frame, then close 1011) and nobody else
notices. Messages are meant for the robot's operator: they name what was wrong
and what was expected, never the server's internals.

RequestError
├── DecodeError         the bytes are not a msgpack observation map
├── ObservationError    the observation does not match the policy's declared inputs
├── QueueStateError     the ``__armory__`` queue state is malformed or unservable
├── PolicyError         the policy failed on this observation (or returned a bad chunk)
├── RequestTimeout      no batch took the request within the server's request timeout
└── ServerClosing       the server stops before the request could be answered
"""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 1000
"""Longest error text sent to a robot (a longer one is cut, marked with "...")."""

INTERNAL_ERROR = "internal server error; the server log has the details"
"""What every door tells a robot whose request failed inside the server (not its fault)."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class RequestError(Exception):
    """Base class: an error about one robot's request, sent to that robot only."""

    def __str__(self) -> str:
        """The message as the robot gets it (:func:`public_text`)."""
        return public_text(super().__str__())


class DecodeError(RequestError):
    """The frame cannot be decoded into an observation map."""


class ObservationError(RequestError, ValueError):
    """The observation does not match the policy's declared inputs."""


class QueueStateError(RequestError, ValueError):
    """The Armory queue state under ``__armory__`` is malformed or cannot be served."""


class PolicyError(RequestError):
    """The policy raised on this observation, or returned a chunk of the wrong shape."""


class RequestTimeout(RequestError):
    """No batch took the request within ``--server.request-timeout-s``; it was withdrawn."""


class ServerClosing(RequestError):
    """The server is stopping; the request was not answered."""


class SessionClosed(Exception):
    """The robot's connection closed (or was replaced) while its request waited: nothing to
    answer. Not a RequestError: there is nobody to send a message to."""


class Superseded(Exception):
    """A newer observation of the same robot replaced this one before any batch took it
    (a pipelined every-tick robot): it is answered "deferred", without a chunk. Not a
    RequestError: nothing went wrong."""


def public_text(message: str) -> str:
    """An error text fit for a robot: no heap addresses (``<... object at 0x7f...>`` from
    a library's message), at most :data:`MAX_MESSAGE_CHARS` characters."""
    message = _ADDRESS.sub("", message)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return message
