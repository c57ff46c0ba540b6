"""Real-time chunking on the server for pi0.5, through LeRobot 0.6.1's own RTC guidance.

A tiny pi0.5 (random weights, noise ticket 5, ``--policy.rtc-schedule linear``) in
LeRobot's environment: a robot's ``rtc_prefix``/``rtc_remainder``/``rtc_delay`` reach
the model's guidance (its chunk moves to the prefix, and follows a different one),
requests without them are the plain model's bit for bit, a batch mixing both (one
LeRobot call per inference delay) gives each robot its chunk alone within the batch
tests' tolerance (rtol 1e-4, atol 1e-5), the plan is compared in the policy's
normalised space, and bad numbers are refused to their robot alone. Needs
$ARMORY_LEROBOT_PYTHON with the pi extra.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from armory_client import PolicyClient
from armory_client.merge import IndexedActions, rtc_request
from server_harness import running_server
from test_lerobot_policy import PYTHON, act_config, needs_lerobot
from test_lerobot_policy import make_obs as random_obs
from test_vla_lerobot import assert_script_ok, has_vla_extras, vla_config

from armory.core.errors import PolicyError
from armory.engine.executor import Executor
from armory.policies.base import InputSpec, Policy, PolicyMetadata
from armory.policies.lerobot import LeRobotPolicyConfig
from armory.policies.worker_policy import WorkerPolicy
from armory.workers.errors import WorkerStartError

DELAY = 3
"""Frozen rows of the test's requests."""


def rtc_config() -> LeRobotPolicyConfig:
    """The tiny pi0.5 of test_vla_lerobot with LeRobot's RTC guidance, linear schedule."""
    return dataclasses.replace(vla_config("pi05"), rtc_schedule="linear")


def skip_without_pi05() -> None:
    """Skip the test without LeRobot's environment or its pi extra (as test_vla_lerobot)."""
    if not PYTHON:
        pytest.skip("$ARMORY_LEROBOT_PYTHON is not set (scripts/lerobot-env.sh)")
    if not has_vla_extras("pi05"):
        pytest.skip("LeRobot's environment lacks pi0.5's modules: rebuild scripts/lerobot-env.sh")


@pytest.fixture(scope="module")
def rtc_policy() -> Iterator[WorkerPolicy]:
    """One tiny pi0.5 worker with RTC for the module; always stopped."""
    skip_without_pi05()
    policy = rtc_config().make()
    try:
        yield policy
    finally:
        policy.close()


def make_obs(policy: WorkerPolicy, seed: int, task: str = "pick the cube") -> dict[str, Any]:
    """test_lerobot_policy's random inputs, of the declared inputs without the plan's."""
    plain = dataclasses.replace(
        policy.metadata,
        inputs={k: v for k, v in policy.metadata.inputs.items() if not k.startswith("rtc_")},
    )
    return random_obs(SimpleNamespace(metadata=plain), seed, task)  # type: ignore[arg-type]


def plan(seed: int, rows: int = 8, delay: int = DELAY) -> dict[str, Any]:
    """The wire fields of an armory_client robot whose queue holds ``rows`` actions of a
    smooth trajectory (in the policy's units) and that freezes ``delay`` of them."""
    rng = np.random.default_rng(seed)
    steps = np.concatenate([rng.uniform(-1.0, 1.0, (1, 6)), rng.uniform(-0.1, 0.1, (rows - 1, 6))])
    queued = IndexedActions(0, np.cumsum(steps, axis=0).astype(np.float32))
    return rtc_request(queued, delay).to_wire()


def frozen_gap(chunk: np.ndarray, request: dict[str, Any]) -> float:
    """Mean absolute gap between the chunk's first d rows and the robot's prefix."""
    prefix = request["rtc_prefix"]
    return float(np.abs(chunk[: len(prefix)] - prefix).mean())


@needs_lerobot
def test_rtc_declares_the_plan_inputs(rtc_policy: WorkerPolicy) -> None:
    """The RTC server declares rtc_prefix and rtc_remainder as optional (n, 6) inputs and
    names its schedule in the metadata."""
    plan_spec = InputSpec(shape=(None, 6), required=False)
    assert rtc_policy.metadata.inputs["rtc_prefix"] == plan_spec
    assert rtc_policy.metadata.inputs["rtc_remainder"] == plan_spec
    assert rtc_policy.metadata.extra["rtc_schedule"] == "linear"


