"""Rollouts: the tick-exact model of an every-tick fleet, against hand counts and the
simulator, and just-in-time's use of it over capacity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from factories import make_snapshot

from armory.engine.latency_profile import LatencyProfile
from armory.fleet_spec import load_fleet
from armory.scheduling.base import Scheduler
from armory.scheduling.just_in_time import JustInTimeScheduler
from armory.scheduling.rollout import Continuation, FleetModel
from armory.scheduling.rollout_checks import best_cadence, steady_cadence
from armory.scheduling.snapshot import Batch, Snapshot
from armory.sim.simulator import SimConfig, Simulator, simulate

PAPER_FLEETS = Path(__file__).resolve().parents[1] / "configs" / "fleets" / "paper"

WITHOUT_FLUID_SHARE = ("fluid-share",)
"""The over-capacity rules these tests pin down, as they decide without fluid-share
(which takes streaming fleets over capacity first: tests/test_fluid_share.py)."""


def test_a_chunk_landing_on_a_dry_robot_costs_the_ticks_until_it_lands() -> None:
    """One robot at 20 Hz ticking at 0.0, 0.05, ...; its last action ran at 1.0 s and
    its observation from that tick is held. A batch of one starting now (1.006 s)
    lands at 1.006 + 0.070 + 0.005 = 1.081 s: the ticks at 1.05 s starves, the chunk's
    10 actions run from 1.10 s to 1.55 s, and the robot is dry again from 1.60 s."""
    snapshot = make_snapshot([1.0], now_s=1.006, obs_time_s=1.0)
    model = FleetModel(snapshot)
    nobody = Continuation("deadline", 0)
    assert model.starved([0], nobody, horizon_s=0.5) == 1  # 1.05 s
    assert model.starved([0], nobody, horizon_s=0.7) == 1 + 3  # and 1.60, 1.65, 1.70 s
    # Weighted: the same ticks count three times for a robot weighing 3.
    heavy = FleetModel(make_snapshot([1.0], now_s=1.006, obs_time_s=1.0, weight=3.0))
    assert heavy.starved([0], nobody, horizon_s=0.5) == 3


def test_a_chunk_landing_in_time_replaces_the_queue_from_its_observation_on() -> None:
    """Two actions left (dry after the tick at 1.10 s), observation from 1.0 s: the chunk
    lands at 1.081 s and holds actions up to 1.0 + 10 ticks = 1.50 s."""
    snapshot = make_snapshot([1.1], now_s=1.006, obs_time_s=1.0)
    model = FleetModel(snapshot)
    nobody = Continuation("deadline", 0)
    assert model.starved([0], nobody, horizon_s=0.5) == 0
    assert model.starved([0], nobody, horizon_s=0.6) == 2  # 1.55 and 1.60 s
    # Without the chunk it starves from 1.15 s on.
    assert model.starved([], nobody, horizon_s=0.5) == 8


def test_a_play_stops_at_its_limit_with_a_count_between_the_limit_and_the_full_one() -> None:
    """A play that reaches ``limit`` returns early with at least ``limit`` (and never
    more than the full count); one that stays below returns the full count."""
    snapshot = make_snapshot([1.0, 1.02, 1.04], now_s=1.006, obs_time_s=1.0)
    model = FleetModel(snapshot)
    alone = Continuation("deadline", 1)
    full = model.starved([0], alone, horizon_s=2.0)
    assert full > 4
    assert model.starved([0], alone, horizon_s=2.0, limit=full + 1) == full
    stopped = model.starved([0], alone, horizon_s=2.0, limit=2)
    assert 2 <= stopped < full  # it stopped early


class _InDeadlineOrder(Scheduler):
    """Back-to-back batches of a fixed size, earliest deadline first, remembering one
    snapshot taken after start-up."""

    name = "fixed-size"

    def __init__(self, size: int) -> None:
        self.size = size
        self.snapshot: Snapshot | None = None

    def schedule(self, snapshot: Snapshot) -> Batch:
        rows = np.flatnonzero(snapshot.eligible)
        if self.snapshot is None and snapshot.now_s > 5.0:
            self.snapshot = snapshot
        order = rows[np.argsort(snapshot.deadline_s[rows], kind="stable")]
        return Batch(tuple(snapshot.robot_id[order[: self.size]].tolist()))


@pytest.mark.parametrize(
    ("fleet", "size"),
    [
        ("l40s-pi05-homogeneous-8", 1),
        ("l40s-pi05-homogeneous-8", 2),
        ("l40s-pi05-paper-half-fast-4-w1", 3),
    ],
)
def test_the_model_plays_a_fleet_as_the_simulator_does(fleet: str, size: int) -> None:
    """From a snapshot 5 s into a simulated run, the model playing the same policy for
    60 s gives the simulator's weighted throughput within 1%."""
    spec = load_fleet(PAPER_FLEETS / f"{fleet}.yaml")
    scheduler = _InDeadlineOrder(size)
    report = Simulator(spec, scheduler, SimConfig(duration_s=65.0, seed=0)).run()
    snapshot = scheduler.snapshot
    assert snapshot is not None
    rows = np.flatnonzero(snapshot.eligible)
    first = rows[np.argsort(snapshot.deadline_s[rows], kind="stable")][:size].tolist()
    horizon_s = 60.0
    starved = FleetModel(snapshot).starved(first, Continuation("deadline", size), horizon_s)
    ticks = float((snapshot.weight * snapshot.control_hz).sum()) * horizon_s
    modelled = (ticks - starved) / horizon_s
    assert modelled == pytest.approx(report.system.weighted_throughput, rel=0.01)


