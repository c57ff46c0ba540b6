"""The wire codec: round trips, the exact openpi byte layout, and refusals."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from armory_client import CodecError, packb, unpackb

DTYPES = [
    "|b1",
    "|i1",
    "<i2",
    "<i4",
    "<i8",
    "|u1",
    "<u2",
    "<u4",
    "<u8",
    "<f2",
    "<f4",
    "<f8",
    ">f8",
    ">i4",
    "|S5",
    "<U3",
    "<M8[ns]",
    "<m8[ms]",
]
SHAPES = [(), (0,), (3,), (2, 3), (2, 0, 4), (1, 1, 1, 1)]


def _sample(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A deterministic array of `dtype` and `shape` with distinct values."""
    values = np.asarray(np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) % 100)
    dt = np.dtype(dtype)
    if dt.kind in "SU":
        return values.astype(str).astype(dt)
    return values.astype(dt)


def _bin_key(text: str) -> bytes:
    """A msgpack bin8 item holding `text` (how openpi writes its array map keys)."""
    return bytes([0xC4, len(text)]) + text.encode()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_array_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    """Arrays of every carried dtype and shape (0-d and empty included) come back equal."""
    array = _sample(dtype, shape)
    decoded = unpackb(packb(array))
    assert isinstance(decoded, np.ndarray)
    assert decoded.dtype == array.dtype
    assert decoded.shape == array.shape
    np.testing.assert_array_equal(decoded, array)


def test_nested_structures_round_trip() -> None:
    """Maps and lists of arrays, scalars and plain values survive; tuples become lists."""
    obs = {
        "images": {"cam": np.zeros((4, 5, 3), np.uint8)},
        "state": np.array([0.5, -1.0, np.nan, np.inf], np.float32),
        "prompt": "pick up the cup",
        "step": 3,
        "flags": [True, None, 2.5],
        "pair": (1, 2),
        "raw": b"\x00\xff",
    }
    decoded = unpackb(packb(obs))
    assert decoded.keys() == obs.keys()
    np.testing.assert_array_equal(decoded["images"]["cam"], obs["images"]["cam"])
    np.testing.assert_array_equal(decoded["state"], obs["state"])
    assert decoded["prompt"] == "pick up the cup"
    assert decoded["step"] == 3
    assert decoded["flags"] == [True, None, 2.5]
    assert decoded["pair"] == [1, 2]
    assert decoded["raw"] == b"\x00\xff"


@pytest.mark.parametrize(
    "scalar",
    [
        np.bool_(True),
        np.int8(-5),
        np.int64(2**40),
        np.uint64(2**63),
        np.float16(0.5),
        np.float32(1.5),
        np.datetime64(7, "ns"),
    ],
    ids=repr,
)
def test_numpy_scalar_round_trip(scalar: np.generic) -> None:
    """Numpy scalars outside Python's own types come back with their dtype."""
    decoded = unpackb(packb(scalar))
    assert isinstance(decoded, np.generic)
    assert decoded.dtype == scalar.dtype
    assert decoded == scalar


def test_python_subclass_scalars_go_out_plain() -> None:
    """np.float64 and np.str_ are sent as plain msgpack float and str, as openpi does."""
    assert packb(np.float64(1.5)) == msgpack.packb(1.5)
    assert packb(np.str_("hi")) == msgpack.packb("hi")
    assert type(unpackb(packb(np.float64(1.5)))) is float


def test_golden_bytes_for_tiny_array() -> None:
    """A uint8 [1, 2] array encodes to the exact bytes openpi's packb gives (derived by hand)."""
    golden = (
        b"\x84"  # fixmap, 4 entries
        + _bin_key("__ndarray__")
        + b"\xc3"  # true
        + _bin_key("data")
        + b"\xc4\x02\x01\x02"  # bin8, 2 bytes: 1, 2
        + _bin_key("dtype")
        + b"\xa3|u1"  # fixstr "|u1"
        + _bin_key("shape")
        + b"\x91\x02"  # fixarray [2]
    )
    assert packb(np.array([1, 2], dtype=np.uint8)) == golden
    np.testing.assert_array_equal(unpackb(golden), [1, 2])


def test_golden_bytes_for_numpy_scalars() -> None:
    """An int32 scalar is a 3-entry bin-keyed map; a float32 scalar's value goes as float64."""
    int_golden = (
        b"\x83"
        + _bin_key("__npgeneric__")
        + b"\xc3"
        + _bin_key("data")
        + b"\x07"  # positive fixint 7
        + _bin_key("dtype")
        + b"\xa3<i4"
    )
    assert packb(np.int32(7)) == int_golden
    float_golden = (
        b"\x83"
        + _bin_key("__npgeneric__")
        + b"\xc3"
        + _bin_key("data")
        + b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00"  # float64 1.5
        + _bin_key("dtype")
        + b"\xa3<f4"
    )
    assert packb(np.float32(1.5)) == float_golden


