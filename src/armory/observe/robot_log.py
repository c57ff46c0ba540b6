"""One log line per robot that connects (at its first request, when its name and rate
are known) and per robot that disconnects, on the ``armory.robots`` logger at INFO, with
their fields attached for JSON logs (``event``, ``robot``, ``door``, ...)."""

from __future__ import annotations

import logging

from armory.engine.queue_mirror import RobotLimits
from armory.engine.session import Session

robot_logger = logging.getLogger("armory.robots")


def log_connect(session: Session, limits: RobotLimits) -> None:
    """Called at a session's first request."""
    robot_logger.info(
        "robot %s connected through the %s door from %s (%s client, %g Hz, weight %g)",
        session.robot_name,
        session.door,
        session.peer,
        "Armory" if session.is_armory else "plain",
        limits.control_hz,
        limits.weight,
        extra={
            "event": "connect",
            "robot": session.robot_name,
            "door": session.door,
            "peer": session.peer,
            "control_hz": limits.control_hz,
            "weight": limits.weight,
        },
    )


def log_disconnect(session: Session, starvation: float | None) -> None:
    """Called when a session that sent requests closes; ``starvation``: its estimate."""
    robot_logger.info(
        "robot %s disconnected from the %s door after %d requests%s",
        session.robot_name,
        session.door,
        session.num_requests,
        "" if starvation is None else f" (starved {100 * starvation:.1f}% of ticks)",
        extra={
            "event": "disconnect",
            "robot": session.robot_name,
            "door": session.door,
            "num_requests": session.num_requests,
            "starvation": starvation,
        },
    )
