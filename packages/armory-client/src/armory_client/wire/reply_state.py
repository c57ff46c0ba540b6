"""Armory's reserved reply key: where a chunk belongs and when to ask again.

An Armory server adds one map under `ARMORY_KEY` to each action map it sends; an
upstream openpi server adds nothing. `parse_reply` turns either into the actions
and a `ReplyState`, so the runtime handles both alike.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from armory_client.errors import ProtocolError
from armory_client.wire.queue_state import ARMORY_KEY, WIRE_VERSION

__all__ = ["ACTIONS_KEY", "ReplyState", "parse_reply"]

ACTIONS_KEY = "actions"
"""Reply key of the (action_horizon, action_dim) chunk, as in openpi."""

_VERSION_KEY = "version"


@dataclasses.dataclass(frozen=True)
class ReplyState:
    """What an Armory server says about the chunk in one reply (checked on construction)."""

    chunk_start: int
    """Action index of the chunk's first row: the `action_index` the robot reported
    with the observation the chunk was computed from."""
    next_request_index: int | None = None
    """Directed mode: the action index at which the robot should send its next
    observation; None when the server gives no direction."""
    deferred: bool = False
    """No chunk: no batch took the observation within its `defer_after_s` (every-tick
    mode); the robot sends a newer one. The reply's actions are then empty."""

    def __post_init__(self) -> None:
        if not isinstance(self.deferred, bool):
            raise ValueError(f"ReplyState.deferred must be a bool, got {self.deferred!r}")
        for name, optional in [("chunk_start", False), ("next_request_index", True)]:
            value = getattr(self, name)
            if value is None and optional:
                continue
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
                raise ValueError(f"ReplyState.{name} must be an int >= 0, got {value!r}")
            object.__setattr__(self, name, int(value))

    def to_wire(self) -> dict[str, Any]:
        """The map a server sends under `ARMORY_KEY` in its reply."""
        return {_VERSION_KEY: WIRE_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_wire(cls, wire: Any) -> ReplyState:
        """Parse a map made by `to_wire`; unknown keys are ignored (newer servers may add
        some), a ValueError names a bad version or a missing or bad field."""
        if not isinstance(wire, Mapping):
            raise ValueError(f"reply {ARMORY_KEY} must be a map, got {type(wire).__name__}")
        version = wire.get(_VERSION_KEY, WIRE_VERSION)
        if version != WIRE_VERSION:
            raise ValueError(f"reply {ARMORY_KEY} version {version!r} is not {WIRE_VERSION}")
        if "chunk_start" not in wire:
            raise ValueError(f"reply {ARMORY_KEY} lacks 'chunk_start'")
        return cls(
            chunk_start=wire["chunk_start"],
            next_request_index=wire.get("next_request_index"),
            deferred=wire.get("deferred", False),
        )


def parse_reply(reply: Mapping[str, Any], *, sent_index: int) -> tuple[np.ndarray, ReplyState]:
    """Split a reply to the observation sent at action index `sent_index` into its
    chunk and its `ReplyState`.

    A reply without `ARMORY_KEY` (a plain openpi server) gets
    ``ReplyState(chunk_start=sent_index)``; a deferred reply carries no chunk (its
    actions are not used). Raises ProtocolError when the actions of a chunk
    are not a non-empty 2-D numeric array, when the Armory map is malformed, or
    when its chunk start is not `sent_index` (the chunk would land on the wrong
    indices).
    """
    actions = reply.get(ACTIONS_KEY)
    if not isinstance(actions, np.ndarray):
        raise ProtocolError(f"reply lacks an {ACTIONS_KEY!r} array (keys: {sorted(reply)})")
    state = _armory_state(reply, sent_index)
    if state.deferred:
        return actions, state
    if actions.ndim != 2 or len(actions) == 0 or actions.dtype.kind not in "biuf":
        raise ProtocolError(
            f"reply {ACTIONS_KEY!r} must be a non-empty 2-D numeric array, got shape "
            f"{actions.shape} dtype {actions.dtype.str!r}"
        )
    return actions, state


def _armory_state(reply: Mapping[str, Any], sent_index: int) -> ReplyState:
    """The reply's `ReplyState` (``chunk_start=sent_index`` for a plain openpi server)."""
    if ARMORY_KEY not in reply:
        return ReplyState(chunk_start=sent_index)
    try:
        state = ReplyState.from_wire(reply[ARMORY_KEY])
    except ValueError as exc:
        raise ProtocolError(str(exc)) from exc
    if state.chunk_start != sent_index:
        raise ProtocolError(
            f"reply chunk_start {state.chunk_start} is not the action index {sent_index} "
            "the observation was sent with"
        )
    return state
