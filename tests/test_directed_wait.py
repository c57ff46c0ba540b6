"""Directed robots the scheduler keeps waiting dry are told to send holding fewer actions
than the usual lead, or once dry, so that their chunks lose no more of their queue than
the share of ticks the scheduler serves them is worth (docs/scheduling.md)."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
from factories import make_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from armory.core.latency_profile import LatencyProfile
from armory.engine.batch_loop import BatchLoop
from armory.engine.decision_step import DecisionStep
from armory.engine.fault_isolation import subset
from armory.engine.queue_mirror import QueueMirror, QueueReport, RobotLimits
from armory.engine.session import directed_lead_s, held_lead_s
from armory.scheduling.just_in_time import JustInTimeScheduler
from armory.scheduling.registry import make_scheduler
from armory.scheduling.snapshot import Snapshot
from armory.sim.fleet_family import generate_fleet
from armory.sim.simulator import SimConfig, simulate


def overloaded(directed: bool) -> object:
    """Eight dry robots at 20 Hz, horizon 6 for robots 0-3 and 10 for 4-7 (weight 5), on
    l40s-pi05: past capacity; the fluid optimum serves the heavy robots in full and the
    others in part."""
    snapshot = make_snapshot(
        [0.9] * 8,
        now_s=1.0,
        max_execution_horizon=[6] * 4 + [10] * 4,
        weight=[1.0] * 4 + [5.0] * 4,
        obs_time_s=0.98,
    )
    return dataclasses.replace(snapshot, directed=np.full(8, directed))


def test_directed_robots_served_in_part_are_held_at_their_share() -> None:
    """Over capacity, the directed robots the optimum serves in part are held, at a share
    below one; robots that do not follow directions never are, nor are any under
    capacity, nor any under a scheduler that does not hold robots."""
    shares = JustInTimeScheduler().held_shares(overloaded(directed=True))
    assert np.all(shares[:4] < 1.0) and np.all(shares[:4] >= 0.0)
    assert shares[4:].tolist() == [1.0] * 4
    assert np.all(JustInTimeScheduler().held_shares(overloaded(directed=False)) == 1.0)
    light = dataclasses.replace(make_snapshot([0.3, 0.31]), directed=np.ones(2, dtype=bool))
    assert np.all(JustInTimeScheduler().held_shares(light) == 1.0)
    assert np.all(make_scheduler("max-batch").held_shares(overloaded(directed=True)) == 1.0)


def test_a_held_robot_holds_what_its_share_is_worth() -> None:
    """A robot of horizon E = 20 at 20 Hz whose round trip holds m = 8 ticks: served in
    full it holds the round trip; at E / (E + m) or less (what sending once dry gives) it
    sends once dry; between, x = m - (E - m)(1 - share) / (2 share - 1) actions, rounded
    down; a chunk worth no more than its round trip is asked for once dry."""
    limits = RobotLimits(20.0, 1, 20, directed=True)
    round_trip_s = 0.4
    assert held_lead_s(limits, 1.0, round_trip_s) == pytest.approx(0.4)
    assert held_lead_s(limits, 20 / 28, round_trip_s) == 0.0
    assert held_lead_s(limits, 0.3, round_trip_s) == 0.0
    # share 0.8: cut = 12 * 0.2 / 0.6 = 4, x = 4 actions (0.2 s); 0.9: cut 1.5, x = 6.
    assert held_lead_s(limits, 0.8, round_trip_s) == pytest.approx(0.2)
    assert held_lead_s(limits, 0.9, round_trip_s) == pytest.approx(0.3)
    short = RobotLimits(20.0, 1, 8, directed=True)
    assert held_lead_s(short, 0.95, round_trip_s) == 0.0
    # Served in full, the usual lead; held, the held lead of the same round trip.
    profile = LatencyProfile({1: 0.3})
    linked = dataclasses.replace(limits, uplink_s=0.05, downlink_s=0.05)
    assert directed_lead_s(linked, profile, 1.0, 4, 0.05) == pytest.approx(0.45)
    assert directed_lead_s(linked, profile, 1.0, 4, 0.05, held_share=0.8) == pytest.approx(0.2)


@settings(max_examples=300, deadline=None)
@given(
    control_hz=st.floats(1.0, 100.0),
    horizon=st.integers(1, 60),
    round_trip_s=st.floats(0.0, 1.0),
    shares=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=2),
)
def test_a_held_lead_lies_between_once_dry_and_the_round_trip_and_grows_with_the_share(
    control_hz: float, horizon: int, round_trip_s: float, shares: list[float]
) -> None:
    """Whatever the robot and share: whole actions, never negative, never more than the
    round trip (nor the horizon), and a larger share never holds less."""
    limits = RobotLimits(control_hz, 1, horizon, directed=True)
    low, high = sorted(shares)
    leads = [held_lead_s(limits, share, round_trip_s) for share in (low, high)]
    for lead_s in leads:
        actions = lead_s * control_hz
        assert actions == pytest.approx(round(actions), abs=1e-6)
        assert 0.0 <= lead_s <= round_trip_s + 1e-9
        assert actions <= horizon
    assert leads[0] <= leads[1] + 1e-12


def test_a_held_directed_robot_waits_what_its_observation_leaves_of_the_chunk() -> None:
    """fluid-share's dry wait for a directed robot served a share phi: a chunk from an
    observation taken once dry plays E ticks, then the robot waits E (1/phi - 1); one
    taken holding x actions plays E - x and waits (E - x)(1/phi - 1)."""
    snapshot = dataclasses.replace(
        make_snapshot([1.0, 1.0], now_s=1.0, obs_time_s=[1.0, 0.8]),
        directed=np.ones(2, dtype=bool),
    )
    gaps = JustInTimeScheduler()._fluid_gaps(snapshot, np.array([0.8, 0.8]))
    # Horizon 10 at 20 Hz (0.5 s); the second held 4 actions (0.2 s): 0.3 s of the chunk.
    assert gaps.tolist() == pytest.approx([0.5 * 0.25, 0.3 * 0.25])


def test_held_robots_of_a_near_capacity_fleet_hold_part_of_their_queue() -> None:
    """mixed-00118 of the family's training seeds (16 robots at 50 Hz, links of 85 ms with
    77 ms of jitter): sending once dry costs each chunk a whole round trip standing still
    (32.7% starved); holding the actions the fluid share is worth, 23.5%, with at most 1.5
    observations per chunk."""
    fleet = generate_fleet("mixed", 118).fleet
    config = SimConfig(duration_s=20.0, seed=118)

    class SendOnceDry(JustInTimeScheduler):
        def held_shares(self, snapshot: Snapshot) -> np.ndarray:
            shares = super().held_shares(snapshot)
            return np.where(shares < 1.0, 0.0, 1.0)

    def run(scheduler: JustInTimeScheduler) -> tuple[float, float]:
        report = simulate(fleet, scheduler, config)
        sent = sum(r.requests_per_s for r in report.robots) * config.duration_s
        return report.system.starvation, sent / sum(r.inferences for r in report.robots)

    held, per_chunk = run(JustInTimeScheduler())
    once_dry, _ = run(SendOnceDry())
    assert held < once_dry - 0.05
    assert per_chunk <= 1.5


def test_the_mirror_carries_who_follows_directions() -> None:
    """A robot's declared directed mode reaches the snapshot."""
    mirror = QueueMirror()
    mirror.add(1, RobotLimits(20.0, 1, 10, directed=True), now_s=0.0)
    mirror.add(2, RobotLimits(20.0, 1, 10), now_s=0.0)
    mirror.observe(1, QueueReport(0, 0), 0.0)
    snapshot = mirror.snapshot(0.0, np.array([0.0, 0.05]), 1)
    assert snapshot.directed.tolist() == [True, False]


