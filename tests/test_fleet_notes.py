"""Notes on what a fleet file sets against any scheduler (armory.sim.fleet_notes)."""

from __future__ import annotations

import dataclasses

from armory.fleet_spec import DelaySpec, FleetSpec, RobotGroup
from armory.sim.fleet_notes import directed_lead_notes, fleet_notes, short_window_notes


def arm_group(control_hz: float, max_execution_horizon: int) -> RobotGroup:
    """Two robots named 'arm' with 5 ms links each way (no jitter)."""
    return RobotGroup(
        name="arm",
        count=2,
        control_hz=control_hz,
        max_execution_horizon=max_execution_horizon,
        uplink=DelaySpec(0.005),
        downlink=DelaySpec(0.005),
    )


def test_chunk_fraction_groups_whose_window_is_shorter_than_a_round_trip_are_named() -> None:
    """20 Hz robots with 10-action chunks, 5 ms links, a pass of 0.070 s at least: a round
    trip holds 1 tick. At 0.05 of a chunk a robot sends holding none (named, with the
    threshold that covers it, 0.10); at 0.1 it holds one (no note). A min horizon of 10
    leaves it nothing to hold whatever the threshold. Other modes get no note."""
    group = arm_group(20.0, 10)
    fleet = FleetSpec(
        robots=(group,),
        latency_profile="l40s-pi05",
        request_mode="chunk-fraction",
        chunk_size_threshold=0.05,
    )
    (note,) = short_window_notes(fleet)
    assert "'arm'" in note and "at most 0 of their 10" in note and "the 1 tick " in note
    assert "at least 0.10 covers it" in note
    assert short_window_notes(dataclasses.replace(fleet, chunk_size_threshold=0.1)) == []
    late = dataclasses.replace(group, min_execution_horizon=10)
    (note,) = short_window_notes(dataclasses.replace(fleet, robots=(late,), chunk_size_threshold=1))
    assert "no chunk_size_threshold covers it" in note
    assert short_window_notes(dataclasses.replace(fleet, request_mode="every-tick")) == []
    # A threshold that covers it, printed to a hundredth, is rounded up: 1 of 3 actions
    # needs 0.34 (0.33 of 3 holds none).
    short = dataclasses.replace(group, max_execution_horizon=3)
    (note,) = short_window_notes(dataclasses.replace(fleet, robots=(short,)))
    assert "at least 0.34 covers it" in note


def test_directed_groups_whose_lead_holds_half_their_chunk_are_named() -> None:
    """10 Hz robots with 3-action chunks, 5 ms links, a pass of 0.070 s at least and the
    50 ms margin: a lead of 130 ms, two actions, so each chunk adds at most one and the
    GPU computes three chunks for a chunk's worth of motion (named). A 10 ms margin leaves
    a lead of 90 ms, one action; 6-action chunks hold 2 of 6: no note. A min horizon of 3
    lets the robot hold none before its chunk's third action: no note. Other modes get no
    directed note."""
    group = arm_group(10.0, 3)
    fleet = FleetSpec(robots=(group,), latency_profile="l40s-pi05", request_mode="directed")
    (note,) = directed_lead_notes(fleet)
    assert "'arm'" in note and "at least 2 of their 3 actions" in note
    assert "take 130 ms at 10 Hz" in note and "adds at most 1" in note
    assert "3.0 chunks or more" in note
    assert fleet_notes(fleet) == [note]
    assert directed_lead_notes(dataclasses.replace(fleet, threshold_margin_s=0.01)) == []
    longer = dataclasses.replace(group, max_execution_horizon=6)
    assert directed_lead_notes(dataclasses.replace(fleet, robots=(longer,))) == []
    late = dataclasses.replace(group, min_execution_horizon=3)
    assert directed_lead_notes(dataclasses.replace(fleet, robots=(late,))) == []
    for mode in ("every-tick", "threshold", "chunk-fraction"):
        assert directed_lead_notes(dataclasses.replace(fleet, request_mode=mode)) == []
