"""``policy:mock``: a stand-in model that takes as long as a latency profile says.

Each forward pass lasts the profile's latency for the batch size (hashing the
inputs counts towards it; the rest is slept, off the event loop). The actions
are a pure function of the robot's own observation (:func:`mock_actions`), so a
test can recompute every chunk it receives and prove that no robot ever gets
another robot's chunk. Each chunk is a smooth trajectory (a start point and
steps of at most ``max_step`` per action), so a seam between two chunks shows as
a jump larger than the policy's own step-to-step change.

Real-time chunking: the mock honours ``rtc_prefix`` (the d actions the robot will
play whatever the reply, see ``armory_client.merge``) the way an inpainting policy
does: the chunk's first d rows are the prefix, and the rest continues from its
last row with the chunk's own steps, so the robot never sees a seam
(:func:`inpaint_prefix`). With ``rtc_schedule`` set to one of LeRobot's prefix
schedules (``zeros``, ``ones``, ``linear``, ``exp``) it soft-masks instead: each row
is blended with the previous plan (``rtc_prefix`` then ``rtc_remainder``) by the
schedule's weight (:mod:`armory.policies.rtc_guidance`).

Noise tickets: with ``--policy.noise.seed`` or ``--policy.noise.ticket`` (see
:mod:`armory.policies.noise`) the mock adds ``noise_scale`` times the fixed
(action_horizon, action_dim) noise to every chunk before real-time chunking, and
reports the noise's SHA-256, so tickets can be tested without a model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from armory_client.wire import RTC_PREFIX_KEY, RTC_REMAINDER_KEY

from armory.core.latency_profile import (
    LatencyProfile,
    LinearProfileConfig,
    check_profile_name,
    points_for,
)
from armory.policies.base import STR_DTYPE, InputSpec, Policy, PolicyMetadata
from armory.policies.noise import NoiseConfig, make_noise
from armory.policies.rtc_guidance import RTC_SCHEDULES, RtcGuidance, rtc_guidance, soft_inpaint

_RTC_KEYS = (RTC_PREFIX_KEY, RTC_REMAINDER_KEY)

MOCK_MAX_STEP = 0.05
"""Largest change of any action value from one action of a mock chunk to the next."""


@dataclass(frozen=True)
class MockPolicyConfig:
    """A mock policy: latency from a profile, actions from a hash of each observation."""

    latency_profile: str = "l40s-pi05"
    """Latency preset (l40s-pi05, l40s-pi05-paper, linear) or a profile file (PATH.json,
    written by armory profile)."""
    linear: LinearProfileConfig = field(default_factory=LinearProfileConfig)
    """Intercept and slope of the ``linear`` preset."""
    action_horizon: int = 10
    """Actions per chunk."""
    action_dim: int = 7
    """Values per action."""
    image_keys: tuple[str, ...] = ("observation/image", "observation/wrist_image")
    """Declared uint8 camera inputs."""
    image_shape: tuple[int, int, int] = (224, 224, 3)
    """Shape of every camera image (height, width, channels)."""
    state_key: str = "observation/state"
    """Declared float32 state input."""
    state_dim: int = 8
    """Length of the state vector."""
    prompt_key: str | None = "prompt"
    """Declared optional text input; None declares none."""
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    """Fixed action noise of shape (action_horizon, action_dim), added to every chunk."""
    noise_scale: float = 0.1
    """Each chunk gets noise_scale * noise added (only with a noise seed or ticket)."""
    rtc_schedule: str = "hard"
    """Real-time chunking: ``hard`` inpaints the frozen prefix; ``zeros``, ``ones``,
    ``linear`` or ``exp`` soft-mask with LeRobot's prefix weights."""
    rtc_execution_horizon: int | None = None
    """Soft masking: rows guided by the previous plan (None: all it sends)."""

    def __post_init__(self) -> None:
        check_profile_name(self.latency_profile)
        if self.action_horizon < 1 or self.action_dim < 1 or self.state_dim < 1:
            raise ValueError(
                f"action_horizon, action_dim and state_dim must be >= 1, got "
                f"{self.action_horizon}, {self.action_dim}, {self.state_dim}"
            )
        if not np.isfinite(self.noise_scale):
            raise ValueError(f"noise_scale must be finite, got {self.noise_scale}")
        if self.rtc_schedule != "hard" and self.rtc_schedule not in RTC_SCHEDULES:
            valid = ", ".join(("hard", *RTC_SCHEDULES))
            raise ValueError(f"unknown rtc_schedule {self.rtc_schedule!r}; valid: {valid}")
        if self.rtc_execution_horizon is not None and self.rtc_execution_horizon < 0:
            raise ValueError(
                f"rtc_execution_horizon must be >= 0 or None, got {self.rtc_execution_horizon}"
            )
        keys = [*self.image_keys, self.state_key, *([self.prompt_key] if self.prompt_key else [])]
        if len(set(keys)) != len(keys):
            raise ValueError(f"mock policy input keys must be distinct, got {keys}")

    def inputs(self) -> dict[str, InputSpec]:
        """The declared inputs, by key."""
        specs = {key: InputSpec(shape=self.image_shape, dtype="uint8") for key in self.image_keys}
        specs[self.state_key] = InputSpec(shape=(self.state_dim,), dtype="float32")
        for key in _RTC_KEYS:
            specs[key] = InputSpec(shape=(None, self.action_dim), required=False)
        if self.prompt_key:
            specs[self.prompt_key] = InputSpec(dtype=STR_DTYPE, required=False)
        return specs

    def make(self) -> MockPolicy:
        return MockPolicy(self)


