"""The policy choice of ``armory serve``: one tyro subcommand per kind (``policy:mock``, ...).

A new kind is a frozen config dataclass with a ``make() -> Policy`` method, added to
:data:`PolicyConfig` under its subcommand name.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import tyro

from armory.policies.base import Policy
from armory.policies.expert import ExpertPolicyConfig
from armory.policies.lerobot import LeRobotPolicyConfig
from armory.policies.mock import MockPolicyConfig
from armory.policies.python import PythonPolicyConfig
from armory.policies.replay import ReplayPolicyConfig
from armory.policies.worker_policy import MockWorkerPolicyConfig, WorkerOptions

PolicyConfig = (
    Annotated[MockPolicyConfig, tyro.conf.subcommand("mock")]
    | Annotated[PythonPolicyConfig, tyro.conf.subcommand("python")]
    | Annotated[ReplayPolicyConfig, tyro.conf.subcommand("replay")]
    | Annotated[MockWorkerPolicyConfig, tyro.conf.subcommand("mock-worker")]
    | Annotated[LeRobotPolicyConfig, tyro.conf.subcommand("lerobot")]
    | Annotated[ExpertPolicyConfig, tyro.conf.subcommand("expert")]
)


PolicyChoice = (
    MockPolicyConfig
    | PythonPolicyConfig
    | ReplayPolicyConfig
    | MockWorkerPolicyConfig
    | LeRobotPolicyConfig
    | ExpertPolicyConfig
)
"""Any policy kind's config (:data:`PolicyConfig` without the subcommand names)."""


def for_server(config: PolicyChoice, max_batch_size: int) -> PolicyChoice:
    """``config`` as a server of ``max_batch_size`` makes it: a policy that runs a worker
    warms every batch size up to the max at start-up unless its options say otherwise
    (:attr:`WorkerOptions.warmup_batch_sizes`)."""
    worker = getattr(config, "worker", None)
    if not isinstance(worker, WorkerOptions):
        return config
    return dataclasses.replace(config, worker=worker.for_server(max_batch_size))


def make_policy(config: PolicyChoice) -> Policy:
    """A new policy for ``config``."""
    return config.make()
