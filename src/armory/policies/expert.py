"""``policy:expert``: an evaluation environment's scripted controller served as a policy.

The expert needs no weights, yet its actions depend on every observation: it
reads the privileged state the environment adds to each observation
(:data:`PRIVILEGED_STATE_KEY`, e.g. block and goal positions) and the episode
number (:data:`EPISODE_KEY`), keeps one controller per robot (the engine's
``armory/robot`` context), resets it when that robot's episode changes, and
rolls it forward from the chunk start (``armory/chunk_start``) to fill a chunk.
A late chunk is computed from an old observation, so serving delays cost the
task real time and, against an episode time limit, real success.

``--policy.latency-profile`` emulates a model's forward pass (e.g. ``l40s-pi05``)
so that batching and scheduling show; ``--policy.latency-scale`` multiplies it
(``armory eval --time-scale s`` sets ``1/s``). With a noise ticket
(``--policy.noise.seed`` / ``--policy.noise.ticket``) every chunk gets
``noise_scale`` times the fixed (action_horizon, action_dim) noise added and the
replies carry its SHA-256.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from armory.core.latency_profile import (
    LatencyProfile,
    LinearProfileConfig,
    check_profile_name,
    points_for,
)
from armory.policies import aloha_expert, so101_expert
from armory.policies.base import (
    CONTEXT_CHUNK_START,
    CONTEXT_ROBOT,
    InputSpec,
    Policy,
    PolicyMetadata,
)
from armory.policies.mock import sleep_precisely
from armory.policies.noise import NoiseConfig, make_noise

PRIVILEGED_STATE_KEY = "privileged/state"
"""float32 vector of simulator state only an expert may read (the environment adds it)."""
EPISODE_KEY = "privileged/episode"
"""int64 scalar: the robot's episode number; a change resets that robot's controller."""

EXPERT_ENVS = ("so101-pick", "aloha")
"""Environments whose expert can be served (aloha: its transfer-cube task)."""

_FREE_LATENCY_POINTS = {1: 0.0005, 2: 0.0006}
"""Seeds the server's profile when no latency is emulated: the rollout's own cost."""


@dataclass(frozen=True)
class ExpertPolicyConfig:
    """Serve an environment's scripted expert (needs the environment's privileged inputs)."""

    env: Literal["so101-pick", "aloha"] = "so101-pick"
    """The environment whose expert is served (aloha: the transfer-cube task)."""
    action_horizon: int = 10
    """Actions per chunk (rows of the rolled-forward controller)."""
    latency_profile: str | None = None
    """Emulated forward pass (l40s-pi05, l40s-pi05-paper, linear, or a profile file
    PATH.json); None: no added latency."""
    linear: LinearProfileConfig = field(default_factory=LinearProfileConfig)
    """Intercept and slope of the ``linear`` preset."""
    latency_scale: float = 1.0
    """Multiplies the emulated latency (``armory eval --time-scale s`` serves with 1/s)."""
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    """Fixed action noise of shape (action_horizon, action_dim), added to every chunk."""
    noise_scale: float = 0.005
    """Each chunk gets noise_scale * noise added (only with a noise seed or ticket)."""

    def __post_init__(self) -> None:
        if self.env not in EXPERT_ENVS:
            raise ValueError(f"unknown expert env {self.env!r}; valid: {', '.join(EXPERT_ENVS)}")
        if self.action_horizon < 1:
            raise ValueError(f"action_horizon must be >= 1, got {self.action_horizon}")
        if self.latency_profile is not None:
            check_profile_name(self.latency_profile)
        if not (np.isfinite(self.latency_scale) and self.latency_scale > 0):
            raise ValueError(f"latency_scale must be > 0, got {self.latency_scale}")
        if not np.isfinite(self.noise_scale):
            raise ValueError(f"noise_scale must be finite, got {self.noise_scale}")

    def make(self) -> ExpertPolicy:
        return ExpertPolicy(self)


class ExpertPolicy(Policy):
    """One rolled-forward controller per robot; waits out the emulated latency per batch."""

    def __init__(self, config: ExpertPolicyConfig) -> None:
        self.config = config
        if config.env == "aloha":
            self._expert: Any = aloha_expert.AlohaChunkExpert(action_horizon=config.action_horizon)
            action_dim, state_dim = aloha_expert.ACTION_DIM, aloha_expert.PRIVILEGED_STATE_DIM
        else:
            self._expert = so101_expert.So101ChunkExpert(action_horizon=config.action_horizon)
            action_dim, state_dim = so101_expert.ACTION_DIM, so101_expert.PRIVILEGED_STATE_DIM
        self.noise = make_noise(config.noise, (config.action_horizon, action_dim))
        """The fixed noise, or None."""
        if config.latency_profile is None:
            self._latency: LatencyProfile | None = None
            points = _FREE_LATENCY_POINTS
        else:
            points = {
                size: seconds * config.latency_scale
                for size, seconds in points_for(config.latency_profile, config.linear).items()
            }
            self._latency = LatencyProfile(points)
        self._metadata = PolicyMetadata(
            name=f"expert-{config.env}",
            action_horizon=config.action_horizon,
            action_dim=action_dim,
            inputs={
                PRIVILEGED_STATE_KEY: InputSpec(shape=(state_dim,), dtype="float32"),
                EPISODE_KEY: InputSpec(shape=(), dtype="int64"),
            },
            latency_points=points,
            noise_sha256=None if self.noise is None else self.noise.sha256,
            context_keys=(CONTEXT_CHUNK_START, CONTEXT_ROBOT),
        )

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        latency_s = 0.0 if self._latency is None else self._latency.latency_s(len(observations))
        done_s = time.perf_counter() + latency_s
        chunks = [self._chunk(obs) for obs in observations]
        remaining_s = done_s - time.perf_counter()
        if remaining_s > 0:
            sleep_precisely(remaining_s)
        return chunks

    def _chunk(self, obs: Mapping[str, Any]) -> np.ndarray:
        chunk = self._expert.chunk(
            str(obs[CONTEXT_ROBOT]),
            int(obs[EPISODE_KEY]),
            int(obs[CONTEXT_CHUNK_START]),
            np.asarray(obs[PRIVILEGED_STATE_KEY]),
        )
        if self.noise is not None:
            chunk = chunk + np.float32(self.config.noise_scale) * self.noise.array
        return chunk
