"""QueueMirror: predicted deadlines, pending chunks, eligibility and membership.

The robot used throughout runs at 8 Hz (an action every 0.125 s, exact in binary)
with min horizon 2 and max horizon 6, so every deadline is exact.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from armory.core.latency_profile import LatencyProfile
from armory.engine.queue_mirror import NO_CHUNK, QueueMirror, QueueReport, RobotLimits
from armory.scheduling.snapshot import Snapshot


def make_limits(
    *,
    control_hz: float = 8.0,
    min_execution_horizon: int = 2,
    max_execution_horizon: int = 6,
    weight: float = 1.0,
    uplink_s: float = 0.0,
    downlink_s: float = 0.0,
) -> RobotLimits:
    """Limits of one robot; defaults: 8 Hz, min horizon 2, max horizon 6, instant links."""
    return RobotLimits(
        control_hz=control_hz,
        min_execution_horizon=min_execution_horizon,
        max_execution_horizon=max_execution_horizon,
        weight=weight,
        uplink_s=uplink_s,
        downlink_s=downlink_s,
    )


def make_mirror(robot_ids: tuple[int, ...] = (7,), capacity: int = 16, **limits) -> QueueMirror:
    """A mirror holding ``robot_ids`` (added at time 0) with the same limits."""
    mirror = QueueMirror(capacity=capacity)
    for robot_id in robot_ids:
        mirror.add(robot_id, make_limits(**limits), now_s=0.0)
    return mirror


def take_snapshot(mirror: QueueMirror, now_s: float = 0.0) -> Snapshot:
    """The mirror's snapshot with the l40s-pi05 latencies and batches of up to 4."""
    table = LatencyProfile.from_preset("l40s-pi05").table(4)
    return mirror.snapshot(now_s, table, 4)


def eligible_of(mirror: QueueMirror, robot_id: int) -> bool:
    """Whether the mirror's snapshot marks ``robot_id`` eligible."""
    snapshot = take_snapshot(mirror)
    return bool(snapshot.eligible[list(snapshot.robot_id).index(robot_id)])


# ---- deadlines ------------------------------------------------------------


def test_deadline_after_a_report_is_when_the_reported_queue_runs_dry() -> None:
    """Three actions left at 8 Hz, observation at 1.0 s: dry at 1.375 s."""
    mirror = make_mirror()
    assert mirror.observe(7, QueueReport(action_index=20, actions_left=3, chunk_start=18), 1.0)
    assert mirror.deadline_of(7) == pytest.approx(1.375)


def test_report_times_are_taken_back_by_the_expected_uplink() -> None:
    """With a 0.1 s uplink, a report arriving at 1.1 s was taken at 1.0 s."""
    mirror = make_mirror(uplink_s=0.1)
    mirror.observe(7, QueueReport(20, 3, 18), 1.1)
    assert mirror.deadline_of(7) == pytest.approx(1.375)
    assert take_snapshot(mirror, 1.1).obs_time_s[0] == pytest.approx(1.0)


def test_deadline_of_a_new_robot_is_its_arrival() -> None:
    """A robot without a chunk has nothing queued: its deadline is when it connected, and
    its empty reports keep it there (it has been dry since)."""
    mirror = QueueMirror()
    mirror.add(3, make_limits(), now_s=2.5)
    assert mirror.deadline_of(3) == 2.5
    mirror.observe(3, QueueReport(0, 0), 2.75)
    assert mirror.deadline_of(3) == 2.5


def test_a_dry_robot_keeps_the_deadline_it_ran_dry_at() -> None:
    """A robot first reports an empty queue at 2.0 s; its reports at 2.5 s and 3.0 s,
    empty too, leave its deadline at 2.0 s: it has waited dry since then."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    mirror.dispatch(7, land_s=1.25)
    mirror.observe(7, QueueReport(24, 0, 20), 2.0)
    assert mirror.deadline_of(7) == pytest.approx(2.0)
    mirror.observe(7, QueueReport(24, 0, 20), 2.5)
    mirror.observe(7, QueueReport(24, 0, 20), 3.0)
    assert mirror.deadline_of(7) == pytest.approx(2.0)


def test_dispatch_landing_before_the_queue_runs_dry_applies_the_replace_rule() -> None:
    """Landing at 1.25 s after 2 of 3 actions: a chunk from 20 holds 20..25, dry at 1.75 s."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    assert mirror.dispatch(7, land_s=1.25) == 20
    assert mirror.deadline_of(7) == pytest.approx(1.25 + 4 / 8)
    assert mirror.pending_of(7) == [(20, 1.25)]


