"""The robot a `RobotRuntime` drives: observations out, actions in."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

__all__ = ["Robot"]


class Robot(Protocol):
    """The hardware (or a stand-in) behind one runtime; both calls run on the event loop,
    so they must return quickly (hand slow I/O to a thread of your own)."""

    def get_observation(self) -> dict[str, Any]:
        """Called on a tick whose observation the request mode wants, after its action."""
        ...

    def send_action(self, action: np.ndarray) -> None:
        """Called on each tick that has a queued action (never on a starved tick)."""
        ...
