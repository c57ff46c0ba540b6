"""SimRobot: the ground-truth queue, driven by hand with exact numbers.

Every robot here ticks at 10 Hz from phase 0 (ticks at 0.0, 0.1, 0.2, ...) and
chunks land between ticks, so each count can be worked out on paper.
"""

from __future__ import annotations

import math

import pytest

from armory.engine.queue_mirror import NO_CHUNK
from armory.fleet_spec import DelaySpec, RobotSpec
from armory.sim.robot import SimRobot


def make_robot(
    *,
    control_hz: float = 10.0,
    min_execution_horizon: int = 1,
    max_execution_horizon: int = 5,
    phase_s: float = 0.0,
    startup_end_s: float = math.inf,
) -> SimRobot:
    """A robot at ``control_hz`` with the given horizons; defaults: 10 Hz, E = 5, phase 0,
    no end to its start-up."""
    spec = RobotSpec(
        robot_id="arm-0",
        control_hz=control_hz,
        min_execution_horizon=min_execution_horizon,
        max_execution_horizon=max_execution_horizon,
        weight=1.0,
        uplink=DelaySpec(),
        downlink=DelaySpec(),
    )
    return SimRobot(spec, phase_s=phase_s, startup_end_s=startup_end_s)


# ---- ticks ----------------------------------------------------------------


def test_tick_index_and_time_follow_the_phase() -> None:
    """Ticks fall at phase + n / rate; before the first tick the index is -1."""
    robot = make_robot(control_hz=20.0, phase_s=0.01)
    assert robot.tick_index(0.0) == -1
    assert robot.tick_index(0.01) == 0
    assert robot.tick_index(0.0599) == 0
    assert robot.tick_index(0.06) == 1
    assert robot.tick_time_s(3) == pytest.approx(0.16)


def test_advance_is_idempotent_and_never_goes_back() -> None:
    """Advancing to the same or an earlier time changes nothing."""
    robot = make_robot()
    robot.apply_chunk(0.05, 0, 0.0)
    robot.advance_to(0.25)
    before = (robot.action_index, robot.counted_ticks, robot.starved_ticks, robot.last_tick)
    robot.advance_to(0.25)
    robot.advance_to(0.12)
    assert (robot.action_index, robot.counted_ticks, robot.starved_ticks, robot.last_tick) == before


# ---- the replace-from-index rule ------------------------------------------


def test_chunk_on_an_idle_robot_yields_all_e_actions() -> None:
    """A first chunk on a robot that has not moved queues all E = 5 actions and plays them."""
    robot = make_robot()
    assert robot.apply_chunk(0.25, 0, 0.0)
    assert robot.report().actions_left == 5
    robot.advance_to(1.0)  # ticks 3..10: five execute, three starve
    assert robot.executed == 5
    assert robot.action_index == 5
    assert robot.counted_ticks == 8
    assert robot.starved_ticks == 3


def test_late_chunk_yields_e_minus_the_actions_executed_meanwhile() -> None:
    """A chunk from index 2 landing when the robot is at index 4 (d = 2) leaves E - d = 3."""
    robot = make_robot()
    robot.apply_chunk(0.05, 0, 0.0)
    robot.advance_to(0.25)
    assert robot.action_index == 2  # the observation behind the next chunk
    assert robot.apply_chunk(0.45, 2, 0.2)
    report = robot.report()
    assert report.action_index == 4
    assert report.actions_left == 3
    assert report.chunk_start == 2


def test_chunk_replaces_the_queue_from_its_start() -> None:
    """Each newer chunk replaces the queue from its start: it then ends at start + E."""
    robot = make_robot(max_execution_horizon=5)
    robot.apply_chunk(0.05, 0, 0.0)  # queue 0..4
    robot.apply_chunk(0.15, 1, 0.1)  # at index 1: queue 1..5, not 0..4 plus more
    assert robot.report().action_index == 1
    assert robot.report().actions_left == 5
    robot.apply_chunk(0.25, 2, 0.2)
    assert robot.queue_end == 7


def test_chunk_landing_on_a_starving_robot_from_its_current_index_yields_e() -> None:
    """After the queue ran dry at index 5, a chunk from index 5 gives a full E = 5."""
    robot = make_robot()
    robot.apply_chunk(0.05, 0, 0.0)
    assert robot.apply_chunk(0.75, 5, 0.5)  # ticks 1..5 execute, ticks 6 and 7 starve
    assert robot.starved_ticks == 2
    assert robot.report().actions_left == 5
    robot.advance_to(1.25)  # ticks 8..12 execute the five
    assert robot.executed == 10
    assert robot.starved_ticks == 2