@needs_lerobot
def test_guidance_moves_the_chunk_to_the_robots_prefix(rtc_policy: WorkerPolicy) -> None:
    """With the same observation and ticket, the guided chunk's frozen rows lie at a
    fifth of the plain chunk's distance from the prefix or closer; another prefix gives
    another chunk, near that prefix. Ignoring the prefix would fail both."""
    obs = make_obs(rtc_policy, 3)
    plain = rtc_policy.infer_batch([obs])[0]
    first, second = plan(1), plan(2)
    guided = rtc_policy.infer_batch([obs | first])[0]
    other = rtc_policy.infer_batch([obs | second])[0]
    assert frozen_gap(guided, first) < 0.2 * frozen_gap(plain, first)
    assert frozen_gap(other, second) < 0.2 * frozen_gap(plain, second)
    assert (
        np.abs(guided[:DELAY] - other[:DELAY]).mean()
        > 0.5 * np.abs(first["rtc_prefix"] - second["rtc_prefix"]).mean()
    )


@needs_lerobot
def test_a_mixed_batch_gives_each_robot_its_chunk_alone(rtc_policy: WorkerPolicy) -> None:
    """Plain robots and robots with delays 2 and 3 in one batch (three LeRobot calls) get
    their chunks alone (rtol 1e-4, atol 1e-5); the plain ones equal a server without
    RTC bit for bit, with the same ticket."""
    observations = [make_obs(rtc_policy, seed, task=f"task {seed}") for seed in range(5)]
    observations[1] |= plan(11, delay=2)
    observations[3] |= plan(13, delay=3)
    observations[4] |= plan(14, delay=2)
    batched = np.stack(rtc_policy.infer_batch(observations))
    alone = np.stack([rtc_policy.infer_batch([obs])[0] for obs in observations])
    np.testing.assert_allclose(batched, alone, rtol=1e-4, atol=1e-5)
    plain = vla_config("pi05").make()
    try:
        for index in (0, 2):
            expected = plain.infer_batch([observations[index]])[0]
            np.testing.assert_array_equal(alone[index], expected)
    finally:
        plain.close()


@needs_lerobot
def test_bad_rtc_numbers_are_refused_to_their_robot_alone(rtc_policy: WorkerPolicy) -> None:
    """A delay past the prefix or the chunk, a delay that is not an integer, and a plan of
    the wrong width are refused naming the entry; in a batch the good robot is served."""
    obs = make_obs(rtc_policy, 4)
    good = obs | plan(1)
    cases = {
        r"rtc_delay 5 is outside \[0, 3\]": plan(1) | {"rtc_delay": 5},
        r"rtc_delay 12 is longer than the chunk's 10 rows": plan(1, rows=14, delay=12),
        r"rtc_delay must be an integer, got 1.5": plan(1) | {"rtc_delay": 1.5},
        r"rtc_prefix/rtc_remainder must be \(n, 6\)": {
            "rtc_prefix": np.zeros((2, 7), np.float32),
            "rtc_delay": 2,
        },
    }
    for message, request in cases.items():
        with pytest.raises(ValueError, match=message):
            rtc_policy.infer_batch([obs | request])
    bad = obs | plan(1) | {"rtc_delay": 5}
    outcome = asyncio.run(_run_batch(rtc_policy, [good, bad]))
    served, refused = outcome
    np.testing.assert_array_equal(served, rtc_policy.infer_batch([good])[0])
    assert isinstance(refused, PolicyError) and "rtc_delay 5 is outside" in str(refused)


class Borrowed(Policy):
    """A policy lent to an executor: the module's fixture closes it, not the executor."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    @property
    def metadata(self) -> PolicyMetadata:
        return self.policy.metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        return self.policy.infer_batch(observations)


async def _run_batch(policy: WorkerPolicy, batch: list[dict[str, Any]]) -> list[Any]:
    """The batch through the server's executor (which retries a failed batch robot by
    robot): per robot, its chunk or its error."""
    executor = Executor(Borrowed(policy))
    try:
        return list((await executor.run(batch)).chunks)
    finally:
        executor.shutdown()


@needs_lerobot
def test_a_robot_over_the_wire_gets_its_guided_chunk(rtc_policy: WorkerPolicy) -> None:
    """Served, an armory_client robot sending its rtc_request's fields (rtc_delay a plain
    int) gets the chunk the policy gives that request directly, bit for bit."""
    request = make_obs(rtc_policy, 7) | plan(21)
    expected = rtc_policy.infer_batch([request])[0]
    with (
        running_server(Borrowed(rtc_policy)) as server,
        PolicyClient("127.0.0.1", server.port) as client,
    ):
        reply = client.infer(request)
    np.testing.assert_array_equal(np.asarray(reply["actions"], np.float32), expected)


_NORMALISED_PLAN_SCRIPT = """
import numpy as np
from lerobot.processor import hotswap_stats
from armory.workers import wire
from armory.workers.backends.lerobot import LeRobotBackend
from armory.workers.backends.lerobot_rtc import ModelSpacePlans

