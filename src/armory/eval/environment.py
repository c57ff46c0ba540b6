"""The Environment interface: one simulated robot's scene, stepped once per control tick.

An environment lives in its robot's own process (renderers are bound to the thread
that made them) and is driven by that robot's runtime: ``reset`` before each
episode, ``step`` once per tick with the action the robot executes, ``observation``
whenever the runtime sends one. Observations use the environment's own names
(``observation.state``, ``observation.images.front``, ``task``, ...); the
evaluation maps them to the policy's declared inputs (:mod:`armory.eval.mapping`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from armory.eval.variation import Scenario

PRIVILEGED_PREFIX = "privileged/"
"""Observation entries under this prefix are ground truth for scripted experts, never
sent to a learned policy's door or recorded as a feature."""


@dataclass(frozen=True)
class StepResult:
    """What one step of the environment gave."""

    reward: float
    """The environment's reward for this step."""
    success: bool
    """The task is achieved (as the environment judges it)."""
    terminated: bool
    """The episode cannot go on (success, or a failure such as a dropped object)."""


@dataclass(frozen=True)
class ResetResult:
    """What a reset set up."""

    not_applied: tuple[str, ...] = ()
    """Scenario axes the environment could not set."""
    applied: Mapping[str, float] | None = None
    """Values read back where the environment adjusted them (e.g. a pose it settled)."""


@dataclass(frozen=True)
class EnvConfig:
    """Options every ``env:`` config shares; a subclass names its environment and makes it."""

    image_obs: bool = False
    """Render the camera image instead of sending the object state."""
    image_size: int = 96
    """Height and width of a rendered frame."""
    task: str = ""
    """The language instruction sent as ``task``."""

    def __post_init__(self) -> None:
        if not 16 <= self.image_size <= 1024:
            raise ValueError(f"image_size must be in 16..1024, got {self.image_size}")

    @property
    def name(self) -> str:
        """The ``env:`` name."""
        raise NotImplementedError

    def prepare_process(self) -> None:
        """Called first in a process that will make this environment, before anything
        imports its simulator (e.g. to choose MuJoCo's OpenGL platform)."""

    def make(self) -> Environment:
        """Called in the robot's process (and once in the parent, to check the mapping)."""
        raise NotImplementedError


class Environment(abc.ABC):
    """One robot's simulated scene."""

    name: str
    """The ``env:`` name, e.g. ``so101-pick``."""
    control_hz: float
    """Steps per second of simulated time."""
    action_dim: int
    """Values per action."""
    task: str
    """The task's language instruction."""

    @abc.abstractmethod
    def reset(self, *, seed: int, episode: int, scenario: Scenario) -> ResetResult:
        """Called before each episode: a new scene from ``seed`` with ``scenario``'s values."""

    @abc.abstractmethod
    def step(self, action: np.ndarray) -> StepResult:
        """Called once per control tick with the action the robot executes."""

    @abc.abstractmethod
    def hold_action(self) -> np.ndarray:
        """Called when the robot must stay where it is (e.g. before a delayed first action
        arrives): the action that holds its present pose."""

    @abc.abstractmethod
    def observation(self) -> dict[str, Any]:
        """Called when the runtime sends an observation: the current one, by the
        environment's own names, privileged entries included."""

    def declare_inputs(self, inputs: Mapping[str, Any]) -> None:  # noqa: B027
        """Called after the environment is made, before its first reset, with the policy's
        declared inputs under the environment's own names (empty when the policy declares
        none): an environment may leave out what no input reads (a camera not rendered).
        Raises MappingError when a declared input names something it cannot produce."""

    def close(self) -> None:  # noqa: B027
        """Called once when the robot's process ends."""
