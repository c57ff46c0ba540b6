"""How a robot names itself to a cluster's front door and says what it asks of a GPU:
the query of the URI it connects to (``/?robot=arm-3&control_hz=30&...``), written here
and read by :mod:`armory.cluster.placement_request`."""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import urlencode

from armory.fleet_spec import RobotSpec
from armory.placement.base import RobotDemand

MAX_ROBOT_NAME = 128
"""Longest robot name accepted (characters)."""
_NAME = re.compile(r"^[A-Za-z0-9._:/@+-]+$")


def is_robot_name(text: str) -> bool:
    """Whether the front door takes ``text`` as a robot's name."""
    return len(text) <= MAX_ROBOT_NAME and _NAME.match(text) is not None


def placement_query(robot: str | None, demand: RobotDemand | None) -> str:
    """The query (without ``?``) by which a robot names itself (unless ``robot`` is None)
    and says what it asks of a GPU (unless ``demand`` is None): what the front door reads
    back."""
    fields = {} if demand is None else dataclasses.asdict(demand)
    return urlencode({"robot": robot, **fields} if robot is not None else fields)


def robot_demand(spec: RobotSpec) -> RobotDemand:
    """What a robot of a fleet file asks of a GPU (its smallest round trip)."""
    return RobotDemand(
        control_hz=spec.control_hz,
        max_execution_horizon=spec.max_execution_horizon,
        round_trip_s=spec.uplink.min_s + spec.downlink.min_s,
        weight=spec.weight,
    )