def test_dispatch_landing_after_the_queue_runs_dry_yields_e_minus_d() -> None:
    """The queue ends at 23; landing at 2.0 s, d = 3 and the chunk adds 6 - 3 = 3 actions."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    mirror.dispatch(7, land_s=2.0)
    assert mirror.deadline_of(7) == pytest.approx(2.0 + 3 / 8)


def test_dispatch_to_an_idle_robot_yields_all_e() -> None:
    """A robot with nothing queued gets all six actions from the landing on."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(0, 0), 1.0)
    assert mirror.dispatch(7, land_s=1.5) == 0
    assert mirror.deadline_of(7) == pytest.approx(1.5 + 6 / 8)


def test_landing_predicted_before_the_report_counts_from_the_report() -> None:
    """A landing estimate older than the observation is taken as landing at the observation."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    mirror.dispatch(7, land_s=0.5)
    assert mirror.deadline_of(7) == pytest.approx(1.0 + 6 / 8)


def test_undispatch_predicts_the_queue_again_without_the_chunk() -> None:
    """A chunk from 20 in flight, then one from 21 dispatched and taken back (its batch
    never ran, after a report at 21): the deadline is the report's queue with only the
    first chunk, and index 21 is eligible again."""
    mirror = make_mirror(min_execution_horizon=1)
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    mirror.dispatch(7, land_s=1.25)
    mirror.observe(7, QueueReport(21, 2, 18), 1.125)
    with_first = mirror.deadline_of(7)
    assert mirror.dispatch(7, land_s=1.5) == 21
    assert not mirror.is_eligible(7)
    mirror.undispatch(7, 21, 1.5)
    assert mirror.pending_of(7) == [(20, 1.25)]
    assert mirror.deadline_of(7) == pytest.approx(with_first)
    assert mirror.is_eligible(7)


def test_report_that_does_not_show_the_chunk_keeps_it_pending() -> None:
    """A report from before the landing is replayed with the pending chunk applied on top."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    mirror.dispatch(7, land_s=1.25)
    assert mirror.observe(7, QueueReport(21, 2, 18), 1.125)
    assert mirror.pending_of(7) == [(20, 1.25)]
    # One action between 1.125 s and 1.25 s, then the chunk: queue 22..25.
    assert mirror.deadline_of(7) == pytest.approx(1.25 + 4 / 8)


def test_report_that_shows_the_chunk_clears_it_from_pending() -> None:
    """Once a report names the dispatched chunk as current, the report alone sets the deadline."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    mirror.dispatch(7, land_s=1.25)
    assert mirror.observe(7, QueueReport(22, 4, 20), 1.5)
    assert mirror.pending_of(7) == []
    assert mirror.deadline_of(7) == pytest.approx(2.0)


def test_report_showing_a_newer_chunk_clears_every_older_pending_one() -> None:
    """Two chunks in flight; a report showing the second clears both."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    mirror.dispatch(7, land_s=1.25)
    mirror.observe(7, QueueReport(22, 1, 18), 1.25)
    mirror.dispatch(7, land_s=1.5)
    assert [start for start, _ in mirror.pending_of(7)] == [20, 22]
    mirror.observe(7, QueueReport(23, 5, 22), 1.625)
    assert mirror.pending_of(7) == []
    assert mirror.deadline_of(7) == pytest.approx(1.625 + 5 / 8)


def test_older_observation_is_ignored() -> None:
    """A report from a smaller action index than the one held changes nothing."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    snapshot = take_snapshot(mirror)
    assert not mirror.observe(7, QueueReport(19, 4, 18), 1.1)
    assert mirror.deadline_of(7) == pytest.approx(1.375)
    after = take_snapshot(mirror)
    assert after.obs_time_s[0] == snapshot.obs_time_s[0]
    assert mirror.dispatch(7, land_s=1.25) == 20


def test_older_observation_at_the_same_index_is_ignored() -> None:
    """A starving robot's report from before a landing, arriving late, changes nothing."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(5, 0, 0), 1.0)
    mirror.dispatch(7, land_s=1.1)
    # The chunk from index 5 lands; the robot's next report (same index) arrives first...
    assert mirror.observe(7, QueueReport(5, 6, 5), 1.2)
    assert not eligible_of(mirror, 7)
    deadline = mirror.deadline_of(7)
    # ...then the report taken before the landing arrives: it is older and must be ignored.
    assert not mirror.observe(7, QueueReport(5, 0, 0), 1.25)
    assert mirror.deadline_of(7) == deadline
    assert not eligible_of(mirror, 7)


# ---- eligibility ----------------------------------------------------------