def test_just_in_time_rolls_out_only_over_capacity_with_streaming_robots() -> None:
    """Eight robots at horizon 6 and 10, weights 3 and 1, all dry: over capacity and
    every plan late. With rollouts off the decision is the rule's; with robots whose
    observations are older than a tick and a link (they do not stream), rollouts are
    not used either."""

    def snapshot(obs_time_s: float) -> Snapshot:
        return make_snapshot(
            [0.9] * 8,
            now_s=1.0,
            max_batch_size=5,
            weight=[3.0] * 4 + [1.0] * 4,
            max_execution_horizon=[6] * 4 + [10] * 4,
            obs_time_s=obs_time_s,
            latency_table_s=np.array([0.0, 0.070, 0.135, 0.195, 0.250, 0.305]),
        )

    streaming, stale = snapshot(0.98), snapshot(0.90)
    rule = JustInTimeScheduler(
        rollout_horizon_s=0.0, cadence_horizon_s=0.0, disabled_rules=WITHOUT_FLUID_SHARE
    )
    rolled = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE)
    assert rule._rule(streaming)[1]  # over capacity, every plan late
    assert rolled._streams_every_tick(streaming)
    assert not rolled._streams_every_tick(stale)
    assert rolled.schedule(stale) == rule.schedule(stale)
    assert not JustInTimeScheduler(
        rollout_max_robots=7, disabled_rules=WITHOUT_FLUID_SHARE
    )._streams_every_tick(streaming)


def test_rollouts_lower_starvation_on_a_weighted_fleet_over_capacity() -> None:
    """l40s-pi05-half-fast-6-w3: the rule alone feeds the heavy robots early and starves
    the others almost completely; checked by rollouts it starves far less and buys more
    weighted motion (20 s, seed 0)."""
    fleet = load_fleet(PAPER_FLEETS / "l40s-pi05-half-fast-6-w3.yaml")
    config = SimConfig(duration_s=20.0, seed=0)
    alone = JustInTimeScheduler(
        rollout_horizon_s=0.0, cadence_horizon_s=0.0, disabled_rules=WITHOUT_FLUID_SHARE
    )
    rule = simulate(fleet, alone, config).system
    rolled = simulate(
        fleet,
        JustInTimeScheduler(cadence_horizon_s=0.0, disabled_rules=WITHOUT_FLUID_SHARE),
        config,
    ).system
    assert rolled.starvation < rule.starvation - 0.15
    assert rolled.weighted_throughput > rule.weighted_throughput
    # A steady cadence played longer does better still there (20.6% -> 16.6%;
    # docs/scheduling.md).
    both = simulate(fleet, JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE), config).system
    assert both.starvation < rolled.starvation - 0.03
    assert both.weighted_throughput > rolled.weighted_throughput


