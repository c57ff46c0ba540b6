"""Decoding a large frame off the event loop, so that other robots' frames keep moving.

Every door decodes a small frame where it reads it (a thread hand-off costs more than
the decode). A frame over :data:`OFF_LOOP_BYTES` is decoded in a worker thread of the
loop's default executor (a handful of threads: concurrent large decodes queue there,
they never occupy the loop). The decode itself is bounded by the frame's size (the
codec's item budget, the unpickler's opcode budget).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

OFF_LOOP_BYTES = 1 << 20
"""Frames larger than this are decoded in a worker thread."""

RECEIVE_HEADROOM = 2
"""A door that can only refuse a frame after receiving it (GR00T's ZeroMQ) receives frames
up to this many times the message limit, so that an oversize frame still gets an error
reply; beyond it the transport drops the connection."""


async def decode_off_loop(decode: Callable[[bytes], T], frame: bytes) -> T:
    """``decode(frame)``: at once for a small frame, in a worker thread for a large one.
    Called by a door's handler for each frame it reads."""
    if len(frame) <= OFF_LOOP_BYTES:
        return decode(frame)
    return await asyncio.to_thread(decode, frame)
