"""The fleet runner: the robots of a fleet file as real clients over real sockets.

``armory fleet`` (:func:`run_fleet`) runs one `RobotRuntime` per robot of a fleet
file against a policy server, measures every robot from its own ground truth and
reports the same metrics as ``armory simulate``.
"""

from armory.fleet.runner import FleetError, FleetOptions, FleetProgress, ServerLost, run_fleet

__all__ = ["FleetError", "FleetOptions", "FleetProgress", "ServerLost", "run_fleet"]
