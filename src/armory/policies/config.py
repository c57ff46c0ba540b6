"""The policy choice of ``armory serve``: one tyro subcommand per kind (``policy:mock``, ...).

A new kind is a frozen config dataclass with a ``make() -> Policy`` method, added to
:data:`PolicyConfig` under its subcommand name.
"""

from __future__ import annotations

from typing import Annotated

import tyro

from armory.policies.base import Policy
from armory.policies.expert import ExpertPolicyConfig
from armory.policies.lerobot import LeRobotPolicyConfig
from armory.policies.mock import MockPolicyConfig
from armory.policies.python import PythonPolicyConfig
from armory.policies.replay import ReplayPolicyConfig
from armory.policies.worker_policy import MockWorkerPolicyConfig

PolicyConfig = (
    Annotated[MockPolicyConfig, tyro.conf.subcommand("mock")]
    | Annotated[PythonPolicyConfig, tyro.conf.subcommand("python")]
    | Annotated[ReplayPolicyConfig, tyro.conf.subcommand("replay")]
    | Annotated[MockWorkerPolicyConfig, tyro.conf.subcommand("mock-worker")]
    | Annotated[LeRobotPolicyConfig, tyro.conf.subcommand("lerobot")]
    | Annotated[ExpertPolicyConfig, tyro.conf.subcommand("expert")]
)


def make_policy(
    config: MockPolicyConfig
    | PythonPolicyConfig
    | ReplayPolicyConfig
    | MockWorkerPolicyConfig
    | LeRobotPolicyConfig
    | ExpertPolicyConfig,
) -> Policy:
    """A new policy for ``config``."""
    return config.make()