def test_array_map_keys_are_bin_on_the_wire() -> None:
    """Inspected with plain msgpack, the array map has bytes keys and a str dtype."""
    raw = msgpack.unpackb(packb(np.ones((2, 3), np.float32)), raw=False)
    assert list(raw) == [b"__ndarray__", b"data", b"dtype", b"shape"]
    assert raw[b"__ndarray__"] is True
    assert raw[b"dtype"] == "<f4"
    assert raw[b"shape"] == [2, 3]
    assert len(raw[b"data"]) == 24


def test_non_contiguous_arrays_are_sent_in_c_order() -> None:
    """Fortran-ordered and strided arrays go out as their C-order bytes."""
    base = np.arange(12, dtype=np.int16).reshape(3, 4)
    for array in (np.asfortranarray(base), base[:, ::2], base.T):
        raw = msgpack.unpackb(packb(array), raw=False)
        assert raw[b"data"] == np.ascontiguousarray(array).tobytes()
        np.testing.assert_array_equal(unpackb(packb(array)), array)


def test_decoded_arrays_are_read_only() -> None:
    """A decoded array cannot be written in place."""
    decoded = unpackb(packb(np.zeros(3)))
    assert not decoded.flags.writeable
    with pytest.raises(ValueError):
        decoded[0] = 1.0


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array([None, 1], dtype=object), "object"),
        (np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]), "void"),
        (np.zeros(2, dtype="V4"), "void"),
        (np.array([1 + 2j]), "complex"),
        (np.complex64(1j), "complex"),
        ({1, 2}, "set"),
        (2**70, "64-bit"),
    ],
    ids=["object", "structured", "void", "complex", "complex-scalar", "set", "big-int"],
)
def test_encode_refuses(value: object, match: str) -> None:
    """Object, void and complex dtypes (and non-msgpack values) raise CodecError."""
    with pytest.raises(CodecError, match=match):
        packb(value)


_DROP = object()


def _array_map(**fields: object) -> bytes:
    """Raw msgpack of an ndarray map for a float32 [3] array, with `fields` overridden."""
    body: dict[bytes, object] = {
        b"__ndarray__": True,
        b"data": bytes(12),
        b"dtype": "<f4",
        b"shape": [3],
    }
    for key, value in fields.items():
        if value is _DROP:
            del body[key.encode()]
        else:
            body[key.encode()] = value
    return msgpack.packb(body, use_bin_type=True)


def test_valid_hand_made_map_decodes() -> None:
    """The reference map used by the malformed cases below decodes fine."""
    np.testing.assert_array_equal(unpackb(_array_map()), np.zeros(3, np.float32))


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"dtype": "|O"}, "object"),
        ({"dtype": "|V4"}, "void"),
        ({"dtype": "<c8", "data": bytes(24)}, "complex"),
        ({"dtype": "i4,f4"}, "void"),
        ({"dtype": "T"}, "not supported"),
        ({"dtype": "garbage"}, "unknown dtype"),
        ({"dtype": 5}, "'dtype' must be"),
        ({"dtype": "<f4" * 30}, "'dtype' must be"),
        ({"data": bytes(11)}, "holds 11 bytes.*needs 12"),
        ({"data": bytes(16)}, "holds 16 bytes"),
        ({"data": "not bytes"}, "'data' must be bin"),
        ({"data": _DROP}, "lacks its 'data'"),
        ({"shape": [-3]}, "non-negative"),
        ({"shape": [3, -1]}, "non-negative"),
        ({"shape": [True, 3]}, "non-negative"),
        ({"shape": [1.5]}, "non-negative"),
        ({"shape": 3}, "'shape' must be an array"),
        ({"shape": _DROP}, "lacks its 'shape'"),
    ],
)
def test_decode_rejects_malformed_array_maps(fields: dict[str, object], match: str) -> None:
    """Bad dtype, data length, shape or missing fields give a CodecError saying which."""
    with pytest.raises(CodecError, match=match):
        unpackb(_array_map(**fields))


@pytest.mark.parametrize(
    ("dtype", "value", "match"),
    [
        ("<c16", 1.0, "complex"),
        ("|O", 1, "object"),
        ("|b1", 1, "cannot hold a int"),
        ("<i4", 1.5, "cannot hold a float"),
        ("<i4", True, "cannot hold a bool"),
        ("|i1", 300, "cannot build numpy scalar"),
    ],
)
def test_decode_rejects_malformed_scalar_maps(dtype: str, value: object, match: str) -> None:
    """A numpy-scalar map with a refused dtype or a value of the wrong type is a CodecError."""
    raw = msgpack.packb({b"__npgeneric__": True, b"data": value, b"dtype": dtype})
    with pytest.raises(CodecError, match=match):
        unpackb(raw)


@pytest.mark.parametrize(
    "raw",
    [b"\xc1", b"\x92\x01", msgpack.packb([1]) + b"\x00", msgpack.packb({1: 2})],
    ids=["reserved-byte", "truncated", "extra-data", "int-key"],
)
def test_decode_rejects_malformed_msgpack(raw: bytes) -> None:
    """Invalid, truncated or trailing bytes and non-str map keys are CodecErrors."""
    with pytest.raises(CodecError, match="malformed msgpack"):
        unpackb(raw)


def test_codec_error_is_a_value_error() -> None:
    """Callers catching ValueError also catch codec failures."""
    assert issubclass(CodecError, ValueError)