def test_directed_mode_over_capacity_keeps_up_with_every_tick() -> None:
    """mixed-00005 of the family's training seeds (103 robots, 1.3x capacity): sending once
    dry where the scheduler keeps a robot waiting, directed mode starves no more than
    every-tick (26.0% against 27.4%) with one observation per chunk instead of 22; without
    it (fluid-share off) directed mode starves 36%: its robots send at their lead and
    send again only when deferred as they run dry."""
    fleet = generate_fleet("mixed", 5).fleet
    config = SimConfig(duration_s=20.0, seed=0)

    def run(mode: str, **options: object) -> tuple[float, float]:
        report = simulate(
            dataclasses.replace(fleet, request_mode=mode), JustInTimeScheduler(**options), config
        )
        sent = sum(r.requests_per_s for r in report.robots) * config.duration_s
        return report.system.starvation, sent / sum(r.inferences for r in report.robots)

    directed, per_chunk = run("directed")
    every_tick, _ = run("every-tick")
    assert directed <= every_tick + 0.01 and per_chunk <= 1.5
    assert run("directed", disabled_rules=("fluid-share",))[0] > directed + 0.05


def test_a_scheduler_failing_to_advise_leaves_robots_their_usual_lead() -> None:
    """held_shares is advice: a scheduler that raises there, or answers with shares out
    of range or of the wrong length, holds no robot and fails no request."""

    class Raising(JustInTimeScheduler):
        def held_shares(self, snapshot: Snapshot) -> np.ndarray:
            raise RuntimeError("boom")

    class OutOfRange(JustInTimeScheduler):
        def held_shares(self, snapshot: Snapshot) -> np.ndarray:
            return np.full(snapshot.num_robots, -0.5)

    class TooShort(JustInTimeScheduler):
        def held_shares(self, snapshot: Snapshot) -> np.ndarray:
            return np.zeros(snapshot.num_robots + 1)

    async def check(scheduler: JustInTimeScheduler) -> float:
        loop = BatchLoop(
            executor=None,  # type: ignore[arg-type]
            scheduler=scheduler,
            profile=LatencyProfile({1: 0.05}),
            max_batch_size=4,
        )
        loop.mirror.add(3, RobotLimits(20.0, 1, 10, directed=True), now_s=0.0)
        return loop.held_share(3)

    for scheduler in (Raising(), OutOfRange(), TooShort()):
        assert asyncio.run(check(scheduler)) == 1.0
    # What the log says names the robot and the share.
    mirror = QueueMirror()
    mirror.add(3, RobotLimits(20.0, 1, 10, directed=True), now_s=0.0)
    mirror.observe(3, QueueReport(0, 0), 0.0)
    step = DecisionStep(mirror, OutOfRange(), LatencyProfile({1: 0.05}), max_batch_size=4)
    with pytest.raises(ValueError, match=r"1 shares outside \[0, 1\], robot 3's -0.5"):
        step.held_shares(0.0)


def test_a_snapshot_without_directed_robots_can_be_split_to_find_a_culprit() -> None:
    """Fault isolation takes subsets of a snapshot whose optional per-robot field is
    absent (no robot directed) as well as present."""
    plain = make_snapshot([0.5, 0.6, 0.7])
    assert subset(plain, np.array([0, 2])).robot_id.tolist() == [0, 2]
    directed = dataclasses.replace(plain, directed=np.array([True, False, True]))
    assert subset(directed, np.array([1, 2])).directed.tolist() == [False, True]