def test_a_steady_cadence_keeps_a_fleet_that_fits_fed() -> None:
    """l40s-pi05-paper-half-fast-4-w1 fits (its bound is zero), but the rule's singles
    and pairs, each on time for one round, cost more GPU per chunk than it can
    sustain: alone it starves. Checking the rule's batch against back-to-back batches
    of its size, and taking a steady cadence of triples instead, nobody starves
    (20 s, seeds 0-2)."""
    fleet = load_fleet(PAPER_FLEETS / "l40s-pi05-paper-half-fast-4-w1.yaml")
    rule_starved, cadence_starved = [], []
    for seed in range(3):
        config = SimConfig(duration_s=20.0, seed=seed)
        rule = simulate(
            fleet,
            JustInTimeScheduler(cadence_horizon_s=0.0, disabled_rules=WITHOUT_FLUID_SHARE),
            config,
        )
        rule_starved.append(rule.system.starvation)
        cadence_starved.append(
            simulate(
                fleet, JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE), config
            ).system.starvation
        )
    assert max(rule_starved) > 0.003
    assert cadence_starved == [0.0, 0.0, 0.0]
    # Each check has its own switch: without rollouts over capacity it still holds.
    no_rollouts = JustInTimeScheduler(rollout_horizon_s=0.0, disabled_rules=WITHOUT_FLUID_SHARE)
    assert simulate(fleet, no_rollouts, SimConfig(duration_s=20.0)).system.starvation == 0.0


def test_a_steady_cadence_replaces_a_batch_whose_size_would_starve_a_robot() -> None:
    """Two robots at horizon 6 and two at 10 under the paper profile, observations from
    the tick at 1.0 s. Played back-to-back over 1.5 s, singles starve 2 ticks, pairs 6,
    triples none, batches of 4 8: a single gives way to the first triple by deadline;
    a triple stands; and where no size starves nobody the rule's batch stands."""
    table = LatencyProfile.from_preset("l40s-pi05-paper").table(4)

    def snapshot(deadline_s: list[float]) -> Snapshot:
        return make_snapshot(
            deadline_s,
            now_s=1.006,
            obs_time_s=1.0,
            max_execution_horizon=[6, 6, 10, 10],
            latency_table_s=table,
        )

    fits = snapshot([1.15, 1.15, 1.25, 1.35])
    model = FleetModel(fits)
    starved = [
        model.starved(tuple(range(size)), Continuation("deadline", size), 1.5)
        for size in range(1, 5)
    ]
    assert starved == [2, 6, 0, 8]
    assert steady_cadence(fits, Batch((0,)), horizon_s=1.5).robot_ids == (0, 1, 2)
    assert steady_cadence(fits, Batch((0, 1, 2)), horizon_s=1.5).robot_ids == (0, 1, 2)
    # Deadlines 50 ms earlier for robots 0, 2 and 3: every size starves somebody.
    tight = snapshot([1.10, 1.15, 1.20, 1.30])
    assert steady_cadence(tight, Batch((0,)), horizon_s=1.5).robot_ids == (0,)


def test_over_capacity_a_steady_cadence_replaces_a_batch_that_starves_more() -> None:
    """Eight robots alike, all dry, over capacity (l40s-pi05, max batch 4). Played
    back-to-back over 1.5 s in deadline order, singles starve 70 weighted ticks,
    pairs 80, triples 86, quads 101; the rule's pair at best 79 (continued by the
    overload rule's sizes). The first single replaces it; a single stands."""
    ages_s = [0.045, 0.015, 0.025, 0.035, 0.030, 0.040, 0.020, 0.010]
    obs_time_s = [1.0 - age for age in ages_s]
    fleet = make_snapshot(obs_time_s, now_s=1.0, obs_time_s=obs_time_s, max_batch_size=4)
    model = FleetModel(fleet)
    order = [0, 5, 3, 4, 2, 6, 1, 7]  # by deadline: the longest dry first
    starved = [
        model.starved(tuple(order[:size]), Continuation("deadline", size), 1.5)
        for size in range(1, 5)
    ]
    assert starved == [70, 80, 86, 101]
    alone = JustInTimeScheduler(
        rollout_horizon_s=0.0, cadence_horizon_s=0.0, disabled_rules=WITHOUT_FLUID_SHARE
    )
    assert alone.schedule(fleet).robot_ids == (0, 5)

    def check(batch: Batch) -> Batch:
        return best_cadence(fleet, batch, horizon_s=1.5, margin=0.5, sizes_used=(1, 2))

    assert check(Batch((0, 5))).robot_ids == (0,)
    assert check(Batch((0,))).robot_ids == (0,)
    assert JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE).schedule(fleet).robot_ids == (0,)
