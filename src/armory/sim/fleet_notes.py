"""What a fleet file sets against any scheduler, as notes `armory simulate` prints after
its report (`armory fleet` prints the chunk-fraction ones: a live server's directed lead
is its own).

- A chunk-fraction robot (LeRobot's rule) whose window is shorter than its fastest round
  trip runs dry before each chunk lands, unless it is sent a chunk on every tick.
- A directed robot sends when its queue holds the lead the server asks for (both links,
  a forward pass and the margin, in whole actions), and every chunk it gets replaces
  those actions: where they are half its chunk or more, the GPU computes at least two
  chunks for each chunk's worth of motion.
"""

from __future__ import annotations

import math

from armory.engine.session import directed_lead_s, directed_send_index
from armory.fleet_spec import FleetSpec
from armory.sim.bound import fastest_pass_s
from armory.sim.simulator import declared_limits


def fleet_notes(fleet: FleetSpec) -> list[str]:
    """Every note on ``fleet`` (:func:`short_window_notes`, :func:`directed_lead_notes`)."""
    return short_window_notes(fleet) + directed_lead_notes(fleet)


def short_window_notes(fleet: FleetSpec) -> list[str]:
    """For a chunk-fraction fleet, a note on each robot group whose window is shorter than
    its fastest round trip: it sends holding at most ``x = min(floor(g E), E - k)``
    actions (``g`` the chunk size threshold, ``k`` its min horizon: the server serves no
    earlier observation), and no chunk comes back sooner than ``m = floor(f t)`` ticks
    (``t`` both links and a pass of one at their least). With ``x < m`` each chunk from a
    window's first observation lands after the robot ran dry, whatever the scheduler,
    unless chunks come on every tick (each later one adding an action). Empty for other
    request modes."""
    if fleet.request_mode != "chunk-fraction":
        return []
    latency_s = fleet.profile().table(fleet.max_batch_size)[1:]
    fastest_s = fastest_pass_s(latency_s, fleet.latency_jitter)
    fraction = fleet.chunk_size_threshold
    notes = []
    for group in fleet.robots:
        horizon = group.max_execution_horizon
        held = min(math.floor(fraction * horizon + 1e-9), horizon - group.min_execution_horizon)
        round_trip_s = group.uplink.min_s + group.downlink.min_s + fastest_s
        ticks = math.floor(group.control_hz * round_trip_s + 1e-9)
        if held >= ticks:
            continue
        if ticks <= horizon - group.min_execution_horizon:
            # Rounded up to the hundredth printed: 0.33 of 3 actions would hold none.
            least = math.ceil(100.0 * ticks / horizon - 1e-9) / 100.0
            fix = f"a chunk_size_threshold of at least {least:.2f} covers it"
        else:
            fix = (
                f"no chunk_size_threshold covers it: its min horizon leaves "
                f"{horizon - group.min_execution_horizon}"
            )
        notes.append(
            f"robots of group {group.name!r} send holding at most {held} of their {horizon} "
            f"actions (chunk_size_threshold {fraction:g}), fewer than the {ticks} "
            f"tick{'s' if ticks > 1 else ''} their "
            f"fastest round trip takes: each runs dry before its chunk lands, whatever the "
            f"scheduler, unless it is sent a chunk on every tick; {fix}"
        )
    return notes


def directed_lead_notes(fleet: FleetSpec) -> list[str]:
    """For a directed fleet, a note on each robot group that the server's lead tells to
    send holding ``x >= E / 2`` of its ``E`` actions whenever it serves the group in full
    (:func:`~armory.engine.session.directed_lead_s` with a pass of one, its least: the
    links' medians, the forward pass and the fleet's margin, rounded up to whole actions
    and never past ``E - k``): each chunk then adds at most ``E - x``, and the GPU
    computes at least ``E / (E - x)`` chunks for a chunk's worth of motion, whatever the
    scheduler. (Over capacity the scheduler may tell robots it serves less to hold
    fewer.) Empty for other request modes."""
    if fleet.request_mode != "directed":
        return []
    profile = fleet.profile()
    margin_s = fleet.threshold_margin_s
    notes = []
    for group in fleet.robots:
        limits = declared_limits(group, fleet.request_mode)
        lead_s = directed_lead_s(limits, profile, 1.0, fleet.max_batch_size, margin_s)
        horizon = group.max_execution_horizon
        held = horizon - directed_send_index(0, limits, lead_s)
        if 2 * held < horizon:
            continue
        notes.append(
            f"robots of group {group.name!r}, served in full, are told to send holding at "
            f"least {held} of their {horizon} actions (links, a forward pass and the "
            f"{margin_s:g} s margin take {1000.0 * lead_s:.0f} ms at {group.control_hz:g} Hz): "
            f"each chunk adds at most {horizon - held}, so the GPU computes "
            f"{horizon / (horizon - held):.1f} chunks or more for each chunk's worth of "
            f"motion; a longer max_execution_horizon, or a smaller margin, spends less"
        )
    return notes
