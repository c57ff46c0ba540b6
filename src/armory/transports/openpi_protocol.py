"""The openpi wire as Armory speaks it: pure functions from frames to maps and back.

No I/O here (see :mod:`armory.transports.openpi_ws` for the socket side), so every
message form has a round-trip test. The codec is the client package's
(``armory_client.wire.codec``): the client owns the contract, the server imports it.
See docs/protocol.md.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

from armory_client.wire import ARMORY_KEY, WIRE_VERSION, CodecError, ReplyState, packb, unpackb

from armory.core.errors import DecodeError
from armory.engine.config import ServerConfig
from armory.engine.server_engine import Reply
from armory.policies.base import PolicyMetadata

ARMORY_INFO_KEY = "armory"
"""Metadata-frame key of the server's own description."""

NOISE_SHA_KEY = "noise_sha256"
"""Metadata-frame and ``policy_timing`` key of the fixed action noise's SHA-256."""

ERROR_CLOSE_CODE = 1011
"""Close code after an error text frame (openpi's: internal error)."""
ERROR_CLOSE_REASON = "request failed; the text frame before this one says why"
REPLACED_CLOSE_CODE = 1008
"""Close code of a connection replaced by a newer one of the same robot (policy violation)."""
MOVED_CLOSE_CODE = 1012
"""Close code of a robot the cluster moved to another replica (service restart: reconnect)."""
MOVED_CLOSE_REASON = "moved to another replica; reconnect through the cluster's front door"


def metadata_map(
    metadata: PolicyMetadata, config: ServerConfig, *, scheduler: str
) -> dict[str, Any]:
    """The first frame of every connection: the policy's declared interface and the
    server's description under ``"armory"`` (policy ``extra`` entries come first;
    ``noise_sha256`` only when the policy's noise is fixed)."""
    noise = {} if metadata.noise_sha256 is None else {NOISE_SHA_KEY: metadata.noise_sha256}
    return {
        **dict(metadata.extra),
        "policy": metadata.name,
        "action_horizon": metadata.action_horizon,
        "action_dim": metadata.action_dim,
        "inputs": {key: spec.to_wire() for key, spec in metadata.inputs.items()},
        **noise,
        ARMORY_INFO_KEY: {
            "version": WIRE_VERSION,
            "server": f"armory {_version()}",
            "state_key": ARMORY_KEY,
            "max_batch_size": config.max_batch_size,
            "scheduler": scheduler,
            "max_message_bytes": config.max_message_bytes,
            "pipelining": True,
            "max_pipelined_requests": config.max_pipelined_requests,
            "plain_client_defaults": {
                "control_hz": config.default_control_hz,
                "min_execution_horizon": config.default_min_execution_horizon,
                "max_execution_horizon": config.default_max_execution_horizon
                or metadata.action_horizon,
                "link_s": config.default_link_s,
            },
        },
    }


def decode_request(frame: bytes | str) -> dict[str, Any]:
    """One request frame to its observation map (``__armory__`` still inside)."""
    if isinstance(frame, str):
        raise DecodeError(
            "expected a binary frame holding a msgpack observation map, got a text frame"
        )
    try:
        obs = unpackb(frame)
    except CodecError as exc:
        raise DecodeError(f"cannot decode the observation: {exc}") from None
    if not isinstance(obs, dict):
        raise DecodeError(f"the observation must be a msgpack map, got {type(obs).__name__}")
    return obs


def reply_map(reply: Reply) -> dict[str, Any]:
    """The reply as openpi sends it, plus ``__armory__`` for Armory clients (the client
    package's `ReplyState` map: version, chunk_start, next_request_index, deferred), and the fixed
    noise's ``noise_sha256`` in ``policy_timing`` when the policy has one."""
    server_timing = {"infer_ms": 1e3 * reply.forward_s, "queue_ms": 1e3 * reply.wait_s}
    if reply.prev_total_s is not None:
        server_timing["prev_total_ms"] = 1e3 * reply.prev_total_s
    message: dict[str, Any] = {
        "actions": reply.actions,
        "server_timing": server_timing,
        "policy_timing": {"infer_ms": 1e3 * reply.policy_s},
    }
    if reply.noise_sha256 is not None:
        message["policy_timing"][NOISE_SHA_KEY] = reply.noise_sha256
    if reply.is_armory:
        state = ReplyState(
            chunk_start=reply.chunk_start,
            next_request_index=reply.next_request_index,
            deferred=reply.deferred,
        )
        message[ARMORY_KEY] = state.to_wire()
    return message


def encode_reply(reply: Reply) -> bytes:
    return packb(reply_map(reply))


def encode_metadata(metadata: Mapping[str, Any]) -> bytes:
    return packb(dict(metadata))


def _version() -> str:
    try:
        return importlib.metadata.version("armory")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