def test_robot_without_an_observation_is_not_eligible() -> None:
    """A robot that has only connected holds no observation to serve."""
    mirror = make_mirror()
    assert not eligible_of(mirror, 7)


def test_robot_without_a_chunk_is_eligible_once_it_reports() -> None:
    """The first observation of a robot with no chunk is eligible."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(0, 0, NO_CHUNK), 0.1)
    assert eligible_of(mirror, 7)


def test_eligibility_needs_the_min_horizon_past_the_playing_chunk() -> None:
    """With min horizon 2, index 19 on a chunk from 18 is not eligible, index 20 is."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(19, 5, 18), 1.0)
    assert not eligible_of(mirror, 7)
    mirror.observe(7, QueueReport(20, 4, 18), 1.125)
    assert eligible_of(mirror, 7)


def test_dispatched_robot_is_ineligible_until_min_horizon_past_the_dispatched_start() -> None:
    """After a dispatch from 20 the robot waits for an observation at index 22."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    assert eligible_of(mirror, 7)
    mirror.dispatch(7, land_s=1.25)
    assert not eligible_of(mirror, 7)
    mirror.observe(7, QueueReport(21, 2, 18), 1.125)  # chunk not landed yet
    assert not eligible_of(mirror, 7)
    mirror.observe(7, QueueReport(22, 4, 20), 1.375)
    assert eligible_of(mirror, 7)


def test_eligibility_counts_chunks_not_yet_reported() -> None:
    """A report that still shows the old chunk does not make the robot eligible again."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 14), 1.0)
    mirror.dispatch(7, land_s=1.25)
    mirror.observe(7, QueueReport(21, 2, 14), 1.125)  # 21 - 14 >= 2, but 21 - 20 < 2
    assert not eligible_of(mirror, 7)


# ---- membership -----------------------------------------------------------


def test_add_twice_is_an_error() -> None:
    """A robot id connects once."""
    mirror = make_mirror()
    with pytest.raises(ValueError, match="7"):
        mirror.add(7, make_limits(), now_s=1.0)


def test_remove_moves_the_last_robot_into_the_freed_row_intact() -> None:
    """Removing the first robot keeps every other robot's limits, report and pending chunks."""
    mirror = QueueMirror()
    mirror.add(10, make_limits(control_hz=8.0), now_s=0.0)
    mirror.add(11, make_limits(control_hz=4.0, weight=2.0), now_s=0.0)
    mirror.add(12, make_limits(control_hz=16.0, downlink_s=0.25), now_s=0.0)
    mirror.observe(10, QueueReport(3, 1, 0), 1.0)
    mirror.observe(11, QueueReport(6, 2, 4), 1.0)
    mirror.observe(12, QueueReport(9, 8, 8), 1.0)
    mirror.dispatch(12, land_s=1.25)
    deadlines = {i: mirror.deadline_of(i) for i in (11, 12)}
    mirror.remove(10)
    assert 10 not in mirror and 12 in mirror and len(mirror) == 2
    assert {i: mirror.deadline_of(i) for i in (11, 12)} == deadlines
    assert mirror.pending_of(12) == [(9, 1.25)]
    assert mirror.pending_of(11) == []
    snapshot = take_snapshot(mirror)
    assert snapshot.robot_id.tolist() == [12, 11]
    assert snapshot.control_hz.tolist() == [16.0, 4.0]
    assert snapshot.weight.tolist() == [1.0, 2.0]
    assert snapshot.downlink_s.tolist() == [0.25, 0.0]
    assert snapshot.contact_order.tolist() == [2, 1]
    assert snapshot.eligible.tolist() == [False, True]


def test_remove_the_last_row_and_add_again() -> None:
    """A robot that reconnects starts afresh, with a new contact rank."""
    mirror = make_mirror(robot_ids=(1, 2))
    mirror.observe(2, QueueReport(4, 4, 2), 1.0)
    mirror.remove(2)
    assert len(mirror) == 1
    mirror.add(2, make_limits(), now_s=3.0)
    assert mirror.deadline_of(2) == 3.0
    assert mirror.pending_of(2) == []
    snapshot = take_snapshot(mirror)
    assert snapshot.contact_order.tolist() == [0, 2]
    assert not snapshot.eligible.any()


def test_capacity_grows_without_losing_rows() -> None:
    """Starting at capacity 1, twenty robots keep their own reports."""
    mirror = make_mirror(robot_ids=(), capacity=1)
    for i in range(20):
        mirror.add(i, make_limits(), now_s=0.0)
        mirror.observe(i, QueueReport(10 * i, i % 5, 10 * i - 2), 1.0)
    assert len(mirror) == 20
    for i in range(20):
        # A robot that reports an empty queue has been dry since it was added.
        expected_s = 1.0 + (i % 5) / 8 if i % 5 else 0.0
        assert mirror.deadline_of(i) == pytest.approx(expected_s)
    snapshot = take_snapshot(mirror)
    assert snapshot.robot_id.tolist() == list(range(20))
    assert snapshot.eligible.all()


