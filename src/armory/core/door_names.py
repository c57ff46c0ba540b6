"""The front doors by name: one list for every part that takes a door by name."""

from __future__ import annotations

from typing import Literal, get_args

DoorName = Literal["openpi", "groot", "lerobot"]
"""openpi (WebSocket + msgpack), groot (ZeroMQ) or lerobot (gRPC)."""
DOOR_NAMES: tuple[str, ...] = get_args(DoorName)
