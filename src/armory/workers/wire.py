"""The server <-> worker wire: length-prefixed JSON control messages, arrays by reference.

Pure functions, no I/O beyond the socket helpers at the end. A control message is a
JSON object framed as a 4-byte big-endian length and its UTF-8 bytes. Array bytes
never travel in it: they lie in a shared memory arena (:mod:`armory.workers.arena`)
and the message describes each one as ``{"dtype": "<f4", "shape": [...], "offset": n}``
(a :data:`ArrayRef`). Text travels inline as ``{"text": "..."}``. Nothing is pickled.

Only the standard library and numpy are imported here: the worker imports this
module under its own interpreter.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_MESSAGE_BYTES = 16 * 2**20
"""Largest control message either side sends or accepts (arrays are not in it)."""
ALIGN_BYTES = 64
"""Every array in the arena starts at a multiple of this (a cache line)."""
_HEADER = struct.Struct(">I")

ArrayRef = dict[str, Any]
"""``{"dtype": str, "shape": list[int], "offset": int}``: an array lying in the arena."""


class WireError(ValueError):
    """A malformed frame or message (a bug on the other side, never a robot's fault)."""


RTC_PREVIOUS = "rtc.previous"
"""Worker-side observation entry of a real-time-chunking request: (rows, action_dim)
float32, the robot's previous plan (its ``rtc_prefix`` then ``rtc_remainder``, in its own
units) zero-padded to the chunk's rows."""
RTC_DELAY = "rtc.delay"
"""Worker-side entry beside :data:`RTC_PREVIOUS`: int64 scalar, d, the frozen rows."""
RTC_EXECUTION_HORIZON = "rtc.execution_horizon"
"""Worker-side entry beside :data:`RTC_PREVIOUS`: int64 scalar, the rows guided by the
previous plan (the configured horizon cut to the plan's length)."""


# ---- framing ---------------------------------------------------------------------


def encode_message(message: Mapping[str, Any]) -> bytes:
    """One frame: 4-byte big-endian length, then the message as compact UTF-8 JSON."""
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    if len(body) > MAX_MESSAGE_BYTES:
        raise WireError(f"control message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return _HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """The message of one frame's body; WireError unless it is a JSON object."""
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"control message is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise WireError(f"control message is a {type(message).__name__}, not an object")
    return message


def body_length(header: bytes) -> int:
    """The body length a 4-byte header announces; WireError past the limit."""
    (length,) = _HEADER.unpack(header)
    if length > MAX_MESSAGE_BYTES:
        raise WireError(f"control message of {length} bytes exceeds {MAX_MESSAGE_BYTES}")
    return length


def send_message(sock: socket.socket, message: Mapping[str, Any]) -> None:
    """Write one frame (blocking)."""
    sock.sendall(encode_message(message))


def recv_message(sock: socket.socket) -> dict[str, Any] | None:
    """Read one frame (blocking, honouring the socket's timeout); None at a clean EOF."""
    header = _recv_exactly(sock, _HEADER.size)
    if header is None:
        return None
    body = _recv_exactly(sock, body_length(header))
    if body is None:
        raise WireError("the connection closed in the middle of a control message")
    return decode_body(body)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        data = sock.recv(size - len(chunks))
        if not data:
            if chunks:
                raise WireError("the connection closed in the middle of a control message")
            return None
        chunks += data
    return bytes(chunks)


# ---- array layout ----------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a batch of observations' arrays go in the arena, and the rest of the message."""

    observations: list[dict[str, Any]]
    """Per observation: key -> :data:`ArrayRef` or ``{"text": str}``."""
    placements: list[tuple[int, np.ndarray]]
    """(offset, array) for every array to copy into the arena."""
    num_bytes: int
    """Arena bytes the arrays use (aligned end of the last one)."""


def align(offset: int) -> int:
    """``offset`` rounded up to a multiple of :data:`ALIGN_BYTES`."""
    return -(-offset // ALIGN_BYTES) * ALIGN_BYTES


def plan_layout(observations: Sequence[Mapping[str, Any]], start: int = 0) -> Layout:
    """Place every array of ``observations`` from arena offset ``start``, key by key (all
    robots' ``image`` arrays next to each other, then the next key), each aligned.

    Values must be numpy arrays (or numpy scalars) of a plain dtype, or str; WireError
    names the key of anything else.
    """
    refs: list[dict[str, Any]] = [{} for _ in observations]
    placements: list[tuple[int, np.ndarray]] = []
    offset = align(start)
    keys = sorted({key for obs in observations for key in obs})
    for key in keys:
        for index, obs in enumerate(observations):
            if key not in obs:
                continue
            value = obs[key]
            if isinstance(value, str):
                refs[index][key] = {"text": value}
                continue
            if isinstance(value, np.generic):
                value = np.asarray(value)
            if not isinstance(value, np.ndarray) or value.dtype.hasobject:
                raise WireError(
                    f"observation {key!r}: a {type(value).__name__} cannot go to a worker "
                    "(numpy arrays and str only)"
                )
            refs[index][key] = array_ref(value, offset)
            placements.append((offset, value))
            offset = align(offset + value.nbytes)
    return Layout(observations=refs, placements=placements, num_bytes=offset)


def array_ref(array: np.ndarray, offset: int) -> ArrayRef:
    """The reference of ``array`` placed at ``offset``."""
    return {"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset}


def view_array(buffer: memoryview | bytearray, ref: ArrayRef) -> np.ndarray:
    """A zero-copy numpy view of the referenced array in ``buffer``; WireError when it
    does not fit or names a refused dtype."""
    try:
        dtype = np.dtype(ref["dtype"])
        shape = tuple(int(dim) for dim in ref["shape"])
        offset = int(ref["offset"])
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"malformed array reference {ref!r}: {exc}") from None
    if dtype.hasobject or dtype.kind == "V" or any(dim < 0 for dim in shape) or offset < 0:
        raise WireError(f"array reference {ref!r} is not a plain array")
    count = int(np.prod(shape, dtype=np.int64))
    if offset + count * dtype.itemsize > len(buffer):
        raise WireError(f"array reference {ref!r} runs past the arena's {len(buffer)} bytes")
    return np.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(shape)


def read_observation(buffer: memoryview | bytearray, refs: Mapping[str, Any]) -> dict[str, Any]:
    """One observation from its message entry: arrays as views of ``buffer``, text as str."""
    out: dict[str, Any] = {}
    for key, ref in refs.items():
        if isinstance(ref, dict) and set(ref) == {"text"} and isinstance(ref["text"], str):
            out[key] = ref["text"]
        elif isinstance(ref, dict):
            out[key] = view_array(buffer, ref)
        else:
            raise WireError(f"observation entry {key!r} is a {type(ref).__name__}, not an object")
    return out
