"""``policy:replay``: serve the actions a LeRobot dataset recorded, with no model at all.

The way to prove a robot's transport, timing and chunk handling before trusting a
model (as GR00T's ReplayPolicy does): every chunk is rows of a recorded episode,
so what the robot plays can be compared with the recording action for action.

- **Which episode.** An observation may carry ``episode_index`` (a declared,
  optional int64 input: a numpy integer scalar or 0-d array) naming a dataset
  episode. Without it, each robot keeps the episode it was first given: robots
  get the dataset's episodes in index order, round robin, in the order they first
  ask (first robot the first episode, second robot the second, ...). A robot is
  its session's name: the Armory ``robot_id``, or one per connection for a plain
  openpi client (a reconnecting plain client is a new robot).
- **Which step.** The chunk for a request starts at the request's chunk start
  (the engine's ``armory/chunk_start`` context: an Armory client's
  ``action_index``, or ``0, H, 2H, ...`` for a plain client that plays whole
  chunks): row ``j`` is the recorded action of frame ``chunk_start + j``. Frames
  past the episode's end repeat its last action (``--policy.at-end hold``, the
  robot stands still) or wrap around to frame 0 (``loop``). A new Armory episode
  (``episode_id``) restarts the action indices, and so the replay.
- **Inputs.** Only ``episode_index`` is declared; every other key a robot sends
  is accepted and ignored (undeclared keys pass the server's check untouched).

All episodes' actions are read when the policy is made, so a bad dataset fails
``armory serve`` at start-up, never at the first request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from armory.policies.base import (
    CONTEXT_CHUNK_START,
    CONTEXT_ROBOT,
    InputSpec,
    Policy,
    PolicyMetadata,
)
from armory.policies.lerobot_dataset import LeRobotDatasetReader

EPISODE_KEY = "episode_index"
"""Optional observation input naming the dataset episode to replay."""

_LATENCY_POINTS = {1: 0.001, 2: 0.00105}
"""Seeds the server's learned profile: replay costs about a millisecond a batch."""


@dataclass(frozen=True)
class ReplayPolicyConfig:
    """Replay the recorded actions of a local LeRobot v3.0 dataset, episode by episode."""

    dataset: Path
    """Root folder of the dataset (holding meta/info.json)."""
    action_key: str = "action"
    """The dataset feature replayed (numeric, shape (action_dim,))."""
    action_horizon: int = 10
    """Recorded actions per chunk."""
    at_end: Literal["hold", "loop"] = "hold"
    """Past an episode's last frame: hold its last action, or loop back to frame 0."""
    episodes: tuple[int, ...] = ()
    """Dataset episodes to serve (round robin over these); empty: all of them."""

    def __post_init__(self) -> None:
        if self.action_horizon < 1:
            raise ValueError(f"action_horizon must be >= 1, got {self.action_horizon}")
        if self.at_end not in ("hold", "loop"):
            raise ValueError(f"at_end must be 'hold' or 'loop', got {self.at_end!r}")
        if len(set(self.episodes)) != len(self.episodes):
            raise ValueError(f"episodes must be distinct, got {self.episodes}")

    def make(self) -> ReplayPolicy:
        return ReplayPolicy(self)


class ReplayPolicy(Policy):
    """Chunks are recorded actions: the episode of each robot, from its chunk start."""

    def __init__(self, config: ReplayPolicyConfig) -> None:
        self.config = config
        reader = LeRobotDatasetReader(config.dataset)
        self.fps = reader.fps
        """Frames per second of the recording (its natural control rate)."""
        selected = list(config.episodes) or None
        actions = reader.column(config.action_key, selected)
        self.actions: dict[int, np.ndarray] = {
            index: np.ascontiguousarray(rows, dtype=np.float32) for index, rows in actions.items()
        }
        """Recorded (length, action_dim) float32 actions per episode index."""
        self.episode_order = list(self.actions)
        """Episodes in the order robots are given them."""
        self._robot_episode: dict[str, int] = {}
        action_dim = reader.features[config.action_key].shape[0]
        self._metadata = PolicyMetadata(
            name="replay",
            action_horizon=config.action_horizon,
            action_dim=action_dim,
            inputs={EPISODE_KEY: InputSpec(shape=(), dtype="int64", required=False)},
            latency_points=_LATENCY_POINTS,
            extra={"fps": self.fps, "episodes": self.episode_order},
            context_keys=(CONTEXT_CHUNK_START, CONTEXT_ROBOT),
        )

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        return [
            self.chunk(self.episode_of(obs), int(obs[CONTEXT_CHUNK_START])) for obs in observations
        ]

    def episode_of(self, obs: Mapping[str, Any]) -> int:
        """The episode ``obs`` asks for, else its robot's (assigned on its first request)."""
        if EPISODE_KEY in obs:
            episode = int(obs[EPISODE_KEY])
            if episode not in self.actions:
                # A ValueError fails this observation alone (the executor retries the rest).
                raise ValueError(
                    f"episode_index {episode} is not served; episodes: {self.episode_order}"
                )
            return episode
        robot = str(obs[CONTEXT_ROBOT])
        if robot not in self._robot_episode:
            order = self.episode_order
            self._robot_episode[robot] = order[len(self._robot_episode) % len(order)]
        return self._robot_episode[robot]

    def chunk(self, episode: int, start: int) -> np.ndarray:
        """Rows ``start .. start + action_horizon - 1`` of ``episode``'s actions, past the end
        held or looped (``at_end``)."""
        recorded = self.actions[episode]
        frames = start + np.arange(self.config.action_horizon)
        if self.config.at_end == "loop":
            frames %= len(recorded)
        else:
            frames = np.minimum(frames, len(recorded) - 1)
        return recorded[frames]
