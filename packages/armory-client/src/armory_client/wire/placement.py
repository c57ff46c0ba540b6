"""How a robot names itself to a cluster's front door and says what it asks of a GPU:
the query of the URI it connects to (``/?robot=arm-3&control_hz=30&...``).

``armory cluster``'s front door reads the query back to place the robot on a replica
and keep it there across reconnects; a server ignores it.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

__all__ = [
    "MAX_ROBOT_NAME",
    "ROBOT_PARAM",
    "is_robot_name",
    "names_a_robot",
    "placement_query",
    "with_query",
]

MAX_ROBOT_NAME = 128
"""Longest robot name the front door accepts (characters)."""
ROBOT_PARAM = "robot"
"""The query parameter that names the robot (the front door's and its tickets')."""
_NAME = re.compile(r"^[A-Za-z0-9._:/@+-]+$")


def is_robot_name(text: str) -> bool:
    """Whether the front door takes ``text`` as a robot's name."""
    return len(text) <= MAX_ROBOT_NAME and _NAME.match(text) is not None


def placement_query(
    robot: str | None,
    *,
    control_hz: float | None = None,
    max_execution_horizon: int | None = None,
    round_trip_s: float | None = None,
    weight: float | None = None,
) -> str:
    """The query (without ``?``) by which a robot names itself (unless ``robot`` is None)
    and says what it asks of a GPU (each value given): its rate, the actions of a chunk
    it plays, its smallest uplink plus downlink, and its weight."""
    fields = {
        ROBOT_PARAM: robot,
        "control_hz": control_hz,
        "max_execution_horizon": max_execution_horizon,
        "round_trip_s": round_trip_s,
        "weight": weight,
    }
    return urlencode({key: value for key, value in fields.items() if value is not None})


def names_a_robot(uri: str) -> bool:
    """Whether ``uri``'s query names a robot already."""
    return ROBOT_PARAM in parse_qs(urlsplit(uri).query)


def with_query(uri: str, query: str) -> str:
    """``uri`` with ``query`` added to its query (and the path ``/`` where it has none)."""
    if not query:
        return uri
    parts = urlsplit(uri)
    joined = f"{parts.query}&{query}" if parts.query else query
    return urlunsplit(parts._replace(path=parts.path or "/", query=joined))
