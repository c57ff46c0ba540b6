"""The wire codec: msgpack with numpy arrays, byte-compatible with openpi's msgpack_numpy.

Format (no msgpack ExtType; every key below is msgpack *bin*, not str):

- an ndarray becomes ``{b"__ndarray__": True, b"data": <C-order bytes>,
  b"dtype": dtype.str, b"shape": [..]}`` in that key order;
- a numpy scalar becomes ``{b"__npgeneric__": True, b"data": item(), b"dtype": dtype.str}``,
  except those that subclass a Python type msgpack already knows (np.float64, np.str_,
  np.bytes_), which go out as a plain msgpack float, str or bin;
- everything else is plain msgpack, packed with ``use_bin_type=True`` and unpacked with
  ``raw=False, strict_map_key=True`` (map keys must be str or bytes; tuples come back
  as lists).

Decoding is bounded by the message's size: at most `max_items` container entries in
all (maps and arrays together, each container counting one more), at most `max_maps`
maps (each one a Python call to rebuild arrays), strings and bins no longer than the
message, no msgpack ExtType; so a small message of many empty maps cannot cost a
hundred times its size in memory, nor a fraction of a second of decoding.

Dtype kinds V (void/structured), O (object) and c (complex) are refused on both ends,
and so is any other kind whose bytes are not plain values (e.g. numpy 2's StringDType).
Unlike openpi, decoding validates every array map, and every failure is a `CodecError`.
Decoded arrays are read-only views of the received bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from armory_client.errors import CodecError

__all__ = ["max_items", "max_maps", "packb", "unpackb"]

MIN_ITEMS = 65_536
"""Container entries any message may hold, however small."""
BYTES_PER_ITEM = 256
"""A message may hold one container entry more per this many bytes of its size limit."""
MIN_MAPS = 1024
"""Maps any message may hold, however small (an observation has a few dozen)."""
BYTES_PER_MAP = 1024
"""A message may hold one map more per this many bytes of its size limit."""

# Map keys of the encoded forms (bin on the wire).
_NDARRAY = b"__ndarray__"
_NPGENERIC = b"__npgeneric__"
_DATA = b"data"
_DTYPE = b"dtype"
_SHAPE = b"shape"

# Dtype kinds whose bytes mean nothing (or something unsafe) on another machine.
_REFUSED_KINDS = {"V": "void/structured", "O": "object", "c": "complex"}
# Dtype kinds the codec carries: bool, signed/unsigned int, float, bytes, unicode,
# timedelta, datetime.
_ALLOWED_KINDS = frozenset("biufSUmM")
# Longest dtype string accepted on decode (dtype.str is at most ~12 characters).
_MAX_DTYPE_CHARS = 64


def packb(obj: Any) -> bytes:
    """Encode `obj` (maps, lists, scalars, numpy arrays and scalars) to msgpack bytes."""
    try:
        return msgpack.packb(obj, default=_encode_numpy, use_bin_type=True)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot encode object: {exc}") from exc


def max_items(max_message_bytes: int) -> int:
    """Most container entries (all maps and arrays together) a message of at most
    `max_message_bytes` may decode to."""
    return max(MIN_ITEMS, max_message_bytes // BYTES_PER_ITEM)


def max_maps(max_message_bytes: int) -> int:
    """Most maps a message of at most `max_message_bytes` may decode to."""
    return max(MIN_MAPS, max_message_bytes // BYTES_PER_MAP)


def unpackb(
    data: bytes,
    *,
    max_message_bytes: int | None = None,
    object_hook: Callable[[dict[Any, Any]], Any] | None = None,
) -> Any:
    """Decode msgpack bytes made by `packb` (or by openpi), rebuilding numpy values.

    Work is bounded by `max_message_bytes` (default: the size of `data`): see
    `max_items`. `object_hook` replaces the codec's own map hook (another protocol's
    array form); a CodecError names whatever was wrong.
    """
    limit = len(data) if max_message_bytes is None else max_message_bytes
    budget = _Budget(max_items(limit), max_maps(limit))
    hook = object_hook or _decode_map
    try:
        return msgpack.unpackb(
            data,
            object_hook=lambda obj: hook(budget.take_map(obj)),
            list_hook=budget.take,
            raw=False,
            strict_map_key=True,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=budget.max_items,
            max_map_len=budget.max_items,
            max_ext_len=0,
        )
    except CodecError:
        raise
    except (TypeError, ValueError, msgpack.UnpackException) as exc:
        raise CodecError(f"malformed msgpack message ({type(exc).__name__}): {exc}") from exc


class _Budget:
    """Container entries and maps a message may still decode to (called for every map
    and array)."""

    def __init__(self, max_items: int, max_maps: int) -> None:
        self.max_items = max_items
        self.max_maps = max_maps
        self._left = max_items
        self._maps_left = max_maps

    def take_map(self, container: dict[Any, Any]) -> dict[Any, Any]:
        self._maps_left -= 1
        if self._maps_left < 0:
            raise CodecError(f"the message holds more than {self.max_maps} maps")
        return self.take(container)

    def take(self, container: Any) -> Any:
        self._left -= len(container) + 1
        if self._left < 0:
            raise CodecError(f"the message holds more than {self.max_items} map and array entries")
        return container


def _encode_numpy(obj: Any) -> dict[bytes, Any]:
    """Called by msgpack for each object it cannot pack itself."""
    if isinstance(obj, np.ndarray):
        _check_dtype(obj.dtype, "cannot encode ndarray")
        return {_NDARRAY: True, _DATA: obj.tobytes(), _DTYPE: obj.dtype.str, _SHAPE: obj.shape}
    if isinstance(obj, np.generic):
        _check_dtype(obj.dtype, "cannot encode numpy scalar")
        return {_NPGENERIC: True, _DATA: obj.item(), _DTYPE: obj.dtype.str}
    if isinstance(obj, int):
        raise CodecError(f"cannot encode int {obj}: outside msgpack's 64-bit range")
    raise CodecError(f"cannot encode object of type {type(obj).__qualname__}")


def _decode_map(obj: dict[Any, Any]) -> Any:
    """Called by msgpack for each decoded map: rebuilds arrays and numpy scalars."""
    if _NDARRAY in obj:
        return _decode_ndarray(obj)
    if _NPGENERIC in obj:
        return _decode_generic(obj)
    return obj


def _decode_ndarray(obj: dict[Any, Any]) -> np.ndarray:
    """Rebuild a read-only ndarray from its map, after checking every field."""
    data = _field(obj, _DATA, "ndarray")
    if not isinstance(data, bytes):
        raise CodecError(f"ndarray 'data' must be bin, got {type(data).__name__}")
    dtype = _parse_dtype(_field(obj, _DTYPE, "ndarray"))
    shape = _parse_shape(_field(obj, _SHAPE, "ndarray"))
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise CodecError(
            f"ndarray 'data' holds {len(data)} bytes, but shape {shape} of dtype "
            f"{dtype.str!r} needs {expected}"
        )
    try:
        # Backed by the immutable bytes object, so the array is read-only.
        return np.ndarray(shape=shape, dtype=dtype, buffer=data)
    except (TypeError, ValueError) as exc:
        raise CodecError(
            f"cannot build ndarray of shape {shape}, dtype {dtype.str!r}: {exc}"
        ) from exc


def _decode_generic(obj: dict[Any, Any]) -> np.generic:
    """Rebuild a numpy scalar from its map, checking the value matches the dtype."""
    dtype = _parse_dtype(_field(obj, _DTYPE, "numpy scalar"))
    value = _field(obj, _DATA, "numpy scalar")
    expected = {
        "b": (bool,),
        "i": (int,),
        "u": (int,),
        "f": (float, int),
        "S": (bytes,),
        "U": (str,),
        "m": (int,),
        "M": (int,),
    }[dtype.kind]
    if not isinstance(value, expected) or (isinstance(value, bool) and dtype.kind != "b"):
        raise CodecError(
            f"numpy scalar of dtype {dtype.str!r} cannot hold a {type(value).__name__} value"
        )
    try:
        if dtype.kind in "mM":
            # item() of a nanosecond datetime is an int, which needs the unit to rebuild.
            return np.array(value, dtype=dtype)[()]
        return dtype.type(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot build numpy scalar of dtype {dtype.str!r}: {exc}") from exc


def _field(obj: dict[Any, Any], key: bytes, what: str) -> Any:
    """Return `obj[key]`, or raise a CodecError naming the missing field."""
    try:
        return obj[key]
    except KeyError:
        raise CodecError(f"{what} map lacks its {key.decode()!r} field") from None


def _parse_dtype(text: Any) -> np.dtype:
    """Parse a dtype string from the wire, refusing everything but plain value kinds."""
    if not isinstance(text, str) or len(text) > _MAX_DTYPE_CHARS:
        raise CodecError(f"'dtype' must be a short str, got {text!r:.80}")
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise CodecError(f"unknown dtype {text!r}: {exc}") from exc
    _check_dtype(dtype, "cannot decode")
    return dtype


def _parse_shape(shape: Any) -> tuple[int, ...]:
    """Check a wire shape is a list of non-negative ints and return it as a tuple."""
    if not isinstance(shape, list | tuple):
        raise CodecError(f"ndarray 'shape' must be an array, got {type(shape).__name__}")
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise CodecError(f"ndarray 'shape' must hold non-negative ints, got {list(shape)}")
    return tuple(shape)


def _check_dtype(dtype: np.dtype, context: str) -> None:
    """Raise a CodecError naming `dtype` unless its kind is a plain value kind."""
    if dtype.kind in _REFUSED_KINDS:
        raise CodecError(
            f"{context}: dtype {dtype.str!r} ({_REFUSED_KINDS[dtype.kind]}) is not allowed "
            "on the wire"
        )
    if dtype.kind not in _ALLOWED_KINDS or dtype.hasobject:
        raise CodecError(f"{context}: dtype {dtype!r} (kind {dtype.kind!r}) is not supported")
