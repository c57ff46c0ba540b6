"""RobotRuntime's action path on virtual time: merge rules, the safety layer, image
preparation and the trace (fakes from test_armory_client_runtime)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import numpy as np
import pytest
from armory_client import (
    ARMORY_KEY,
    ActionQueue,
    RequestTimeout,
    RobotRuntime,
    SafetyConfig,
    SafetyStop,
)
from test_armory_client_runtime import (
    PERIOD_S,
    E,
    FakeClient,
    FakeClock,
    FakeRobot,
    assert_actions_match_indices,
    chunk,
    make_config,
    run_runtime,
)


class RecordingClient(FakeClient):
    """A FakeClient that keeps every observation map and may declare a metadata frame;
    with `offset_per_request` each reply's values are shifted by that much per request."""

    def __init__(
        self,
        clock: FakeClock,
        *,
        metadata: dict[str, Any] | None = None,
        offset_per_request: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(clock, **kwargs)
        if metadata is not None:
            self.metadata = metadata
        self.offset_per_request = offset_per_request
        self.observations: list[dict[str, Any]] = []

    async def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.observations.append(obs)
        reply = await super().infer(obs)
        reply["actions"] = reply["actions"] + self.offset_per_request * (len(self.requests) - 1)
        return reply


def image_metadata(*, jpeg: bool = False) -> dict[str, Any]:
    """A metadata frame declaring one 8x8 RGB image (and a state vector)."""
    image: dict[str, Any] = {"shape": [8, 8, 3], "dtype": "uint8", "required": True}
    if jpeg:
        image["jpeg"] = True
    return {
        "action_horizon": 20,
        "inputs": {
            "image": image,
            "state": {"shape": [3], "dtype": "float32", "required": True},
        },
    }


def one_chunk_then_failures(clock: FakeClock) -> FakeClient:
    """A client whose first request is answered and every later one times out."""
    client = FakeClient(clock)
    client.failures = []
    original = client.infer

    async def infer(obs: dict[str, Any]) -> dict[str, Any]:
        if client.requests:
            client.failures = [RequestTimeout("down")]
        return await original(obs)

    client.infer = infer  # type: ignore[method-assign]
    return client


# ---- merge rules --------------------------------------------------------------


def test_merge_rule_defaults_to_replace_and_unknown_names_list_the_valid_ones() -> None:
    """The config's merge rule is replace unless named; a bad name lists every rule."""
    assert make_config().merge_rule == "replace"
    with pytest.raises(ValueError, match="weighted_average"):
        make_config(merge_rule="blend")


def test_merge_options_configure_the_rule() -> None:
    """RuntimeConfig.merge_options reach the runtime's rule; an option the rule does not
    take, or a bad value, is refused when the config is made."""
    config = make_config(
        merge_rule="temporal_ensemble", merge_options={"decay": 0.05, "max_predictions": 200}
    )
    runtime = RobotRuntime(FakeRobot(FakeClock()), FakeClient(FakeClock()), config)
    rule = runtime.queue.merge_rule
    assert (rule.name, rule.decay, rule.max_predictions) == ("temporal_ensemble", 0.05, 200)
    with pytest.raises(ValueError, match=r"merge rule 'replace': bad options \['decay'\]"):
        make_config(merge_options={"decay": 0.05})
    with pytest.raises(ValueError, match="decay must be a finite number"):
        make_config(merge_rule="temporal_ensemble", merge_options={"decay": -1.0})


def test_action_queue_blends_with_the_named_rule() -> None:
    """weighted_average: 0.3 old + 0.7 new on the overlap, the new rows after it."""
    queue = ActionQueue(max_execution_horizon=4, merge_rule="weighted_average")
    queue.apply(np.zeros((4, 2), np.float32), 0)
    queue.pop()
    assert queue.apply(np.ones((4, 2), np.float32), 1) == 4
    np.testing.assert_allclose(queue.queued.actions[:, 0], [0.7, 0.7, 0.7, 1.0], rtol=1e-6)
    assert queue.chunk_start == 1
    assert queue.apply(np.ones((4, 2), np.float32), 0) == 0  # older: dropped
    assert queue.num_chunks_dropped == 1


def test_action_queue_reset_starts_a_new_merge_episode() -> None:
    """After reset the rule sees an empty queue at index 0 (nothing is blended in)."""
    queue = ActionQueue(max_execution_horizon=4, merge_rule="average")
    queue.apply(np.zeros((4, 2), np.float32), 0)
    queue.reset()
    queue.apply(np.ones((4, 2), np.float32), 0)
    np.testing.assert_array_equal(queue.queued.actions, np.ones((4, 2)))


@pytest.mark.parametrize(
    "rule", ["replace", "latest_only", "weighted_average", "average", "temporal_ensemble", "rtc"]
)
def test_every_rule_plays_agreeing_chunks_on_their_indices(rule: str) -> None:
    """Chunks that agree on every index merge to the same actions under every rule."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    config = make_config(request_mode="threshold", merge_rule=rule)
    runtime, summary = run_runtime(clock, robot, client, config)
    assert runtime.queue.merge_rule.name == rule
    assert summary.num_chunks_applied >= 5
    assert_actions_match_indices(robot)


def test_runtime_blends_disagreeing_chunks_by_the_rule() -> None:
    """Chunks shifted by 1 per request, landing on a non-empty queue: replace plays
    whole values, average blends in halves."""
    played = {}
    for rule in ("replace", "average"):
        clock = FakeClock()
        robot = FakeRobot(clock)
        client = RecordingClient(clock, delay_s=2.5 * PERIOD_S, offset_per_request=1.0)
        config = make_config(request_mode="threshold", merge_rule=rule, threshold_margin_s=0.05)
        run_runtime(clock, robot, client, config)
        played[rule] = np.array(robot.actions)
    assert np.all(played["replace"] == np.round(played["replace"]))
    assert np.any(played["average"] % 1 == 0.5)


def test_rtc_requests_carry_the_frozen_actions() -> None:
    """With rtc each request after the first round trip freezes ceil(rtt * hz) queued
    actions and sends them and the rest of the queue; play stays on its indices."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = RecordingClient(clock, delay_s=2.5 * PERIOD_S)
    config = make_config(request_mode="threshold", merge_rule="rtc", threshold_margin_s=0.02)
    run_runtime(clock, robot, client, config)
    later = [obs for obs in client.observations[1:] if obs["rtc_delay"] > 0]
    assert later
    for obs in later:
        k = obs[ARMORY_KEY]["action_index"]
        d = obs["rtc_delay"]
        assert d == 4  # ceil(0.025 s * 100 Hz) + rtc_margin_ticks (1)
        np.testing.assert_array_equal(obs["rtc_prefix"], chunk(k, d))
        # The remainder is left off the wire when the whole queue is frozen.
        remainder = obs.get("rtc_remainder", chunk(k + d, 0))
        np.testing.assert_array_equal(remainder, chunk(k + d, len(remainder)))
    assert_actions_match_indices(robot)


def test_rtc_plays_the_frozen_actions_when_chunks_disagree() -> None:
    """A server that ignores rtc_prefix and whose chunks disagree (each shifted by 1000
    per request): every request's frozen actions are still the ones played at their
    indices, in the first episode and the next."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = RecordingClient(clock, delay_s=2.5 * PERIOD_S, offset_per_request=1000.0)
    config = make_config(request_mode="threshold", merge_rule="rtc", threshold_margin_s=0.02)
    runtime = RobotRuntime(robot, client, config, clock=clock, sleep=clock.sleep)
    asyncio.run(runtime.run())
    assert runtime.summary().num_starved_ticks == 0
    frozen = [
        obs
        for obs in client.observations
        if obs["rtc_delay"] > 0
        and obs[ARMORY_KEY]["action_index"] + obs["rtc_delay"] <= len(robot.actions)
    ]
    assert len(frozen) >= 5
    for obs in frozen:
        k, d = obs[ARMORY_KEY]["action_index"], obs["rtc_delay"]
        # robot.actions[i] is the action of index i (no tick starved after the first).
        assert robot.actions[k : k + d] == obs["rtc_prefix"][:, 0].tolist(), (k, d)
    played = np.array(robot.actions)
    assert np.any(played >= 2000)  # chunks after the first did land


def test_nonfinite_chunk_is_refused_counted_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    """The second reply holds NaN in a row past the execution horizon: it is not merged
    (the robot plays on from its queue, no NaN ever comes due), it is counted and its
    row is named in a warning; later chunks land as usual."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = RecordingClient(clock, delay_s=2.5 * PERIOD_S)
    original = client.infer

    async def infer(obs: dict[str, Any]) -> dict[str, Any]:
        reply = await original(obs)
        if len(client.requests) == 2:
            reply["actions"] = reply["actions"].copy()
            reply["actions"][E + 2, 1] = np.nan
        return reply

    client.infer = infer  # type: ignore[method-assign]
    config = make_config(request_mode="threshold", threshold_margin_s=0.05)
    with caplog.at_level("WARNING", logger="armory_client.runtime"):
        runtime, summary = run_runtime(clock, robot, client, config)
    assert summary.num_chunks_nonfinite == 1
    outcomes = [r.outcome for r in runtime.stats.requests]
    assert outcomes[1] == "non-finite" and outcomes.count("non-finite") == 1
    assert summary.num_chunks_applied == len(outcomes) - 1
    assert f"rows [{E + 2}] of 20 hold NaN or inf" in caplog.text
    assert np.isfinite(robot.actions).all()
    assert robot.actions[: summary.num_executed] == list(range(summary.num_executed))


# ---- safety -------------------------------------------------------------------


def test_dry_queue_holds_the_last_action_by_default() -> None:
    """When the queue runs dry the robot gets its last action again every tick."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    runtime, summary = run_runtime(clock, robot, one_chunk_then_failures(clock), make_config())
    assert robot.actions[:E] == list(range(E))
    assert set(robot.actions[E:]) == {E - 1}
    assert len(robot.actions) == summary.num_ticks - 1  # all but the first, chunkless tick
    assert runtime.safety.num_dry_ticks == summary.num_ticks - E


@pytest.mark.parametrize(
    ("safety", "dry"),
    [
        (SafetyConfig(on_dry="nothing"), []),
        (SafetyConfig(on_dry="safe-action", safe_action=(-1.0, -1.0)), [-1.0]),
    ],
)
def test_dry_queue_sends_nothing_or_the_safe_action(safety: SafetyConfig, dry: list) -> None:
    """on_dry='nothing' sends nothing on a dry tick; 'safe-action' sends the safe action
    (also before the first chunk lands)."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    run_runtime(clock, robot, one_chunk_then_failures(clock), make_config(safety=safety))
    first = len(dry)
    assert robot.actions[:first] == dry
    assert robot.actions[first : first + E] == list(range(E))
    assert set(robot.actions[first + E :]) == set(dry)


def test_limits_clip_every_action() -> None:
    """Actions beyond the limits reach the robot clipped to them."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    config = make_config(safety=SafetyConfig(lower=(2.0, 2.0), upper=(5.0, 5.0)))
    run_runtime(clock, robot, FakeClient(clock), config)
    assert min(robot.actions) == 2.0 and max(robot.actions) == 5.0
    assert robot.actions[:7] == [2.0, 2.0, 2.0, 3.0, 4.0, 5.0, 5.0]


def test_jump_stops_the_runtime_and_run_raises() -> None:
    """A step larger than max_step stops at once: nothing more is sent, the client
    closes, on_safety_stop hears of it once, and run raises the SafetyStop."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock)
    stops: list[SafetyStop] = []
    config = make_config(safety=SafetyConfig(max_step=0.5))
    runtime = RobotRuntime(
        robot, client, config, on_safety_stop=stops.append, clock=clock, sleep=clock.sleep
    )
    with pytest.raises(SafetyStop, match="jump larger than max_step"):
        asyncio.run(runtime.run())
    assert robot.actions == [0.0]
    assert len(stops) == 1 and client.closed
    assert runtime.safety.stopped


@pytest.mark.parametrize("from_thread", [False, True])
def test_estop_halts_at_once_from_the_loop_or_another_thread(from_thread: bool) -> None:
    """estop, called from the event loop or from another thread, sends no further
    action and makes run raise a SafetyStop naming the reason."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    runtime = RobotRuntime(robot, FakeClient(clock), make_config(), clock=clock, sleep=clock.sleep)
    send = robot.send_action

    def send_action(action: np.ndarray) -> None:
        send(action)
        if len(robot.actions) == 5:
            if from_thread:
                thread = threading.Thread(target=runtime.estop, args=("button",))
                thread.start()
                thread.join()
            else:
                runtime.estop("button")

    robot.send_action = send_action  # type: ignore[method-assign]
    with pytest.raises(SafetyStop, match="button"):
        asyncio.run(runtime.run())
    assert robot.actions == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_estop_before_run_stops_the_first_tick() -> None:
    """An e-stop latched before run stops it on its first tick: nothing is sent."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    runtime = RobotRuntime(robot, FakeClient(clock), make_config(), clock=clock, sleep=clock.sleep)
    runtime.estop()
    with pytest.raises(SafetyStop, match="e-stop"):
        asyncio.run(runtime.run())
    assert robot.actions == []


# ---- images -------------------------------------------------------------------


def test_declared_images_are_resized_before_sending() -> None:
    """A 4x4 camera image goes out as the 8x8 uint8 image the metadata declares."""
    clock = FakeClock()
    client = RecordingClient(clock, metadata=image_metadata())
    run_runtime(clock, FakeRobot(clock), client, make_config(duration_s=0.05))
    assert client.observations
    for obs in client.observations:
        assert obs["image"].shape == (8, 8, 3) and obs["image"].dtype == np.uint8


def test_images_are_left_alone_when_preparation_is_off_or_undeclared() -> None:
    """prepare_images=False, or a client without metadata, sends the robot's image."""
    for metadata, prepare in [(image_metadata(), False), (None, True)]:
        clock = FakeClock()
        client = RecordingClient(clock, metadata=metadata)
        config = make_config(duration_s=0.05, prepare_images=prepare)
        run_runtime(clock, FakeRobot(clock), client, config)
        assert all(obs["image"].shape == (4, 4, 3) for obs in client.observations)


def test_jpeg_only_where_the_server_decodes_it() -> None:
    """jpeg_quality encodes images the metadata marks "jpeg": true, and no others."""
    pytest.importorskip("PIL")
    for jpeg, kind in [(True, bytes), (False, np.ndarray)]:
        clock = FakeClock()
        client = RecordingClient(clock, metadata=image_metadata(jpeg=jpeg))
        config = make_config(duration_s=0.05, jpeg_quality=80)
        run_runtime(clock, FakeRobot(clock), client, config)
        assert all(isinstance(obs["image"], kind) for obs in client.observations)


def test_an_image_that_cannot_be_prepared_stops_the_runtime() -> None:
    """A camera image of the wrong shape cannot fix itself: run raises naming the key."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    robot.image = np.zeros((4, 4), np.uint8)
    client = RecordingClient(clock, metadata=image_metadata())
    with pytest.raises(ValueError, match="'image'"):
        run_runtime(clock, robot, client, make_config())


def test_jpeg_quality_is_checked() -> None:
    """jpeg_quality must be an int in 1..100 (or None)."""
    for bad in (0, 101, 50.0, True):
        with pytest.raises(ValueError, match="jpeg_quality"):
            make_config(jpeg_quality=bad)


# ---- trace --------------------------------------------------------------------


def test_trace_is_json_with_ticks_and_round_trips(tmp_path: Any) -> None:
    """write_trace writes every kept tick and request, each request with its send time."""
    clock = FakeClock()
    robot = FakeRobot(clock)
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    safety = SafetyConfig(lower=(-np.inf, 0.0), upper=(np.inf, np.inf))
    config = make_config(request_mode="threshold", safety=safety)
    runtime, summary = run_runtime(clock, robot, client, config)
    path = tmp_path / "trace.json"
    runtime.write_trace(path)
    trace = json.loads(path.read_text())
    assert trace["config"]["control_hz"] == 100.0
    assert trace["config"]["safety"]["on_dry"] == "hold"
    assert trace["config"]["safety"]["lower"] == [-np.inf, 0.0]
    assert len(trace["ticks"]) == summary.num_ticks
    assert {"tick", "actions_left", "starved"} <= trace["ticks"][0].keys()
    # The request in flight when the run ended has no record.
    assert len(trace["requests"]) in (summary.num_requests, summary.num_requests - 1)
    sent = [r["sent_s"] for r in trace["requests"]]
    assert sent == sorted(sent) and sent[0] == 0.0
    assert all(r["round_trip_s"] == pytest.approx(0.025, abs=0.011) for r in trace["requests"])
