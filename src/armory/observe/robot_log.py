"""One log line per robot that connects (at its first request, when its name and rate
are known) and per robot that disconnects, on the ``armory.robots`` logger at INFO, with
their fields attached for JSON logs (``event``, ``robot``, ``door``, ...)."""

from __future__ import annotations

import logging

robot_logger = logging.getLogger("armory.robots")


def log_connect(
    robot: str, *, door: str, peer: str, is_armory: bool, control_hz: float, weight: float
) -> None:
    """Called at a robot's first request."""
    robot_logger.info(
        "robot %s connected through the %s door from %s (%s client, %g Hz, weight %g)",
        robot,
        door,
        peer,
        "Armory" if is_armory else "plain",
        control_hz,
        weight,
        extra={
            "event": "connect",
            "robot": robot,
            "door": door,
            "peer": peer,
            "control_hz": control_hz,
            "weight": weight,
        },
    )


def log_disconnect(robot: str, *, door: str, num_requests: int, starvation: float | None) -> None:
    """Called when a robot that sent requests disconnects; ``starvation``: its estimate."""
    robot_logger.info(
        "robot %s disconnected from the %s door after %d requests%s",
        robot,
        door,
        num_requests,
        "" if starvation is None else f" (starved {100 * starvation:.1f}% of ticks)",
        extra={
            "event": "disconnect",
            "robot": robot,
            "door": door,
            "num_requests": num_requests,
            "starvation": starvation,
        },
    )