def test_snapshot_arrays_are_copies() -> None:
    """Writing into a snapshot leaves the mirror untouched."""
    mirror = make_mirror()
    mirror.observe(7, QueueReport(20, 3, 18), 1.0)
    snapshot = take_snapshot(mirror)
    snapshot.deadline_s[:] = -1.0
    snapshot.obs_time_s[:] = -1.0
    assert mirror.deadline_of(7) == pytest.approx(1.375)
    assert take_snapshot(mirror).obs_time_s[0] == 1.0


def test_snapshot_carries_the_limits_and_the_latency_table() -> None:
    """Snapshot columns hold what each robot declared, aligned by row."""
    mirror = QueueMirror()
    mirror.add(4, make_limits(control_hz=30.0, max_execution_horizon=12, weight=3.0), 0.0)
    mirror.add(9, make_limits(control_hz=10.0, max_execution_horizon=5, downlink_s=0.02), 0.0)
    snapshot = take_snapshot(mirror, now_s=0.5)
    assert snapshot.now_s == 0.5
    assert snapshot.num_robots == 2
    assert snapshot.max_execution_horizon.tolist() == [12, 5]
    assert snapshot.chunk_seconds() == pytest.approx([0.4, 0.5])
    assert snapshot.max_batch_size == 4
    np.testing.assert_allclose(snapshot.latency_table_s, [0.0, 0.070, 0.135, 0.195, 0.250])


def test_a_robot_that_asks_at_its_own_moment_shows_how_far_ahead_it_asks() -> None:
    """A threshold client's latest report says how many actions it still held when it
    asked (at most a chunk's worth); robots that stream or are directed ask when the
    server picks, and show none. The streaming column says which robots stream."""
    mirror = QueueMirror()
    mirror.add(1, make_limits(), 0.0)
    mirror.add(2, dataclasses.replace(make_limits(), streams=True), 0.0)
    mirror.add(3, dataclasses.replace(make_limits(), directed=True), 0.0)
    assert take_snapshot(mirror).asks_ahead.tolist() == [0, 0, 0]
    assert take_snapshot(mirror).streams.tolist() == [False, True, False]
    for robot_id in (1, 2, 3):
        mirror.observe(robot_id, QueueReport(action_index=10, actions_left=4, chunk_start=6), 1.0)
    assert take_snapshot(mirror, 1.0).asks_ahead.tolist() == [4, 0, 0]
    # A queue longer than a chunk (chunks that overlap) counts one chunk.
    mirror.observe(1, QueueReport(action_index=12, actions_left=9, chunk_start=11), 1.25)
    assert take_snapshot(mirror, 1.25).asks_ahead.tolist() == [6, 0, 0]
    # Updated limits keep or change the mode.
    mirror.update_limits(2, make_limits())
    mirror.observe(2, QueueReport(action_index=12, actions_left=3, chunk_start=11), 1.5)
    assert take_snapshot(mirror, 1.5).asks_ahead.tolist() == [6, 3, 0]
    assert take_snapshot(mirror, 1.5).streams.tolist() == [False, False, False]


def test_the_mirror_says_which_robots_play_their_chunks_out() -> None:
    """A robot asks only once its chunk is played out when its minimum execution horizon
    is its maximum (it may not be served before), or when it says so (the session's model
    of a plain openpi or GR00T client); a streaming or directed robot asks when the server
    picks whatever its horizons."""
    mirror = QueueMirror()
    mirror.add(1, make_limits(), 0.0)
    mirror.add(2, make_limits(min_execution_horizon=6, max_execution_horizon=6), 0.0)
    mirror.add(3, dataclasses.replace(make_limits(), plays_out=True), 0.0)
    full = make_limits(min_execution_horizon=6, max_execution_horizon=6)
    mirror.add(4, dataclasses.replace(full, streams=True), 0.0)
    mirror.add(5, dataclasses.replace(full, directed=True), 0.0)
    assert take_snapshot(mirror).plays_out.tolist() == [False, True, True, False, False]
    mirror.update_limits(2, make_limits())
    mirror.remove(1)
    snapshot = take_snapshot(mirror)
    by_robot = dict(zip(snapshot.robot_id.tolist(), snapshot.plays_out.tolist(), strict=True))
    assert by_robot == {2: False, 3: True, 4: False, 5: False}