def test_chunk_landing_on_a_starving_robot_from_an_older_index_yields_e_minus_d() -> None:
    """A chunk from index 3 landing on a robot stuck at index 5 gives E - 2 = 3 actions."""
    robot = make_robot()
    robot.apply_chunk(0.05, 0, 0.0)
    assert robot.apply_chunk(0.75, 3, 0.3)
    assert robot.report().action_index == 5
    assert robot.report().actions_left == 3


def test_older_chunk_is_dropped() -> None:
    """A chunk whose start precedes the applied one is counted stale and changes nothing."""
    robot = make_robot()
    robot.apply_chunk(0.05, 0, 0.0)
    robot.apply_chunk(0.35, 3, 0.3)
    queue = (robot.queue_end, robot.chunk_start, robot.chunk_obs_time_s)
    assert not robot.apply_chunk(0.45, 2, 0.2)
    assert robot.chunks_stale == 1
    assert robot.chunks_applied == 2
    assert (robot.queue_end, robot.chunk_start, robot.chunk_obs_time_s) == queue


def test_index_advances_only_on_executed_ticks() -> None:
    """Starved ticks leave the action index where it was."""
    robot = make_robot(max_execution_horizon=2)
    robot.apply_chunk(0.05, 0, 0.0)
    robot.advance_to(0.95)  # ticks 1..9: two execute
    assert robot.action_index == 2
    assert robot.executed == 2
    assert robot.starved_ticks == 7


# ---- starvation counting --------------------------------------------------


def test_ticks_before_the_first_landing_are_start_up_not_starvation() -> None:
    """Ten idle ticks before the first chunk count neither as ticks nor as starved."""
    robot = make_robot()
    robot.advance_to(0.95)
    assert (robot.counted_ticks, robot.starved_ticks, robot.first_land_s) == (0, 0, None)
    robot.apply_chunk(0.95, 0, 0.9)  # from the observation at index 0, taken at 0.9
    assert robot.first_land_s == 0.95
    robot.advance_to(1.55)  # ticks 10..15: five execute, one starves
    assert robot.counted_ticks == 6
    assert robot.starved_ticks == 1
    assert robot.action_index == 5  # the index did not move while idle


def test_robot_never_served_counts_no_ticks() -> None:
    """Without a landing the robot keeps no tick counts (the report counts all as starved)."""
    robot = make_robot()
    robot.advance_to(10.0)
    assert robot.last_tick == 100
    assert (robot.counted_ticks, robot.starved_ticks, robot.executed) == (0, 0, 0)
    assert robot.report().actions_left == 0
    assert robot.report().chunk_start == NO_CHUNK


def test_ticks_past_the_start_up_count_as_starved_before_the_first_chunk() -> None:
    """Start-up ends at 0.45: ticks 5..9 (0.5..0.9) starve while the robot still waits,
    then the first chunk lands at 0.95 and counting goes on as usual."""
    robot = make_robot(startup_end_s=0.45)
    robot.advance_to(0.3)
    assert (robot.counted_ticks, robot.starved_ticks) == (0, 0)
    robot.advance_to(0.7)  # ticks 5, 6, 7
    assert (robot.counted_ticks, robot.starved_ticks) == (3, 3)
    robot.apply_chunk(0.95, 0, 0.9)  # ticks 8, 9 before it lands
    assert (robot.counted_ticks, robot.starved_ticks) == (5, 5)
    robot.advance_to(1.55)  # ticks 10..15: five execute, one starves
    assert (robot.counted_ticks, robot.starved_ticks) == (11, 6)
    assert robot.executed == 5


def test_a_first_chunk_within_the_start_up_counts_nothing_before_it() -> None:
    """Start-up ends at 2.0, the chunk lands at 0.95: the wait is start-up."""
    robot = make_robot(startup_end_s=2.0)
    robot.apply_chunk(0.95, 0, 0.9)
    robot.advance_to(1.55)
    assert (robot.counted_ticks, robot.starved_ticks) == (6, 1)


# ---- freshness ------------------------------------------------------------


