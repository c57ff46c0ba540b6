"""What a robot asking the front door for its replica says: pure parsing, no I/O.

A robot names itself and, optionally, what it asks of a GPU, in the query of the
URI it connects to: ``/?robot=arm-3&control_hz=30&max_execution_horizon=15`` (also
``round_trip_s`` and ``weight``). A robot that names itself keeps its replica while
that replica is up (unless it is moved off a replica over capacity); one that does not
is placed anew on every connection.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from armory.core.door_names import DOOR_NAMES
from armory.placement.base import RobotDemand
from armory.placement.query import MAX_ROBOT_NAME, ROBOT_PARAM, is_robot_name

_DEMAND_FIELDS = {f.name: f.type for f in dataclasses.fields(RobotDemand)}


@dataclass(frozen=True)
class PlacementRequest:
    """A robot's request for a replica."""

    path: str
    """The path without its query (``/`` or ``/place``)."""
    robot: str | None
    """The robot's name, when it gave one."""
    demand: RobotDemand
    door: str = "openpi"
    """The door the robot speaks (``/place?door=groot``)."""


def parse_placement_request(target: str) -> PlacementRequest:
    """Parse a request target (path and query); ``ValueError`` names a bad parameter."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True, max_num_fields=16)
    values: dict[str, str] = {}
    for key, items in query.items():
        if len(items) != 1:
            raise ValueError(f"query parameter {key!r} is given {len(items)} times")
        values[key] = items[0]
    robot = values.pop(ROBOT_PARAM, None)
    if robot is not None and not is_robot_name(robot):
        raise ValueError(
            f"robot name must be 1-{MAX_ROBOT_NAME} letters, digits or ._:/@+-, got {robot!r}"
        )
    door = values.pop("door", "openpi")
    if door not in DOOR_NAMES:
        raise ValueError(f"door must be openpi, groot or lerobot, got {door!r}")
    demand: dict[str, float | int] = {}
    for key, text in values.items():
        if key not in _DEMAND_FIELDS:
            valid = ", ".join([ROBOT_PARAM, "door", *_DEMAND_FIELDS])
            raise ValueError(f"unknown query parameter {key!r}; valid: {valid}")
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {text!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"{key} must be finite, got {text!r}")
        if key == "max_execution_horizon":
            if number != int(number):
                raise ValueError(f"max_execution_horizon must be a whole number, got {text!r}")
            number = int(number)
        demand[key] = number
    return PlacementRequest(
        path=parts.path or "/", robot=robot, demand=RobotDemand(**demand), door=door
    )
