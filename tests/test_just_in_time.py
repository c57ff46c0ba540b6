"""just-in-time (the default): serve each robot as late as is safe while the fleet fits;
over capacity, spend the GPU where a chunk buys the most weighted motion."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from factories import make_snapshot, random_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from armory.core.latency_profile import LatencyProfile, LinearProfileConfig
from armory.fleet_spec import DelaySpec, FleetSpec, RobotGroup
from armory.scheduling import fluid_mix
from armory.scheduling.fluid import solve_fluid
from armory.scheduling.just_in_time import JustInTimeScheduler, _batch_numbers, candidate_sizes
from armory.scheduling.max_batch import MaxBatchScheduler
from armory.scheduling.round_robin import RoundRobinScheduler
from armory.sim.simulator import SimConfig, simulate

# Defaults of make_snapshot: 20 Hz, 10-action chunks, 5 ms downlink, the l40s-pi05 table
# (1 -> 0.070 s, 2 -> 0.135 s, 3 -> 0.195 s, 4 -> 0.250 s). The scheduler's margin is
# 4 ms + half a tick of the fastest robot: 0.029 s.
MARGIN_S = 0.004 + 0.5 / 20

PAPER_FLEETS = Path(__file__).resolve().parents[1] / "configs" / "fleets" / "paper"

WITHOUT_FLUID_SHARE = ("fluid-share",)
"""The over-capacity rules these tests pin down, as they decide without fluid-share
(which takes streaming fleets over capacity first: tests/test_scheduler_properties.py)."""


def rule() -> JustInTimeScheduler:
    """The scheduler without fluid-share, whose over-capacity rule these cases pin down."""
    return JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE)


def test_a_robot_with_time_to_spare_waits_for_its_latest_start() -> None:
    """Due at 0.995 s (deadline less downlink), one forward pass of 0.070 s and the margin:
    nothing starts before 0.896 s."""
    batch = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE).schedule(make_snapshot([1.0]))
    assert batch.robot_ids == ()
    assert batch.wait_until_s == pytest.approx(0.995 - 0.070 - MARGIN_S)


def test_directed_robots_are_not_held_for_their_latest_start() -> None:
    """With time to spare, robots that stream are held for the plan's latest start (their
    next observations are fresher); directed robots are served at once, since theirs came
    when the server asked and grow no fresher. One streaming robot beside them keeps the
    wait; a lone directed robot is served at once too."""
    scheduler = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE)
    streaming = make_snapshot([1.0, 1.2])
    assert scheduler.schedule(streaming).rule == "wait"
    directed = dataclasses.replace(streaming, directed=np.array([True, True]))
    batch = scheduler.schedule(directed)
    assert batch.robot_ids and batch.rule == "on-time" and batch.wait_until_s is None
    mixed = dataclasses.replace(streaming, directed=np.array([True, False]))
    assert scheduler.schedule(mixed).rule == "wait"
    alone = dataclasses.replace(make_snapshot([1.0]), directed=np.array([True]))
    assert scheduler.schedule(alone).robot_ids == (0,)


def test_a_robot_that_cannot_wait_is_served_at_once() -> None:
    batch = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE).schedule(
        make_snapshot([0.08, 2.0])
    )
    assert batch.robot_ids == (0,)
    assert batch.wait_until_s is None


def test_robots_due_together_are_batched_when_singles_would_leave_one_late() -> None:
    """Both due at 0.163 s: one after the other the second finishes at 0.169 s with the
    margin; together (0.135 s) both are only 1 ms late."""
    batch = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE).schedule(
        make_snapshot([0.168, 0.168, 3.0])
    )
    assert batch.robot_ids == (0, 1)


def test_an_ineligible_robot_shapes_the_plan_but_never_rides() -> None:
    """Robot 0 is due first but cannot be served yet: the plan still keeps its turn, and
    only eligible robot 1 is dispatched."""
    batch = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE).schedule(
        make_snapshot([0.05, 0.09], eligible=[False, True])
    )
    assert batch.robot_ids == (1,)


def test_a_robot_whose_request_is_on_its_way_rides_the_second_batch_at_the_earliest() -> None:
    """Robot 2 is due first (0.26 s) but its observation has not arrived. Were it to ride
    the first batch, a pair started at 0.001 s would keep everyone on time; it cannot, and
    after a pair (0.135 s) its own batch would finish at 0.270 s, late. A single now
    (0.070 s) lets its batch finish at 0.140 s; only robot 3, last, is 9 ms late."""
    snapshot = make_snapshot([0.305, 0.305, 0.265, 0.305], eligible=[True, True, False, True])
    batch = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE).schedule(snapshot)
    assert batch.robot_ids == (0,)


@settings(max_examples=200, deadline=None)
@given(eligible=st.lists(st.booleans(), min_size=1, max_size=60), data=st.data())
def test_the_plan_fills_its_first_batch_with_eligible_robots_and_the_rest_in_due_order(
    eligible: list[bool], data: st.DataObject
) -> None:
    """Per candidate size: the first batch is the first eligible robots in due order;
    every other robot, eligible or not, follows in due order, each batch full before the
    next."""
    in_due_order = np.array(eligible)
    if not in_due_order.any():
        in_due_order[0] = True
    max_size = data.draw(st.integers(1, int(in_due_order.sum())))
    numbers = _batch_numbers(in_due_order, max_size)
    for size, row in zip(candidate_sizes(max_size), numbers, strict=True):
        first = np.flatnonzero(row == 1)
        assert first.tolist() == np.flatnonzero(in_due_order)[:size].tolist()
        rest = row[row != 1]
        assert rest.tolist() == (2 + np.arange(rest.size) // size).tolist()


@settings(max_examples=300, deadline=None)
@given(
    now_s=st.floats(0.0, 1e4),
    ahead_s=st.floats(-2.0, 2.0),
    control_hz=st.floats(1.0, 200.0),
    weight=st.floats(0.1, 10.0),
    downlink_s=st.floats(0.0, 0.3),
    latency_s=st.floats(1e-4, 0.5),
    max_batch_size=st.integers(1, 4),
    wait=st.booleans(),
    directed=st.booleans(),
)
def test_one_robot_is_decided_in_scalars_as_the_plan_decides_it(
    now_s: float,
    ahead_s: float,
    control_hz: float,
    weight: float,
    downlink_s: float,
    latency_s: float,
    max_batch_size: int,
    wait: bool,
    directed: bool,
) -> None:
    """A fleet of one robot takes a shortcut; it decides what the whole plan decides:
    the same batch or the same wait, and the same rule."""
    snapshot = make_snapshot(
        [now_s + ahead_s],
        now_s=now_s,
        control_hz=control_hz,
        weight=weight,
        downlink_s=downlink_s,
        max_batch_size=max_batch_size,
        latency_table_s=[0.0, *(latency_s * (1 + 0.5 * b) for b in range(max_batch_size))],
    )
    snapshot = dataclasses.replace(snapshot, directed=np.array([directed]))
    scheduler = JustInTimeScheduler(disabled_rules=() if wait else ("wait",))
    assert scheduler.schedule(snapshot) == scheduler._rule(snapshot, None)


def test_robots_already_late_go_by_the_ticks_they_lose_per_second() -> None:
    """Both robots' chunks are overdue: each second of delay starves the 40 Hz robot 40
    ticks and the 10 Hz one 10, so the 40 Hz robot goes first although its queue ran dry
    later. A robot not yet due keeps its turn by due time."""
    overdue = make_snapshot([-0.1, -0.05], control_hz=[10.0, 40.0], max_batch_size=1)
    assert JustInTimeScheduler().schedule(overdue).robot_ids == (1,)
    one_overdue = make_snapshot([-0.01, 0.5], control_hz=[10.0, 40.0], max_batch_size=1)
    assert JustInTimeScheduler().schedule(one_overdue).robot_ids == (0,)


def test_robots_go_by_the_tick_that_would_first_find_their_queues_empty() -> None:
    """The 5 Hz robot plays its last action at 0.10 s and the 60 Hz one at 0.12 s, but the
    first tick to find each queue empty comes a period later: 0.30 s and 0.137 s. The 60
    Hz robot rides first; the 5 Hz robot's chunk (finishing at 0.152 s with the margin)
    is then late against its deadline, which keeps that period as slack, so nothing
    waits. By deadline alone the 5 Hz robot would ride first and the 60 Hz one be late."""
    snapshot = make_snapshot([0.10, 0.12], control_hz=[5.0, 60.0], max_batch_size=1)
    batch = JustInTimeScheduler().schedule(snapshot)
    assert batch.robot_ids == (1,)
    assert batch.rule == "on-time"


def overloaded(weight: float | list[float] = 1.0, **overrides: object) -> object:
    """Eight robots at 20 Hz, all dry now: more than the l40s-pi05 GPU serves (six
    would just fit, one at a time)."""
    options: dict[str, object] = {"now_s": 1.0, "weight": weight, "obs_time_s": 0.98}
    options.update(overrides)
    deadline_s = options.pop("deadline_s", [1.0] * 8)
    return make_snapshot(deadline_s, **options)  # type: ignore[arg-type]


def test_over_capacity_the_heavy_robot_rides_first() -> None:
    """Robot 3 weighs 5. Over capacity the optimum runs batches of 1 and 2; a chunk for
    robot 3 alone buys 5 weighted chunks per 0.070 s, with a light robot beside it 6 per
    0.135 s: robot 3 goes alone."""
    batch = rule().schedule(overloaded([1, 1, 1, 5, 1, 1, 1, 1]))
    assert batch.robot_ids == (3,)


def test_over_capacity_equal_robots_fill_the_batch_size_the_optimum_uses() -> None:
    """All alike and all dry: the optimum's batches of 2 buy more chunks per second
    (2 / 0.135 s) than singles (1 / 0.070 s)."""
    batch = rule().schedule(overloaded())
    assert batch.robot_ids == (0, 1)


def test_over_capacity_robots_that_say_they_stream_get_dry_waits_whatever_their_age() -> None:
    """Eight robots over capacity, four dry with fresh observations and four holding 8
    actions whose newest observation is 0.3 s old (LeRobot clients send only once their
    queue runs short). Judged by age the four look like robots that ask once, which a dry
    wait would serve a stale observation, so `overload` decides; declared streaming (the
    mirror's column), they will send again when short, and `fluid-share` decides."""
    stale = overloaded(deadline_s=[1.0] * 4 + [1.4] * 4, obs_time_s=[0.98] * 4 + [0.7] * 4)
    assert JustInTimeScheduler().schedule(stale).rule == "overload"
    declared = dataclasses.replace(stale, streams=np.ones(8, dtype=bool))
    assert JustInTimeScheduler().schedule(declared).rule == "fluid-share"
    undeclared = dataclasses.replace(stale, streams=np.zeros(8, dtype=bool))
    assert JustInTimeScheduler().schedule(undeclared).rule == "overload"


def _counting_solves(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every fluid program solved from now on (memo cleared), once per optimum."""
    fluid_mix._solve.cache_clear()
    fluid_mix._one_size_feeds_all.cache_clear()
    solves: list[object] = []
    solve = fluid_mix.solve_fluid

    def counting_solve(*args: object, **kwargs: object) -> object:
        if not kwargs.get("expected_ticks"):
            solves.append(args)
        return solve(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fluid_mix, "solve_fluid", counting_solve)
    return solves


def test_the_fluid_optimum_is_a_pure_memo_of_the_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The optimum is solved once per fleet composition, latencies of the sizes it weighs
    (in 0.5% steps) and links (in 5 ms steps of round trip), and a decision never depends
    on what the scheduler saw before: a fresh scheduler decides the same."""
    solves = _counting_solves(monkeypatch)
    scheduler = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE)
    table = LatencyProfile.from_preset("l40s-pi05").table(4)
    weights = [1, 1, 1, 5, 1, 1, 1, 1]
    first = scheduler.schedule(overloaded(weights, latency_table_s=table))
    scheduler.schedule(overloaded(weights, latency_table_s=table))
    assert len(solves) == 1
    scheduler.schedule(overloaded(weights, latency_table_s=table * 1.05))
    assert len(solves) == 2
    scheduler.schedule(overloaded(weights, latency_table_s=table, downlink_s=0.010))
    assert len(solves) == 3
    fresh = JustInTimeScheduler(disabled_rules=WITHOUT_FLUID_SHARE)
    assert fresh.schedule(overloaded(weights, latency_table_s=table)) == first
    # Robots whose link estimates differ by noise are one class of the program.
    scheduler.schedule(
        overloaded(
            weights, downlink_s=[0.0051, 0.0049, 0.005, 0.0052, 0.0048, 0.005, 0.0053, 0.0047]
        )
    )
    rates = solves[-1][0]
    assert len(rates) == 2  # weight 1 and weight 5
    # With a max batch of 64 the program weighs 20 sizes, and a learned latency that
    # moves at any other size (45 here) solves nothing again.
    wide = LatencyProfile.from_preset("l40s-pi05").table(64)
    scheduler.schedule(overloaded(weights, latency_table_s=wide, max_batch_size=64))
    solved = len(solves)
    moved = wide.copy()
    moved[45] *= 1.05
    scheduler.schedule(overloaded(weights, latency_table_s=moved, max_batch_size=64))
    assert len(solves) == solved
    moved[54] *= 1.05
    scheduler.schedule(overloaded(weights, latency_table_s=moved, max_batch_size=64))
    assert len(solves) == solved + 1


def test_candidate_sizes_are_dense_to_16_then_geometric_to_the_max() -> None:
    assert candidate_sizes(4).tolist() == [1, 2, 3, 4]
    sizes = candidate_sizes(64)
    assert sizes[:16].tolist() == list(range(1, 17))
    assert sizes[-1] == 64 and np.all(np.diff(sizes) > 0)


def test_the_kept_candidate_sizes_cannot_be_changed_by_a_caller() -> None:
    """The sizes are kept between decisions: a caller that writes to them gets an error."""
    with pytest.raises(ValueError, match="read-only"):
        candidate_sizes(4)[0] = 7


def test_a_decision_does_not_depend_on_the_fleets_decided_before_it() -> None:
    """Plan layouts kept between decisions (by fleet size and max batch) never leak from
    one fleet into another: varied fleets decided in one order and then in the reverse
    order get the same batches."""
    rng = np.random.default_rng(11)
    snapshots = [random_snapshot(rng) for _ in range(120)]
    scheduler = JustInTimeScheduler()
    forward = [scheduler.schedule(s) for s in snapshots]
    backward = [scheduler.schedule(s) for s in reversed(snapshots)]
    assert forward == backward[::-1]
    assert {b.rule for b in forward} >= {"on-time", "wait"}


def test_over_capacity_batch_sizes_come_from_both_tick_charges() -> None:
    """One robot at horizon 6 and nine at 10, all dry. Charged the fewest ticks a chunk's
    window can hold, the fluid optimum runs only batches of 2; charged the ticks expected
    at a random phase, batches of 1 and 4. Among all three, four dry robots buy the most
    per second of forward pass (40 actions per 0.250 s, against 20 per 0.135 s)."""
    snapshot = make_snapshot(
        [0.9] * 10,
        now_s=1.0,
        max_batch_size=5,
        max_execution_horizon=[6] + [10] * 9,
        obs_time_s=0.98,
        latency_table_s=LatencyProfile.from_preset("l40s-pi05").table(5),
    )
    assert rule().schedule(snapshot).robot_ids == (1, 2, 3, 4)


def test_a_fleet_far_below_capacity_needs_no_linear_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two robots at 20 Hz and horizon 10 on l40s-pi05 (4 per 0.25 s): back-to-back
    batches of four feed them with room to spare, so the fits verdict needs no solve;
    eight dry robots are past capacity, and the program decides."""
    solves = _counting_solves(monkeypatch)
    light = make_snapshot([0.3, 0.31], now_s=0.0)
    assert fluid_mix.fluid_mix_unless_fed(light) is None
    assert JustInTimeScheduler()._fluid_optimum(light)[0]
    assert solves == []
    heavy = overloaded()
    assert fluid_mix.fluid_mix_unless_fed(heavy) is not None
    assert not JustInTimeScheduler()._fluid_optimum(heavy)[0]
    assert solves


def _short_chunks_beside_long(latency_table_s: object) -> object:
    """Three 5 Hz robots with 2-action chunks beside three 20 Hz robots with 10, 34 ms
    round trips, a max batch of 8."""
    return make_snapshot(
        [0.5] * 6,
        now_s=0.0,
        max_batch_size=8,
        control_hz=[5.0] * 3 + [20.0] * 3,
        max_execution_horizon=[2] * 3 + [10] * 3,
        downlink_s=0.017,
        latency_table_s=latency_table_s,
    )


def test_robots_with_chunks_shorter_than_a_round_trip_and_a_tick_need_no_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test fleet 1173 in small: 5 Hz robots with 2-action chunks beside 20 Hz robots
    with 10, 34 ms round trips, a pass of 40 ms + 10 ms per robot. A round trip holds
    none of a 5 Hz robot's ticks (0.42 of one), so each chunk adds both its actions and
    batches of any one size feed the fleet; the fits verdict needs no program. (Charged
    a whole tick more than its round trip holds, such a chunk added nothing, and the
    scheduler solved the program at nearly every decision of that fleet.)"""
    solves = _counting_solves(monkeypatch)
    snapshot = _short_chunks_beside_long([0.0] + [0.04 + 0.01 * b for b in range(1, 9)])
    assert fluid_mix.fluid_mix_unless_fed(snapshot) is None
    assert solves == []
    mix = fluid_mix.fluid_mix(snapshot)
    assert mix.fits and mix.share.tolist() == pytest.approx([1.0] * 6)


def test_a_robot_served_all_but_a_sliver_is_served_in_full() -> None:
    """Test fleet 1164 in small: 82 robots at 10 Hz with 1 s chunks, 30 ms links, a pass
    of 54 ms + 7.5 ms a robot, a max batch of 32. Over the sizes the program weighs
    (every size to 16, then 24 and 32) the optimum serves each robot 99.98% of its ticks:
    in full, so the fleet fits and the plan decides. (Counted as held, the fleet went
    over capacity with no dry wait for anyone, and ``overload`` ran batches of 32 where
    smaller ones keep the robots fed: 7.1% starved on that fleet's first draw against
    5.2%.)"""
    snapshot = make_snapshot(
        [0.1 + 0.1 * i / 82 for i in range(82)],
        now_s=0.0,
        max_batch_size=32,
        control_hz=10.0,
        max_execution_horizon=10,
        downlink_s=0.03,
        latency_table_s=[0.0] + [0.0537 + 0.0075 * b for b in range(1, 33)],
    )
    mix = fluid_mix.fluid_mix(snapshot)
    assert 1.0 - fluid_mix.IN_FULL_TOLERANCE < mix.share.min() < 1.0 - 1e-6
    assert mix.fits
    assert JustInTimeScheduler().schedule(snapshot).rule == "on-time"


def test_the_one_size_test_spares_the_program_only_where_it_serves_everyone_in_full() -> None:
    """Where back-to-back batches of one size feed every robot of the program, its
    optimum serves every robot in full, so skipping the solve decides as solving would:
    on fleets that fit and fleets that do not, some asking ahead, some far, some of tiny
    weight (down to 1e-5 of the others)."""
    rng = np.random.default_rng(7)
    answers = []
    for _ in range(300):
        snapshot = random_snapshot(rng)
        if snapshot.num_robots == 0:
            continue
        weight = snapshot.weight * 10.0 ** rng.uniform(-5, 0, snapshot.num_robots)
        snapshot = dataclasses.replace(
            snapshot,
            latency_table_s=snapshot.latency_table_s * rng.uniform(0.02, 1.5),
            asks_ahead=rng.integers(0, 12, snapshot.num_robots) * (rng.random() < 0.5),
            weight=weight if rng.random() < 0.3 else snapshot.weight,
            downlink_s=snapshot.downlink_s * rng.uniform(0.5, 10.0),
        )
        fed = fluid_mix.fluid_mix_unless_fed(snapshot) is None
        if fed:
            mix = fluid_mix.fluid_mix(snapshot)
            assert mix.share.min() >= 1.0 - 1e-6 and mix.fits
        answers.append(fed)
    assert 40 < sum(answers) < len(answers) - 40


def test_weights_are_relative_in_the_fluid_program() -> None:
    """5 Hz robots with 2-action chunks beside 20 Hz robots with 10, on l40s-pi05: over
    capacity, the optimum serves the 5 Hz robots 94% of their ticks. With every weight
    scaled by 1e-5 (the wire allows 1e-6 to 1e6), or by 1e3, it is the same optimum and
    the same decision. (The GPU's cost was once counted against absolute weights: at
    1e-5 a 2-action chunk was not worth its pass and the 5 Hz robots were abandoned.)"""
    snapshot = _short_chunks_beside_long(LatencyProfile.from_preset("l40s-pi05").table(8))
    share = fluid_mix.fluid_mix(snapshot).share
    assert share.tolist() == pytest.approx([0.94] * 3 + [1.0] * 3, abs=0.005)
    for scale in (1e-5, 1e3):
        scaled = dataclasses.replace(snapshot, weight=snapshot.weight * scale)
        np.testing.assert_allclose(fluid_mix.fluid_mix(scaled).share, share, atol=1e-9)
        assert rule().schedule(scaled) == rule().schedule(snapshot)


def test_link_estimates_that_differ_robot_to_robot_make_few_classes() -> None:
    """300 robots of one type whose link estimates spread over 3-150 ms (as a live server
    learns them) make at most 17 classes of the program: 5 ms steps to 40 ms of round
    trip, 25% steps beyond."""
    rng = np.random.default_rng(0)
    snapshot = make_snapshot(
        [0.5] * 300, downlink_s=rng.uniform(0.003, 0.150, 300).tolist(), max_batch_size=4
    )
    steps = fluid_mix.link_steps(2.0 * snapshot.downlink_s)
    assert len(np.unique(steps)) <= 17
    represented = fluid_mix.link_of_step(steps)
    assert np.all(np.abs(represented - 2.0 * snapshot.downlink_s) <= 0.125 * represented + 0.0025)


def test_wandering_link_estimates_keep_the_programs_classes_still() -> None:
    """300 robots of one type whose round-trip estimates wander over 10-90 ms, as a busy
    live server learns them, are one class of the program whatever each estimate reads;
    two far robots (about 300 ms) are a class of their own, and a second type its own."""
    rng = np.random.default_rng(1)

    def classes(round_trip_s: np.ndarray, hz: np.ndarray) -> set[tuple[float, ...]]:
        snapshot = make_snapshot(
            [0.5] * round_trip_s.size,
            downlink_s=(round_trip_s / 2).tolist(),
            control_hz=hz.tolist(),
            max_batch_size=4,
        )
        steps = fluid_mix.link_steps(fluid_mix._group_round_trips(snapshot))
        return set(zip(snapshot.control_hz.tolist(), steps.tolist(), strict=True))

    hz = np.array([20.0] * 300 + [20.0] * 2 + [30.0] * 50)
    seen = set()
    for _ in range(5):
        near = rng.uniform(0.01, 0.09, 300)
        far = rng.uniform(0.28, 0.32, 2)
        other = rng.uniform(0.01, 0.09, 50)
        found = classes(np.concatenate([near, far, other]), hz)
        assert len(found) == 3
        assert len({c for c in found if c[0] == 20.0}) == 2
        seen |= found
    assert len(seen) <= 6  # each group's mean moves a step now and then, no more


def test_the_programs_classes_are_the_distinct_rows_in_order() -> None:
    """The program's classes are the distinct (rate, horizon, link step, weight) rows in
    order, first column first, with each robot's class and each class's count, as
    ``np.unique(axis=0)`` gives them (and the program's class order with them)."""
    rng = np.random.default_rng(2)
    for _ in range(200):
        n = int(rng.integers(1, 400))
        columns = [rng.choice(rng.uniform(0.1, 60.0, int(rng.integers(1, 5))), n) for _ in range(4)]
        columns[2] = rng.integers(0, 30, n).astype(np.float64)
        rows = np.round(np.stack(columns, axis=1), 6)
        classes, counts, inverse = fluid_mix._classes(rows.tobytes())
        want, want_inverse, want_counts = np.unique(
            rows, axis=0, return_inverse=True, return_counts=True
        )
        assert classes == tuple(map(tuple, want.tolist()))
        assert counts == tuple(want_counts.tolist())
        assert np.array_equal(inverse, want_inverse.ravel())
        assert not inverse.flags.writeable


def test_a_robots_round_trip_share_is_all_while_its_chunk_outlasts_the_round_trip() -> None:
    """60 Hz, 10-action chunks: a 0.34 s round trip holds 20 ticks, so only chunks from
    observations taken once dry count, each played 10 ticks and waited for 20 (a third);
    at 20 Hz a 0.1 s round trip holds 2 ticks and every tick can be served."""
    share = fluid_mix.round_trip_share(
        np.array([60.0, 20.0]), np.array([10.0, 10.0]), np.array([0.34, 0.1])
    )
    assert share.tolist() == pytest.approx([1 / 3, 1.0])


def _far(num_robots: int) -> object:
    """Dry 60 Hz robots with 10-action chunks (1/6 s) and 136 ms links each way: each
    round trip (0.272 s and a pass of 0.06 s or more) holds more ticks than a chunk."""
    return make_snapshot(
        [0.0] * num_robots,
        now_s=0.0,
        control_hz=60.0,
        downlink_s=0.136,
        max_batch_size=8,
        latency_table_s=[0.0] + [0.05 + 0.01 * b for b in range(1, 9)],
    )


def test_robots_held_back_by_their_own_round_trips_do_not_put_the_fleet_over_capacity() -> None:
    """Three such robots need about 6 passes of 0.06 s a second: the GPU has room, and the
    optimum serves each the 10 of every 31 ticks its round trip allows (its link class
    stands for 0.298 s: 21 ticks held). Holding them dry would only add to that wait: the
    fleet fits and no robot gets a dry wait. Thirty of them are more than the GPU
    computes: the GPU holds them back."""
    few = _far(3)
    mix = fluid_mix.fluid_mix(few)
    assert fluid_mix.fluid_mix_unless_fed(few) is not None
    assert mix.share == pytest.approx([10 / 31] * 3, abs=1e-6)
    assert not mix.held.any() and mix.fits
    fits, _, share = JustInTimeScheduler()._fluid_optimum(few)
    assert fits and share.tolist() == [1.0] * 3
    assert JustInTimeScheduler().schedule(few).rule == "on-time"

    many = fluid_mix.fluid_mix(_far(30))
    assert many.held.all() and not many.fits
    assert JustInTimeScheduler().schedule(_far(30)).rule == "fluid-share"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_far_robots_with_short_chunks_starve_no_more_than_under_max_batch(seed: int) -> None:
    """Seven 60 Hz robots with 10-action chunks behind 136 +- 50 ms links (each round trip
    holds about 21 ticks): about two-thirds of their ticks starve whatever the scheduler
    does. Held dry as if the GPU were short, they starved 68-69% where max-batch, serving
    each as soon as it asks, starves 63%."""
    link = DelaySpec(0.136, 0.05)
    fleet = FleetSpec(
        name="far",
        robots=(
            RobotGroup(
                count=7, control_hz=60.0, max_execution_horizon=10, uplink=link, downlink=link
            ),
        ),
        action_horizon=10,
        max_batch_size=10,
        latency_profile="linear",
        linear=LinearProfileConfig(intercept_s=0.05, slope_s=0.01),
        latency_jitter=0.03,
    )
    config = SimConfig(duration_s=10.0, seed=seed)
    ours = simulate(fleet, JustInTimeScheduler(), config).system.starvation
    baseline = simulate(fleet, MaxBatchScheduler(), config).system.starvation
    assert ours <= baseline + 0.01


def test_of_optima_alike_the_fluid_program_abandons_no_robot_it_need_not() -> None:
    """50 robots at 40 Hz and 151 at 50 Hz, 33-action chunks, one weight, a GPU too small
    for all: every split of the GPU's chunks between the two classes moves as many
    actions, and the program alone (HiGHS) gives the 40 Hz robots none. Valuing the least share
    as well, it serves both classes alike, at the same total."""
    args = (
        np.array([40.0, 50.0]),
        np.array([33.0, 33.0]),
        np.array([0.02, 0.0656]),
        np.array([0.05 + 0.01 * b for b in range(1, 17)]),
    )
    kwargs = {"count": np.array([50.0, 151.0]), "gpu_cost": fluid_mix.GPU_COST}
    plain = solve_fluid(*args, **kwargs)
    even = solve_fluid(*args, **kwargs, evenness=fluid_mix.EVENNESS)
    plain_share = plain.actions_per_s / args[0]
    even_share = even.actions_per_s / args[0]
    assert even_share.min() >= plain_share.min()  # the plain program's vertex: 0 and 0.33
    assert even_share == pytest.approx([even_share[0]] * 2) and even_share[0] > 0.25
    total = kwargs["count"] @ plain.actions_per_s
    assert kwargs["count"] @ even.actions_per_s == pytest.approx(total, rel=1e-9)


def test_over_capacity_with_one_weight_and_singles_a_chunk_goes_where_it_adds_most() -> None:
    """Three 5 Hz robots with 2-action chunks beside six 25 Hz and two 20 Hz robots with
    14, one weight, on a GPU whose optimum runs batches of one. The slow robots ran dry
    half a second ago and asked then (threshold clients: not streaming); the fast ones
    run dry in 20 ms. A chunk adds 2 actions to a slow robot, 13.25 to a 25 Hz one and
    13.4 to a 20 Hz one (robots 9 and 10). The optimum serves the slow robots less than
    a tenth of their ticks; due order would serve them first."""
    table = LatencyProfile({1: 0.05353, 2: 0.10324, 3: 0.14912, 4: 0.19118}).table(32)
    snapshot = make_snapshot(
        [0.5] * 3 + [1.02] * 8,
        now_s=1.0,
        obs_time_s=[0.5] * 3 + [0.99] * 8,
        max_batch_size=32,
        control_hz=[5.0] * 3 + [25.0] * 6 + [20.0] * 2,
        max_execution_horizon=[2] * 3 + [14] * 8,
        downlink_s=[0.003] * 3 + [0.064] * 6 + [0.002] * 2,
        latency_table_s=table,
    )
    mix = fluid_mix.fluid_mix(snapshot)
    assert not mix.fits and mix.sizes.tolist() == [1]
    batch = JustInTimeScheduler().schedule(snapshot)
    assert batch.rule == "overload"
    assert batch.robot_ids == (9,)


def _group(count: int, hz: float, horizons: tuple[int, int], link: DelaySpec) -> RobotGroup:
    """``count`` robots at ``hz`` with (min, max) execution ``horizons``, ``link`` each way."""
    return RobotGroup(
        count=count,
        control_hz=hz,
        min_execution_horizon=horizons[0],
        max_execution_horizon=horizons[1],
        uplink=link,
        downlink=link,
    )


def _threshold_fleet(
    name: str,
    groups: tuple[RobotGroup, ...],
    *,
    max_batch_size: int,
    latency_points: dict[int, float],
    latency_jitter: float,
) -> FleetSpec:
    """A fleet of threshold clients on a profile through ``latency_points``, whose action
    horizon is its longest chunk."""
    return FleetSpec(
        name=name,
        robots=groups,
        action_horizon=max(g.max_execution_horizon for g in groups),
        max_batch_size=max_batch_size,
        latency_profile="linear",
        latency_points=latency_points,
        latency_jitter=latency_jitter,
        request_mode="threshold",
    )


def test_slow_robots_with_short_chunks_do_not_take_the_gpu_from_the_rest() -> None:
    """The fleet of the case above over 20 s of threshold requests (test fleet 1142 of
    the mixed family): served in due order it starved 46.5% of its ticks, max-batch 36%."""

    fleet = _threshold_fleet(
        "slow-beside-fast",
        (
            _group(6, 25.0, (6, 14), DelaySpec(0.0643, 0.0179)),
            _group(3, 5.0, (1, 2), DelaySpec(0.0031, 0.0016)),
            _group(2, 20.0, (8, 14), DelaySpec(0.0023, 0.0005)),
        ),
        max_batch_size=32,
        latency_points={1: 0.05353, 2: 0.10324, 3: 0.14912, 4: 0.19118},
        latency_jitter=0.031,
    )
    config = SimConfig(duration_s=20.0, seed=1142)
    ours = simulate(fleet, JustInTimeScheduler(), config).system.starvation
    baseline = simulate(fleet, MaxBatchScheduler(), config).system.starvation
    assert ours < baseline - 0.05


def test_robots_that_ask_ahead_need_more_chunks_than_their_horizons_say() -> None:
    """Three 20 Hz robots with 10-action chunks fit the GPU (about 3.3 chunks a second
    each, batches of three a little over 15 a second). Threshold clients that ask while
    they still hold 7 actions get about 3 new ones a chunk, and need twice the chunks:
    the fleet is over capacity."""
    fits = make_snapshot([1.0] * 3, now_s=0.9, max_batch_size=3)
    assert fluid_mix.fluid_mix(fits).fits
    asks = dataclasses.replace(fits, asks_ahead=np.full(3, 7))
    assert fluid_mix.fluid_mix_unless_fed(asks) is not None
    assert not fluid_mix.fluid_mix(asks).fits
    # Robots that ask nothing ahead are the robots of before.
    none = dataclasses.replace(fits, asks_ahead=np.zeros(3, dtype=np.int64))
    for a, b in zip(
        dataclasses.astuple(fluid_mix.fluid_mix(none)),
        dataclasses.astuple(fluid_mix.fluid_mix(fits)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


def test_threshold_robots_are_not_served_into_a_spiral() -> None:
    """Test fleet 1140 of the mixed family: 77 threshold robots at 5-30 Hz on a near-flat
    profile, below capacity by their horizons. Held to their due times, each chunk landed
    on a dry queue and its client asked ever earlier, until the GPU ran short of what the
    robots' horizons promised: 7.5% starved over 10 s where round-robin, which answers in
    turn, starved 1.7%. Charged what its clients hold when they ask, the fleet is over
    capacity by the fluid program, and served as such."""

    fleet = _threshold_fleet(
        "threshold-spiral",
        (
            _group(11, 5.0, (1, 2), DelaySpec(0.0022, 0.002)),
            _group(17, 10.0, (3, 7), DelaySpec(0.0018, 0.001)),
            _group(34, 15.0, (2, 11), DelaySpec(0.0292, 0.0075)),
            _group(15, 30.0, (11, 30), DelaySpec(0.019, 0.0004)),
        ),
        max_batch_size=16,
        latency_points={1: 0.07826, 2: 0.07925},
        latency_jitter=0.087,
    )
    config = SimConfig(duration_s=10.0, seed=1140)
    ours = simulate(fleet, JustInTimeScheduler(), config).system.starvation
    baseline = simulate(fleet, RoundRobinScheduler(), config).system.starvation
    assert ours <= baseline + 0.005


def test_over_capacity_robots_that_ask_once_played_out_get_dry_waits() -> None:
    """Eight robots over capacity whose clients asked once their chunks were played out
    (openpi's runtime), each observation taken dry 0.15 s ago. Judged by age they look
    like robots that ask once at their own moment, whose clients would count a dry wait
    into their round trips and ask earlier still, so `overload` decides; declared to play
    their chunks out (the mirror's column), a wait costs them nothing more than it costs
    the GPU, and `fluid-share` decides. One that held actions when it asked is not so."""
    dry = overloaded(deadline_s=[0.85] * 8, obs_time_s=[0.85] * 8)
    assert JustInTimeScheduler().schedule(dry).rule == "overload"
    played_out = dataclasses.replace(dry, plays_out=np.ones(8, dtype=bool))
    assert JustInTimeScheduler().schedule(played_out).rule == "fluid-share"
    holding = dataclasses.replace(played_out, deadline_s=np.full(8, 1.0))
    assert JustInTimeScheduler().schedule(holding).rule == "overload"


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_robots_that_play_their_chunks_out_are_shared_as_the_optimum_says(seed: int) -> None:
    """Training fleet 1 of the mixed family with openpi-like clients (each asks only once
    its chunk is played out), 1.4x capacity on a flat profile: ranked by what a chunk adds
    (the long chunks first), the fleet fell into bursts that drained the queue and ran
    batches of one, 33.8% starved where max-batch starves 27.5% (seed 1); given the
    optimum's dry waits it runs full batches, within the goal's half a point of it."""
    fleet = _threshold_fleet(
        "played-out",
        (
            _group(16, 30.0, (29, 29), DelaySpec(0.0082, 0.0034)),
            _group(17, 40.0, (16, 16), DelaySpec(0.0271, 0.0251)),
        ),
        max_batch_size=4,
        latency_points={1: 0.09218, 2: 0.09308},
        latency_jitter=0.053,
    )
    config = SimConfig(duration_s=20.0, seed=seed)
    ours = simulate(fleet, JustInTimeScheduler(), config).system.starvation
    baseline = simulate(fleet, MaxBatchScheduler(), config).system.starvation
    assert ours <= baseline + 0.005
