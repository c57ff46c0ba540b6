"""``policy:python``: serve any :class:`~armory.policies.base.Policy` a Python factory makes.

The factory is named as ``package.module:callable`` and called with the keyword
arguments given as a JSON object. It runs the operator's own code: only the
command line chooses it, never a robot.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass

from armory.policies.base import Policy


@dataclass(frozen=True)
class PythonPolicyConfig:
    """A policy built by calling ``factory(**kwargs)``."""

    factory: str
    """``package.module:callable`` returning a Policy."""
    kwargs: str = "{}"
    """Keyword arguments of the factory, as a JSON object."""

    def __post_init__(self) -> None:
        module, sep, name = self.factory.partition(":")
        if not (module and sep and name):
            raise ValueError(
                f"--policy.factory must look like package.module:callable, got {self.factory!r}"
            )
        try:
            kwargs = json.loads(self.kwargs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--policy.kwargs is not JSON: {exc}") from exc
        if not isinstance(kwargs, dict):
            raise ValueError(f"--policy.kwargs must be a JSON object, got {self.kwargs!r}")

    def make(self) -> Policy:
        module_name, _, attr = self.factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"cannot import {module_name!r} for --policy.factory: {exc}") from exc
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise ValueError(f"{self.factory!r} is not a callable")
        policy = factory(**json.loads(self.kwargs))
        if not isinstance(policy, Policy):
            raise ValueError(
                f"{self.factory!r} returned a {type(policy).__name__}, not an armory Policy"
            )
        return policy