_SPIN_S = 0.0005
"""The last part of a wait, spent yielding instead of sleeping (a sleep ends late)."""


def sleep_precisely(seconds: float) -> None:
    """Wait ``seconds``: ``time.sleep`` ends 0.1-0.2 ms late, so it sleeps short of the
    end and yields the interpreter lock until it (a GPU-like wait for the mock)."""
    done_s = time.perf_counter() + seconds
    if seconds > _SPIN_S:
        time.sleep(seconds - _SPIN_S)
    while time.perf_counter() < done_s:
        time.sleep(0)


class MockPolicy(Policy):
    """Waits for the profile's latency; returns :func:`mock_actions` of each observation."""

    def __init__(
        self, config: MockPolicyConfig, *, sleep: Callable[[float], None] = sleep_precisely
    ) -> None:
        self.config = config
        self._points = points_for(config.latency_profile, config.linear)
        # Never fed samples: the configured line is the mock's ground truth.
        self._true_latency = LatencyProfile(self._points)
        self._sleep = sleep
        self.noise = make_noise(config.noise, (config.action_horizon, config.action_dim))
        """The fixed noise, or None (checked here, when the server starts)."""
        self._metadata = PolicyMetadata(
            name="mock",
            action_horizon=config.action_horizon,
            action_dim=config.action_dim,
            inputs=config.inputs(),
            latency_points=dict(self._points),
            noise_sha256=None if self.noise is None else self.noise.sha256,
        )
        # Batch sizes of every forward pass, in order (read by tests).
        self.batch_sizes: list[int] = []

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        done_s = time.perf_counter() + self._true_latency.latency_s(len(observations))
        self.batch_sizes.append(len(observations))
        chunks = [
            self._real_time_chunk(
                self._add_noise(
                    mock_actions(
                        obs,
                        self._metadata.inputs,
                        self.config.action_horizon,
                        self.config.action_dim,
                    )
                ),
                obs,
            )
            for obs in observations
        ]
        remaining_s = done_s - time.perf_counter()
        if remaining_s > 0:
            self._sleep(remaining_s)
        return chunks

    def check_observation(self, obs: Mapping[str, Any]) -> None:
        """With a soft schedule a bad ``rtc_*`` entry is refused at once."""
        if self.config.rtc_schedule != "hard":
            self._guidance(obs)

    def _guidance(self, obs: Mapping[str, Any]) -> RtcGuidance | None:
        config = self.config
        return rtc_guidance(
            obs,
            rows=config.action_horizon,
            action_dim=config.action_dim,
            schedule=config.rtc_schedule,
            execution_horizon=config.rtc_execution_horizon,
        )

    def _real_time_chunk(self, chunk: np.ndarray, obs: Mapping[str, Any]) -> np.ndarray:
        """``chunk`` joined to the robot's previous plan by ``rtc_schedule``."""
        if self.config.rtc_schedule == "hard":
            return inpaint_prefix(chunk, obs.get(RTC_PREFIX_KEY))
        return soft_inpaint(chunk, self._guidance(obs))

    def _add_noise(self, chunk: np.ndarray) -> np.ndarray:
        """``chunk + noise_scale * noise`` (float32) with fixed noise; else ``chunk``."""
        if self.noise is None:
            return chunk
        scale = np.float32(self.config.noise_scale)
        return chunk + scale * self.noise.array


def mock_actions(
    obs: Mapping[str, Any],
    inputs: Mapping[str, InputSpec],
    action_horizon: int,
    action_dim: int,
    *,
    max_step: float = MOCK_MAX_STEP,
) -> np.ndarray:
    """The mock's chunk for ``obs`` before real-time chunking: a start point uniform in
    [-1, 1), then steps uniform in [-max_step, max_step) per action, all seeded by a hash
    of the declared inputs (key, dtype, shape and bytes of each, in key order; the
    real-time-chunking entries are not hashed)."""
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(inputs):
        if key not in obs or key in _RTC_KEYS:
            continue
        value = obs[key]
        digest.update(key.encode())
        if isinstance(value, str):
            digest.update(b"str:" + value.encode())
            continue
        array = np.ascontiguousarray(value)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.data)
    seed = int.from_bytes(digest.digest(), "little")
    rng = np.random.Generator(np.random.PCG64(seed))
    start = rng.uniform(-1.0, 1.0, size=(1, action_dim))
    steps = rng.uniform(-max_step, max_step, size=(action_horizon - 1, action_dim))
    return np.cumsum(np.concatenate([start, steps]), axis=0).astype(np.float32)


def inpaint_prefix(chunk: np.ndarray, prefix: np.ndarray | None) -> np.ndarray:
    """``chunk`` joined to the frozen ``prefix`` without a seam: rows ``0 .. d-1`` are the
    prefix, row ``i >= d`` is ``prefix[d-1] + chunk[i] - chunk[d-1]`` (the chunk's own
    steps from the last frozen action). No prefix, or an empty one: ``chunk`` itself."""
    if prefix is None or len(prefix) == 0:
        return chunk
    d = min(len(prefix), len(chunk))
    out = np.empty_like(chunk)
    out[:d] = prefix[:d]
    out[d:] = prefix[d - 1] + (chunk[d:] - chunk[d - 1])
    return out
