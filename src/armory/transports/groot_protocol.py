"""The GR00T ZeroMQ wire format: pure functions from frames to requests and back.

A request is one msgpack map with str keys: ``endpoint`` (missing means
``get_action``), ``data`` (endpoints with input) and ``api_token`` (when the
server has one). Arrays travel as ``{"__ndarray_class__": true, "as_npy": <a whole
.npy file>}``, read with ``allow_pickle=False`` (object arrays are refused), and
modality configs as ``{"__ModalityConfig_class__": true, "as_json": ...}``: a map
in Isaac-GR00T N1.6, a JSON string in N1.5. N1.6 sends ``get_action`` data as
``{"observation": obs, "options": ...}`` and gets ``[action, info]`` back; N1.5
sends the flat observation itself and gets the action map alone. See
docs/groot.md.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgpack
import numpy as np
from armory_client.wire import CodecError, unpackb

from armory.core.errors import public_text

Encoding = Literal["n1.6", "n1.5"]
ENCODINGS: tuple[str, ...] = ("auto", "n1.6", "n1.5")
ENDPOINTS: tuple[str, ...] = ("ping", "get_action", "reset", "get_modality_config", "kill")

_NDARRAY_KEY = "__ndarray_class__"
_MODALITY_KEY = "__ModalityConfig_class__"
_REFUSED_KINDS = {"O": "object", "V": "void/structured", "c": "complex"}
UNAUTHORIZED = "Unauthorized: Invalid API token"
"""Upstream's exact message for a missing or wrong token."""


class GrootProtocolError(ValueError):
    """A frame or request that cannot be served; the message goes back as ``{"error": ...}``."""


@dataclass(frozen=True)
class GrootRequest:
    """One decoded request."""

    endpoint: str
    data: Any
    api_token: str | None


def decode_request(frame: bytes, *, max_message_bytes: int | None = None) -> GrootRequest:
    """A request from one frame; GrootProtocolError names what is wrong (a frame over
    ``max_message_bytes`` too). Decoding work is bounded by the frame's size
    (``armory_client.wire.codec.unpackb``)."""
    if max_message_bytes is not None and len(frame) > max_message_bytes:
        raise GrootProtocolError(
            f"frame with {len(frame)} bytes exceeds the limit of {max_message_bytes} bytes "
            "(--server.max-message-bytes)"
        )
    try:
        message = unpackb(frame, object_hook=_decode_obj)
    except CodecError as exc:
        if isinstance(exc.__cause__, GrootProtocolError):
            raise exc.__cause__ from None
        raise GrootProtocolError(f"undecodable request ({len(frame)} bytes): {exc}") from None
    if not isinstance(message, Mapping):
        raise GrootProtocolError(
            f"a request must be a msgpack map with 'endpoint', got {type(message).__name__}"
        )
    endpoint = message.get("endpoint", "get_action")
    if not isinstance(endpoint, str):
        raise GrootProtocolError(f"'endpoint' must be a str, got {type(endpoint).__name__}")
    token = message.get("api_token")
    if token is not None and not isinstance(token, str):
        raise GrootProtocolError(f"'api_token' must be a str, got {type(token).__name__}")
    return GrootRequest(endpoint=endpoint, data=message.get("data"), api_token=token)


def encode_reply(obj: Any) -> bytes:
    """One reply frame: msgpack with arrays as ``.npy`` bytes."""
    return msgpack.packb(obj, default=_encode_obj, use_bin_type=True)


def error_reply(message: str) -> bytes:
    """The ``{"error": ...}`` reply (no heap addresses, bounded length)."""
    return encode_reply({"error": public_text(message)})


def get_action_parts(data: Any, encoding: str) -> tuple[Mapping[str, Any], Encoding]:
    """The observation map of a ``get_action`` request and the encoding it uses.

    N1.6 data is ``{"observation": {...}, "options": ...}``; N1.5 data is the flat
    observation. ``encoding`` "auto" tells them apart by the ``observation`` key.
    """
    if not isinstance(data, Mapping):
        raise GrootProtocolError(f"get_action needs a map as 'data', got {type(data).__name__}")
    nested = "observation" in data
    if encoding == "n1.6" or (encoding == "auto" and nested):
        obs = data.get("observation")
        if not isinstance(obs, Mapping):
            raise GrootProtocolError(
                "N1.6 get_action data must be {'observation': map, 'options': ...}"
            )
        return obs, "n1.6"
    return data, "n1.5"


def reset_encoding(data: Any) -> Encoding | None:
    """The encoding a ``reset`` request reveals: N1.6's client sends ``{"options": ...}``
    (N1.5's client has no ``reset``); None for any other data."""
    return "n1.6" if isinstance(data, Mapping) and "options" in data else None


def modality_config(as_json: Mapping[str, Any], encoding: Encoding) -> dict[str, Any]:
    """One ModalityConfig as the given encoding sends it."""
    payload: Any = dict(as_json) if encoding == "n1.6" else json.dumps(dict(as_json))
    return {_MODALITY_KEY: True, "as_json": payload}


# ---- arrays -------------------------------------------------------------------


def _decode_obj(obj: dict[str, Any]) -> Any:
    if obj.get(_NDARRAY_KEY) is True:
        return _load_npy(obj.get("as_npy"))
    if obj.get(_MODALITY_KEY) is True:
        raw = obj.get("as_json")
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError as exc:
                raise GrootProtocolError(f"ModalityConfig as_json is not JSON: {exc}") from None
        if not isinstance(raw, Mapping):
            raise GrootProtocolError("ModalityConfig as_json must be a map or a JSON string")
        return dict(raw)
    return obj


def _load_npy(data: Any) -> np.ndarray:
    if not isinstance(data, bytes | bytearray):
        raise GrootProtocolError("an __ndarray_class__ map needs 'as_npy' bytes")
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # ValueError for pickled object arrays, others for garbage
        raise GrootProtocolError(
            public_text(f"'as_npy' is not a plain .npy array: {exc}")
        ) from None
    if not isinstance(array, np.ndarray):
        raise GrootProtocolError("'as_npy' must hold one array, not an archive")
    if array.dtype.kind in _REFUSED_KINDS:
        raise GrootProtocolError(
            f"array dtype {array.dtype.str!r} ({_REFUSED_KINDS[array.dtype.kind]}) is refused"
        )
    return array


def _encode_obj(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        buffer = io.BytesIO()
        np.save(buffer, obj, allow_pickle=False)
        return {_NDARRAY_KEY: True, "as_npy": buffer.getvalue()}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__}")