overrides = {"chunk_size": 10, "n_action_steps": 10, "num_inference_steps": 4}
rtc = {"schedule": "linear", "execution_horizon": None, "max_guidance_weight": 10.0}
backend = LeRobotBackend(type="pi05", backbone="tiny", image_size=(56, 56),
                         overrides=overrides, cpu_threads=1, rtc=rtc)
backend.set_noise(np.random.default_rng(5).standard_normal((10, 32)).astype(np.float32))
# Dataset statistics: actions between the quantiles 40 and 60, the model's -1 and 1.
stats = {"action": {"q01": np.full(6, 40.0, np.float32), "q99": np.full(6, 60.0, np.float32)},
         "observation.state": {"q01": -np.ones(6, np.float32), "q99": np.ones(6, np.float32)}}
backend.pre, backend.post = hotswap_stats(backend.pre, stats), hotswap_stats(backend.post, stats)
backend._plans = ModelSpacePlans(backend.pre, "cpu")
rng = np.random.default_rng(0)
obs = {key: rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)
       for key in ("observation.images.front", "observation.images.wrist")}
obs |= {"observation.state": rng.uniform(-1, 1, 6).astype(np.float32), "task": "pick"}
previous = np.zeros((10, 6), np.float32)
previous[:8] = rng.uniform(42.0, 58.0, (8, 6))
guided = obs | {wire.RTC_PREVIOUS: previous, wire.RTC_DELAY: np.int64(3),
                wire.RTC_EXECUTION_HORIZON: np.int64(8)}
plain_gap = np.abs(backend.infer([obs])[0, :3] - previous[:3]).mean()
guided_gap = np.abs(backend.infer([guided])[0, :3] - previous[:3]).mean()
assert guided_gap < 0.2 * plain_gap, (guided_gap, plain_gap)
print("ok")
"""


@needs_lerobot
def test_the_plan_is_guided_in_the_policys_normalised_space() -> None:
    """With dataset statistics (actions in [40, 60]), a robot's plan in its own units
    still pulls the frozen rows onto it (the worker normalises it as the model's output
    was; sent unnormalised, the rows would land hundreds of units away)."""
    skip_without_pi05()
    assert_script_ok(_NORMALISED_PLAN_SCRIPT, timeout_s=300)


@needs_lerobot
def test_a_type_without_rtc_guidance_is_refused() -> None:
    """--policy.rtc-schedule for ACT is refused when parsed; an ACT worker asked for RTC
    anyway (as a checkpoint of that type would be) refuses to start, naming the types."""
    with pytest.raises(ValueError, match=r"not served for --policy\.type act; types with it"):
        act_config(rtc_schedule="linear")
    config = act_config()
    spec = config.spec(PYTHON)
    spec.options["rtc"] = {"schedule": "linear", "execution_horizon": None,
                           "max_guidance_weight": 10.0}  # fmt: skip
    with pytest.raises(WorkerStartError, match=r"type 'act' has no real-time-chunking guidance"):
        WorkerPolicy(spec, config.worker, rtc_schedule="linear").close()


def test_rtc_options_are_checked_when_parsed() -> None:
    """An unknown schedule, a negative horizon, a horizon without a schedule and a
    guidance weight <= 0 are refused, naming the option."""
    pi05 = {"type": "pi05", "random_weights": True}
    with pytest.raises(ValueError, match=r"unknown --policy\.rtc-schedule 'soft'; valid: zeros"):
        LeRobotPolicyConfig(**pi05, rtc_schedule="soft")
    with pytest.raises(ValueError, match=r"rtc-execution-horizon must be >= 0, got -1"):
        LeRobotPolicyConfig(**pi05, rtc_schedule="exp", rtc_execution_horizon=-1)
    with pytest.raises(ValueError, match=r"rtc-execution-horizon needs --policy\.rtc-schedule"):
        LeRobotPolicyConfig(**pi05, rtc_execution_horizon=4)
    with pytest.raises(ValueError, match=r"rtc-max-guidance-weight must be a finite number > 0"):
        LeRobotPolicyConfig(**pi05, rtc_schedule="exp", rtc_max_guidance_weight=0.0)
