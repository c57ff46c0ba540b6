"""Per-robot activity from a robot's reports, in virtual time: starvation, queue depth,
latency, rows."""

from __future__ import annotations

import pytest

from armory.observe.robot_activity import RobotActivity

HZ = 10.0


def activity() -> RobotActivity:
    return RobotActivity(door="openpi", peer="127.0.0.1:1", name="conn-1", connected_s=0.0)


def report(a: RobotActivity, at_s: float, index: int, left: int, *, episode: int = 0) -> None:
    a.request(
        at_s,
        name="arm",
        control_hz=HZ,
        weight=1.0,
        max_execution_horizon=8,
        report=(index, left, index > 0 or at_s > 0, episode),
    )


def test_a_robot_that_never_starves_reads_zero() -> None:
    """Index advancing at the control rate between reports: no starvation."""
    a = activity()
    for k in range(10):
        report(a, 0.5 + 0.4 * k, 4 * k, 4)
    assert a.starvation() == pytest.approx(0.0)


def test_half_the_ticks_without_an_action_read_half() -> None:
    """Two actions per 0.4 s at 10 Hz (four ticks): half the ticks starved."""
    a = activity()
    for k in range(10):
        report(a, 0.5 + 0.4 * k, 2 * k, 0)
    assert a.starvation() == pytest.approx(0.5)
    row = a.row(now_s=5.0)
    assert row.starving and row.queue_depth_actions == 0 and row.robot == "arm"
    assert row.last_seen_s_ago == pytest.approx(5.0 - 4.1)


def test_a_new_episode_keeps_the_earlier_span() -> None:
    """An episode served fully, then one starved half the time, as long: a quarter."""
    a = activity()
    for k in range(6):
        report(a, 0.5 + 0.4 * k, 4 * k, 4)
    for k in range(6):
        report(a, 3.0 + 0.4 * k, 2 * k, 0, episode=1)
    assert a.starvation() == pytest.approx(0.25)


def test_start_up_and_plain_clients_have_no_estimate() -> None:
    """Before a tick's worth of reports, and for a plain client, starvation is unknown."""
    a = activity()
    report(a, 0.5, 0, 0)
    assert a.starvation() is None
    plain = activity()
    plain.request(
        0.1, name="conn-2", control_hz=HZ, weight=1.0, max_execution_horizon=8, report=None
    )
    row = plain.row(now_s=1.0)
    assert row.queue_depth_actions is None and row.starvation is None and not row.starving
    assert not row.named and a.row(now_s=1.0).named  # conn-N; the Armory robot's own id
    assert not activity().row(now_s=0.0).named  # before its first request


def test_latency_and_age_average_the_replies() -> None:
    """The row's latency follows the replies (moving average); sums keep every reply."""
    a = activity()
    report(a, 0.0, 0, 0)
    a.reply(0.1, 0.05)
    a.reply(0.1, 0.05)
    assert a.row(now_s=1.0).latency_ms == pytest.approx(100.0)
    assert a.latency_sum_s == pytest.approx(0.2) and a.num_chunks == 2
