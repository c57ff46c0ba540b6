"""One evaluation's settings, fully decided and checked (``armory eval`` builds it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from armory_client import MERGE_RULES, REQUEST_MODES

from armory.core.door_names import DOOR_NAMES
from armory.eval.environment import EnvConfig
from armory.eval.recording import RecordConfig
from armory.eval.variation import VariationConfig

"""Front doors an eval robot can use."""


@dataclass(frozen=True)
class EvalPlan:
    """One evaluation, fully decided (checked by :func:`prepare`)."""

    env: EnvConfig
    """The environment (an ``env:`` config)."""
    uri: str
    """ws://host:port of the policy server (its openpi door: metadata, and robots by
    default)."""
    num_robots: int
    num_episodes: int
    episode_time_s: float
    seed: int
    time_scale: float = 1.0
    request_mode: str = "directed"
    merge_rule: str = "replace"
    """How a landing chunk joins each robot's queue (``armory_client.MERGE_RULES``)."""
    execution_horizon: int | None = None
    """Most actions a robot plays of one chunk; None: the policy's whole chunk."""
    door: str = "openpi"
    """The front door robots use: openpi (the server at ``uri``), groot or lerobot."""
    door_port: int | None = None
    """Port of the groot or lerobot door on the server's host (None for openpi)."""
    mapping: Mapping[str, str] = field(default_factory=dict)
    variation: VariationConfig = field(default_factory=VariationConfig)
    scene: Mapping[str, float] = field(default_factory=dict)
    ticket: Mapping[str, Any] | None = None
    api_key: str | None = None
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    action_delay_ticks: int = 0
    """Ticks between the runtime sending an action and the environment executing it."""
    record: RecordConfig = field(default_factory=RecordConfig)
    """Record every episode as a LeRobot dataset (``--record.dir``)."""
    run_info: Mapping[str, Any] = field(default_factory=dict)
    """Recorded in results.json as given (policy, scheduler, server, ...)."""

    def __post_init__(self) -> None:
        if self.num_robots < 1 or self.num_episodes < 1:
            raise ValueError(
                f"--robots and --episodes must be >= 1, got {self.num_robots} and "
                f"{self.num_episodes}"
            )
        if not self.episode_time_s > 0:
            raise ValueError(f"--episode-time-s must be > 0, got {self.episode_time_s}")
        if not 0 <= self.action_delay_ticks <= 100:
            raise ValueError(
                f"--action-delay-ticks must be in 0..100, got {self.action_delay_ticks}"
            )
        if self.request_mode not in REQUEST_MODES:
            raise ValueError(
                f"unknown request mode {self.request_mode!r}; valid: {', '.join(REQUEST_MODES)}"
            )
        if self.merge_rule not in MERGE_RULES:
            raise ValueError(
                f"unknown merge rule {self.merge_rule!r}; valid: {', '.join(MERGE_RULES)}"
            )
        if self.execution_horizon is not None and self.execution_horizon < 1:
            raise ValueError(f"--execution-horizon must be >= 1, got {self.execution_horizon}")
        if not self.connect_timeout_s > 0:
            raise ValueError(f"--connect-timeout-s must be > 0, got {self.connect_timeout_s}")
        if self.door not in DOOR_NAMES:
            raise ValueError(f"unknown door {self.door!r}; valid: {', '.join(DOOR_NAMES)}")
        if (self.door == "openpi") != (self.door_port is None):
            raise ValueError(f"--door {self.door} needs a door port exactly when not openpi")
        if not 0 < self.time_scale <= 10:
            raise ValueError(f"--time-scale must be in (0, 10], got {self.time_scale}")
