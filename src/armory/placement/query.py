"""How a robot names itself to a cluster's front door and says what it asks of a GPU:
the query of the URI it connects to (``/?robot=arm-3&control_hz=30&...``), written by
the client (:mod:`armory_client.wire.placement`, ``name_robot``) and read by
:mod:`armory.cluster.placement_request`; a fleet robot's demand."""

from __future__ import annotations

from armory_client.wire.placement import MAX_ROBOT_NAME, ROBOT_PARAM, is_robot_name

from armory.fleet_spec import RobotSpec
from armory.placement.base import RobotDemand

__all__ = ["MAX_ROBOT_NAME", "ROBOT_PARAM", "is_robot_name", "robot_demand"]


def robot_demand(spec: RobotSpec) -> RobotDemand:
    """What a robot of a fleet file asks of a GPU (its smallest round trip)."""
    return RobotDemand(
        control_hz=spec.control_hz,
        max_execution_horizon=spec.max_execution_horizon,
        round_trip_s=spec.uplink.min_s + spec.downlink.min_s,
        weight=spec.weight,
    )
