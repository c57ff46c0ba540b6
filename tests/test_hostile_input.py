"""One robot can never hurt another: numbers out of range, a failing scheduler, parked
requests. Engine-level (no sockets); each test pairs the hostile robot with a good one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest
from armory_client import ARMORY_KEY, RobotState, attach
from server_harness import expected_actions, make_mock, make_obs
from test_engine import armory_state, make_engine, run

from armory.core.errors import ObservationError, QueueStateError, RequestTimeout
from armory.engine.queue_mirror import QueueMirror, QueueReport, RobotLimits
from armory.engine.server_engine import ServerEngine
from armory.engine.session import RequestPlan
from armory.scheduling.base import Scheduler
from armory.scheduling.max_batch import MaxBatchScheduler
from armory.scheduling.registry import make_scheduler, scheduler_names
from armory.scheduling.snapshot import Batch, Snapshot

LIMITS = RobotLimits(control_hz=20.0, min_execution_horizon=1, max_execution_horizon=10)


def wire_state(name: str, **fields: Any) -> dict[str, Any]:
    """An ``__armory__`` map as a hostile robot may send it (no client-side checks)."""
    return {**armory_state(name).to_wire(), **fields}


async def serve_good(engine: ServerEngine, name: str = "good", step: int = 0) -> np.ndarray:
    session = engine.open_session(peer=name)
    obs = attach(make_obs(0, step), armory_state(name))
    reply = await engine.infer(session, obs, received_s=engine.clock())
    return reply.actions


# ---- sane ranges --------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("control_hz", 1e308),
        ("control_hz", 5e-324),
        ("control_hz", float("nan")),
        ("weight", 1e308),
        ("weight", 1e-300),
        ("action_index", 2**63),
        ("actions_left", 2**63 - 1),
        ("chunk_start", 2**64),
        ("max_execution_horizon", 10**6),
        ("episode_id", 2**20000),
        ("round_trip_s", 1e300),
        ("defer_after_s", 1e-9),
    ],
    ids=lambda value: (
        f"{value:.3}"
        if isinstance(value, float)
        else f"{value.bit_length()}bits"
        if isinstance(value, int)
        else None
    ),
)
def test_numbers_outside_the_sane_ranges_are_refused(field: str, value: Any) -> None:
    """Every number of the state map has a documented range; outside it, a ValueError
    naming the field, without printing a huge value."""
    with pytest.raises(ValueError, match=f"RobotState.{field} must be") as info:
        RobotState.from_wire(wire_state("a", **{field: value}))
    assert len(str(info.value)) < 200


def test_an_index_past_the_range_together_with_its_queue_is_refused() -> None:
    """action_index + actions_left must stay below 2**53 too."""
    with pytest.raises(ValueError, match="action_index \\+ actions_left"):
        armory_state("a", action_index=2**52, actions_left=2**52)


def test_the_mirror_refuses_an_overflowing_report_without_changing_anything() -> None:
    """An index that does not fit int64 is refused before the row changes: the robot
    holds no observation afterwards and the snapshot is as before."""
    mirror = QueueMirror()
    mirror.add(1, LIMITS, now_s=0.0)
    before = mirror.snapshot(0.0, np.zeros(2), 1)
    for report in (
        QueueReport(action_index=2**64, actions_left=0),
        QueueReport(action_index=0, actions_left=2**63),
        QueueReport(action_index=5, actions_left=1, chunk_start=2**63),
    ):
        with pytest.raises(ValueError, match="must be in"):
            mirror.observe(1, report, now_s=1.0)
    after = mirror.snapshot(0.0, np.zeros(2), 1)
    assert not mirror.is_eligible(1)
    for name in ("deadline_s", "obs_time_s", "eligible"):
        np.testing.assert_array_equal(getattr(before, name), getattr(after, name))
    with pytest.raises(ValueError, match="control_hz"):
        mirror.update_limits(1, RobotLimits(1e308, 1, 10))
    assert mirror.snapshot(0.0, np.zeros(2), 1).control_hz.tolist() == [20.0]


def test_an_overflowing_plan_is_refused_and_the_next_robot_is_served() -> None:
    """BatchLoop.submit checks the plan before touching the mirror: the bad robot gets a
    QueueStateError, and a robot after it is served (no poisoned mirror)."""

    async def scenario() -> np.ndarray:
        engine = make_engine()
        await engine.start()
        try:
            bad = engine.open_session(peer="bad")
            plan = RequestPlan(
                limits=LIMITS, report=QueueReport(action_index=2**63, actions_left=0), reset=False
            )
            with pytest.raises(QueueStateError, match="out of range: action_index"):
                engine.loop.submit(bad.engine_id, plan, make_obs(1), received_s=engine.clock())
            with pytest.raises(QueueStateError, match="action_index must be in"):
                engine.accept(
                    bad,
                    {**make_obs(1), ARMORY_KEY: wire_state("bad", action_index=2**63)},
                    received_s=engine.clock(),
                )
            return await serve_good(engine)
        finally:
            await engine.stop()

    np.testing.assert_array_equal(run(scenario), expected_actions(make_mock(), make_obs(0)))


def test_nan_or_inf_float_inputs_are_refused() -> None:
    """A float input holding NaN or inf is a bad observation, named by its key (the
    mock's optional rtc_prefix too); the good robot is served."""

    async def scenario() -> np.ndarray:
        engine = make_engine()
        await engine.start()
        try:
            for key, value in (
                ("observation/state", np.array([np.nan] + [0.0] * 7, np.float32)),
                ("observation/state", np.full(8, np.inf)),
                ("rtc_prefix", np.full((2, 7), np.nan, np.float32)),
            ):
                session = engine.open_session(peer=key)
                obs = {**make_obs(1), key: value}
                if key == "rtc_prefix":
                    obs["rtc_delay"] = np.int64(2)
                with pytest.raises(ObservationError, match=f"{key!r}.*(NaN|inf)"):
                    await engine.infer(session, obs, received_s=engine.clock())
            return await serve_good(engine)
        finally:
            await engine.stop()

    np.testing.assert_array_equal(run(scenario), expected_actions(make_mock(), make_obs(0)))


def test_a_bad_rtc_entry_is_refused_at_accept_before_any_batch() -> None:
    """With a soft RTC schedule, an rtc_delay past the prefix or a non-integer one is
    refused as the observation is accepted, naming it (the policy's check_observation),
    so it never joins a batch with other robots; the good robot is served."""
    policy = make_mock(rtc_schedule="linear")
    seen: list[int] = []
    infer_batch = policy.infer_batch

    def counting(observations: Any) -> Any:
        seen.append(len(observations))
        return infer_batch(observations)

    policy.infer_batch = counting  # type: ignore[method-assign]

    async def scenario() -> np.ndarray:
        engine = make_engine(policy)
        await engine.start()
        try:
            prefix = np.zeros((2, 7), np.float32)
            for delay, match in ((np.int64(5), "rtc_delay 5 is outside"), (1.5, "integer")):
                session = engine.open_session(peer=f"bad-{delay}")
                obs = {**make_obs(1), "rtc_prefix": prefix, "rtc_delay": delay}
                with pytest.raises(ObservationError, match=match):
                    engine.accept(session, obs, received_s=engine.clock())
            assert seen == []  # refused before the batch loop saw it
            return await serve_good(engine)
        finally:
            await engine.stop()

    actions = run(scenario)
    assert seen and actions.shape == expected_actions(make_mock(), make_obs(0)).shape


# ---- a server-side deadline for every request ------------------------------------


def test_a_request_no_batch_takes_is_refused_after_the_request_timeout() -> None:
    """A robot whose reported queue is huge is never due under just-in-time: its request
    is withdrawn after --server.request-timeout-s with a clear error, while a good robot
    is served; the withdrawn robot may ask again."""

    async def scenario() -> float:
        engine = make_engine(scheduler="just-in-time", request_timeout_s=0.3)
        await engine.start()
        try:
            parked = engine.open_session(peer="parked")
            obs = attach(make_obs(1), armory_state("parked", actions_left=2**40))
            started = time.monotonic()
            task = asyncio.ensure_future(engine.infer(parked, obs, received_s=engine.clock()))
            await serve_good(engine)
            with pytest.raises(RequestTimeout, match=r"--server\.request-timeout-s"):
                await task
            waited_s = time.monotonic() - started
            state = armory_state("parked", action_index=1, actions_left=0)
            await engine.infer(parked, attach(make_obs(1, 1), state), received_s=engine.clock())
            return waited_s
        finally:
            await engine.stop()

    assert 0.25 < run(scenario) < 2.0


# ---- fault isolation ---------------------------------------------------------------


class _PoisonedBy(Scheduler):
    """max-batch, but raises whenever a robot at ``poison_hz`` is in the snapshot (as a
    scheduler bug triggered by one robot's state would); ``always`` raises every time."""

    name = "poisoned"

    def __init__(self, poison_hz: float = 13.0, *, always: bool = False) -> None:
        self.poison_hz = poison_hz
        self.always = always
        self.inner = MaxBatchScheduler()

    def schedule(self, snapshot: Snapshot) -> Batch:
        if self.always or (snapshot.control_hz == self.poison_hz).any():
            raise FloatingPointError("linprog: inf in the constraints")
        return self.inner.schedule(snapshot)


def test_a_scheduler_failure_refuses_only_the_robot_that_caused_it() -> None:
    """The robot whose state makes the scheduler raise is found and refused; the five
    robots waiting with it are served, and later decisions are unaffected."""

    async def scenario() -> tuple[list[Any], int]:
        engine = make_engine(scheduler=_PoisonedBy(), max_batch_size=8)
        await engine.start()
        try:
            sessions = [engine.open_session(peer=f"p{i}") for i in range(6)]
            poison = engine.open_session(peer="poison")

            def good(i: int) -> Any:
                obs = attach(make_obs(i), armory_state(f"r{i}"))
                return engine.infer(sessions[i], obs, received_s=engine.clock())

            tasks = [good(i) for i in range(3)]
            tasks.append(
                engine.infer(
                    poison,
                    attach(make_obs(9), armory_state("poison", control_hz=13.0)),
                    received_s=engine.clock(),
                )
            )
            tasks += [good(i) for i in range(3, 6)]
            results = await asyncio.gather(*tasks, return_exceptions=True)
            results.append(await serve_good(engine, "later"))
            return results, engine.loop.stats().num_scheduler_faults
        finally:
            await engine.stop()

    results, faults = run(scenario)
    assert isinstance(results[3], QueueStateError)
    assert "scheduler failed on this robot's queue state" in str(results[3])
    good = [r for i, r in enumerate(results[:-1]) if i != 3]
    seeds = [0, 1, 2, 3, 4, 5]
    for reply, seed in zip(good, seeds, strict=True):
        np.testing.assert_array_equal(reply.actions, expected_actions(make_mock(), make_obs(seed)))
    assert faults >= 1


def test_a_scheduler_that_always_raises_falls_back_to_the_safe_rule() -> None:
    """No single robot to blame: every decision takes max-batch's batch and is logged;
    every robot is served."""

    async def scenario() -> list[Any]:
        engine = make_engine(scheduler=_PoisonedBy(always=True), max_batch_size=2)
        await engine.start()
        try:
            sessions = [engine.open_session(peer=f"p{i}") for i in range(3)]
            return await asyncio.gather(
                *(
                    engine.infer(s, make_obs(i), received_s=engine.clock())
                    for i, s in enumerate(sessions)
                ),
                return_exceptions=True,
            )
        finally:
            await engine.stop()

    for i, reply in enumerate(run(scenario)):
        np.testing.assert_array_equal(reply.actions, expected_actions(make_mock(), make_obs(i)))


def test_shipped_schedulers_decide_with_robots_at_the_range_limits() -> None:
    """Robots at the extremes of every sane range do not make a shipped scheduler raise."""

    async def scenario(name: str) -> None:
        engine = make_engine(scheduler=make_scheduler(name), max_batch_size=4)
        await engine.start()
        try:
            states = [
                armory_state("slow", control_hz=0.01, weight=1e-6),
                armory_state("fast", control_hz=10_000.0, weight=1e6),
                armory_state("deep", actions_left=2**40, action_index=2**52),
            ]
            sessions = [engine.open_session(peer=s.robot_id) for s in states]
            tasks = [
                asyncio.ensure_future(
                    engine.infer(s, attach(make_obs(i), st), received_s=engine.clock())
                )
                for i, (s, st) in enumerate(zip(sessions, states, strict=True))
            ]
            await serve_good(engine)
            await asyncio.wait(tasks, timeout=0.5)
            for task in tasks:
                task.cancel()
            assert engine.loop.stats().num_scheduler_faults == 0
        finally:
            await engine.stop()

    for name in scheduler_names():
        run(lambda name=name: scenario(name))