def test_freshness_is_the_age_of_the_observation_behind_each_action() -> None:
    """Ages 0.1, 0.2, 0.3 from the first chunk, then 0.15, 0.25 from the second: mean 0.2."""
    robot = make_robot(max_execution_horizon=3)
    robot.apply_chunk(0.05, 0, 0.0)  # obs at 0.0; plays at 0.1, 0.2, 0.3
    robot.apply_chunk(0.35, 2, 0.25)  # obs at 0.25, at index 3: plays 3, 4 at 0.4, 0.5
    robot.advance_to(1.0)
    assert robot.executed == 5
    assert robot.age_sum_s == pytest.approx(0.6 + 0.4)
    assert robot.age_sum_s / robot.executed == pytest.approx(0.2)


# ---- threshold mode -------------------------------------------------------


def test_threshold_send_before_any_chunk_is_the_next_tick() -> None:
    """Without a landed chunk or a measured round trip the robot asks on the next tick."""
    robot = make_robot()
    robot.advance_to(0.35)
    assert robot.next_threshold_send_tick(0.05) == 4
    robot.apply_chunk(0.45, 0, 0.3)
    assert robot.next_threshold_send_tick(0.05) == 5  # no round trip measured yet


def test_threshold_send_tick_is_when_the_queue_falls_within_the_round_trip() -> None:
    """10 actions left, round trip + margin = 2.5 actions: send after 8 ticks (2 left)."""
    robot = make_robot(max_execution_horizon=10, min_execution_horizon=4)
    robot.apply_chunk(0.05, 0, 0.0)
    robot.record_round_trip(0.2)
    assert robot.last_tick == 0
    assert robot.next_threshold_send_tick(0.05) == 8


def test_threshold_send_waits_for_the_min_execution_horizon() -> None:
    """A round trip longer than the queue says 'now', but the robot waits 4 actions."""
    robot = make_robot(max_execution_horizon=10, min_execution_horizon=4)
    robot.apply_chunk(0.05, 0, 0.0)
    robot.record_round_trip(1.0)
    assert robot.next_threshold_send_tick(0.05) == 4


def test_threshold_min_horizon_counts_from_the_chunk_start() -> None:
    """A chunk from index 2 landing at index 4 needs two more actions to reach 2 + 4."""
    robot = make_robot(max_execution_horizon=10, min_execution_horizon=4)
    robot.apply_chunk(0.05, 0, 0.0)
    robot.apply_chunk(0.45, 2, 0.2)
    robot.record_round_trip(5.0)
    assert robot.action_index == 4
    assert robot.next_threshold_send_tick(0.0) == robot.last_tick + 2


def test_threshold_send_is_never_before_the_next_tick() -> None:
    """An empty queue past its min horizon sends on the very next tick."""
    robot = make_robot(max_execution_horizon=2)
    robot.apply_chunk(0.05, 0, 0.0)
    robot.advance_to(0.55)
    robot.record_round_trip(0.1)
    assert robot.next_threshold_send_tick(0.0) == robot.last_tick + 1


# ---- chunk-fraction mode ---------------------------------------------------


def test_chunk_fraction_sends_from_before_the_first_chunk_on_every_tick() -> None:
    """Before any chunk the robot wants to send, on the next tick."""
    robot = make_robot()
    robot.advance_to(0.35)
    assert robot.wants_to_send_chunk_fraction(0.5)
    assert robot.next_chunk_fraction_send_tick(0.5) == 4


def test_chunk_fraction_waits_until_the_queue_holds_its_fraction_of_a_chunk() -> None:
    """A chunk of 10 lands after tick 0: at 0.3 of it the robot next sends at tick 7, when
    it holds 3 actions, and on every tick after that."""
    robot = make_robot(max_execution_horizon=10)
    robot.apply_chunk(0.05, 0, 0.0)
    assert not robot.wants_to_send_chunk_fraction(0.3)
    assert robot.next_chunk_fraction_send_tick(0.3) == 7
    robot.advance_to(0.65)
    assert robot.queue_end - robot.action_index == 4
    assert not robot.wants_to_send_chunk_fraction(0.3)
    robot.advance_to(0.75)
    assert robot.wants_to_send_chunk_fraction(0.3)
    assert robot.next_chunk_fraction_send_tick(0.3) == 8
    # At zero, only an empty queue sends.
    assert not robot.wants_to_send_chunk_fraction(0.0)
    assert robot.next_chunk_fraction_send_tick(0.0) == 10


def test_round_trip_is_a_moving_average() -> None:
    """The first measurement is taken as is; later ones move it a quarter of the way."""
    robot = make_robot()
    robot.record_round_trip(0.2)
    assert robot.round_trip_s == pytest.approx(0.2)
    robot.record_round_trip(0.6)
    assert robot.round_trip_s == pytest.approx(0.3)
