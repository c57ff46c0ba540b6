"""An allowlisting unpickler: pickle payloads that can build nothing but plain data.

Pickle is a small program: its GLOBAL opcodes name any importable callable and its
REDUCE opcodes call it, so ``pickle.loads`` on bytes from the network runs whatever
the sender likes. :func:`safe_loads` refuses every global except an explicit
allowlist of ``(module, name)`` pairs, each mapped to an Armory-side stand-in that
only builds data:

- **numpy** arrays, dtypes and scalars (the ``_reconstruct``/``__setstate__``,
  protocol-5 ``_frombuffer`` and ``scalar`` forms of numpy 1 and 2) of bool, integer
  and float dtypes; object, void, structured and complex dtypes are refused. Arrays
  are built from bytes already in the payload, never from a declared size alone.
- **torch** tensors as ``pickle.dumps`` writes them (``torch._utils._rebuild_tensor_v2``
  over a storage that ``torch.storage._load_from_bytes`` holds in torch's legacy
  serialization format) are rebuilt as numpy arrays without importing torch; strides
  and offsets are checked against the storage before any view is taken.
- **records**: a caller's :class:`PickledRecord` subclasses, stand-ins for the
  sender's plain data classes, filled by BUILD with a state dict of known fields.

Nothing else can be built: no module is imported, no attribute is looked up by a
dotted name, persistent ids are refused outside a torch storage. Any failure is a
:class:`PickleRefused` naming what was wrong.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import pickletools
import re
import struct
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from armory.core.errors import public_text

__all__ = [
    "NUMPY_GLOBALS",
    "PLAIN_GLOBALS",
    "TORCH_GLOBALS",
    "PickleRefused",
    "PickledRecord",
    "safe_loads",
]

_MAX_DEPTH = 100
"""Deepest nesting of containers accepted in a payload."""
MAX_OPCODES = 200_000
"""Most opcodes of one pickle (a LeRobot observation has a few hundred): the scan stops
and refuses the payload there, so that its cost is bounded whatever its size."""
_DTYPE_CODE = re.compile(r"^[biuf]\d{1,2}$")
"""numpy dtype codes a pickle may name: bool, signed and unsigned integers, floats."""


class PickleRefused(ValueError):
    """The payload is not a pickle this server accepts; the message says why."""


class PickledRecord:
    """Stand-in for a sender's plain data class (a dataclass pickled by protocol >= 2).

    Pickle creates it empty (NEWOBJ with no arguments) and fills it from a state dict
    (BUILD); only the names in ``FIELDS`` are accepted, and the values are whatever
    else the allowlist could build. Subclasses name the fields and the class they
    stand for (``UPSTREAM``, for messages).
    """

    FIELDS: ClassVar[frozenset[str]] = frozenset()
    UPSTREAM: ClassVar[str] = ""
    fields: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> PickledRecord:
        if args or kwargs:
            raise PickleRefused(f"{cls.UPSTREAM}: created with arguments")
        record = super().__new__(cls)
        record.fields = {}
        return record

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]
        if not isinstance(state, dict) or not all(isinstance(key, str) for key in state):
            raise PickleRefused(f"{self.UPSTREAM}: its state is not a map of field names")
        unknown = sorted(set(state) - self.FIELDS)
        if unknown:
            raise PickleRefused(
                f"{self.UPSTREAM}: unknown fields {unknown} (known: {sorted(self.FIELDS)})"
            )
        self.fields = dict(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fields!r})"


def safe_loads(
    data: bytes, allowed: Mapping[tuple[str, str], Any], *, max_depth: int = _MAX_DEPTH
) -> Any:
    """Unpickle ``data`` building only what ``allowed`` maps ``(module, name)`` to.

    numpy and torch stand-ins are resolved to arrays in the result. Raises
    PickleRefused for a refused global or any malformed payload.
    """
    try:
        loaded = _Unpickler(io.BytesIO(data), {**PLAIN_GLOBALS, **allowed}).load()
        return _resolve(loaded, max_depth, {})
    except PickleRefused:
        raise
    except Exception as exc:  # a malformed payload: every failure of the unpickler
        raise PickleRefused(
            public_text(f"not a pickle this server accepts ({type(exc).__name__}: {exc})")
        ) from None


class _CheckedUnpickler(pickle.Unpickler):
    """Scans the opcodes of each pickle before running them: a memo index may not exceed
    the opcodes seen so far (a huge one would make the C unpickler allocate its memo)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self._file = file

    def load(self) -> Any:
        start = self._file.tell()
        for count, (opcode, arg, _) in enumerate(pickletools.genops(self._file)):
            if count >= MAX_OPCODES:
                raise PickleRefused(f"the pickle has more than {MAX_OPCODES} opcodes")
            if opcode.name in _MEMO_PUTS and arg > count:
                raise PickleRefused(f"the pickle stores memo entry {arg} after {count} opcodes")
        self._file.seek(start)
        return super().load()


_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


class _Sealed:
    """An internal stand-in that pickle's BUILD may not change."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise PickleRefused(f"the pickle tries to change a {type(self).__name__.strip('_')}")


class _Unpickler(_CheckedUnpickler):
    def __init__(self, file: io.BytesIO, allowed: Mapping[tuple[str, str], Any]) -> None:
        super().__init__(file)
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except (KeyError, TypeError):
            raise PickleRefused(
                f"the pickle asks for {module}.{name}, which this server never builds "
                "(it builds only plain data, numpy arrays, torch tensors and the named "
                "LeRobot data classes)"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise PickleRefused(
            "the pickle holds a persistent id (allowed only inside a torch storage)"
        )


# ---- plain data ----------------------------------------------------------------


def _latin1_bytes(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode(text, "latin1")``: how protocol 2 writes a bytes object."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise PickleRefused("_codecs.encode is allowed only as protocol 2's bytes (latin1)")
    return text.encode("latin1")


def _empty_bytes(*args: Any) -> bytes:
    """``bytes()``: how protocol 2 writes an empty bytes object."""
    if args:
        raise PickleRefused("bytes(...) is allowed only without arguments (protocol 2's b'')")
    return b""


PLAIN_GLOBALS: dict[tuple[str, str], Any] = {
    ("_codecs", "encode"): _latin1_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}
"""Globals that plain data needs in old protocols; always allowed."""


# ---- numpy ---------------------------------------------------------------------


class _DtypeSpec:
    """``numpy.dtype(code, align, copy)`` as pickled; BUILD may only set the byte order."""

    def __init__(self, code: Any, align: Any = False, copy: Any = False) -> None:
        if not isinstance(code, str) or not _DTYPE_CODE.match(code):
            raise PickleRefused(
                f"numpy dtype {code!r} is not allowed (only bool, integer and float dtypes)"
            )
        self.code = code
        self.byteorder = "="

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) < 5 or state[1] not in ("<", ">", "|", "="):
            raise PickleRefused(f"numpy dtype {self.code!r}: unexpected state {state!r:.80}")
        if state[2] is not None or state[3] is not None or state[4] is not None:
            raise PickleRefused(f"numpy dtype {self.code!r}: structured dtypes are not allowed")
        self.byteorder = state[1]

    def dtype(self) -> np.dtype:
        order = "" if self.byteorder in ("|", "=") else self.byteorder
        return np.dtype(order + self.code)


class _NdarrayType(_Sealed):
    """What ``numpy.ndarray`` resolves to: only a marker for ``_reconstruct``."""

    __slots__ = ()


_NDARRAY = _NdarrayType()


class _ArraySpec:
    """``_reconstruct(ndarray, shape, dtype)`` as pickled: the array comes with BUILD."""

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) != 5:
            raise PickleRefused("numpy array: unexpected state")
        _, shape, dtype, is_fortran, raw = state
        self.array = _array_from_bytes(raw, dtype, shape, "F" if is_fortran else "C")


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> _ArraySpec:
    if subtype is not _NDARRAY:
        raise PickleRefused("numpy arrays may only be plain numpy.ndarray (no subclasses)")
    return _ArraySpec()


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    return _array_from_bytes(buffer, dtype, shape, order)


def _scalar(dtype: Any, raw: Any) -> np.generic:
    array = _array_from_bytes(raw, dtype, (), "C")
    return array[()]


def _array_from_bytes(raw: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """An array over ``raw`` (bytes in the payload) after checking every argument."""
    if not isinstance(dtype, _DtypeSpec):
        raise PickleRefused("numpy array: its dtype is not a plain numpy dtype")
    if not isinstance(raw, bytes | bytearray):
        raise PickleRefused("numpy array: its data are not bytes (object arrays are not allowed)")
    dims = _shape(shape)
    if order not in ("C", "F"):
        raise PickleRefused(f"numpy array: order {order!r} is not C or F")
    real = dtype.dtype()
    expected = math.prod(dims) * real.itemsize
    if len(raw) != expected:
        raise PickleRefused(
            f"numpy array: {len(raw)} bytes for shape {dims} of {real} ({expected})"
        )
    return np.frombuffer(raw, dtype=real).reshape(dims, order=order)


def _shape(shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise PickleRefused(f"numpy array: shape {shape!r:.80} is not a tuple of sizes")
    return shape


NUMPY_GLOBALS: dict[tuple[str, str], Any] = {
    **{
        (module, name): factory
        for module in ("numpy.core.multiarray", "numpy._core.multiarray")
        for name, factory in (("_reconstruct", _reconstruct), ("scalar", _scalar))
    },
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _DtypeSpec,
}
"""numpy 1 and 2 names of array, scalar and dtype pickles, mapped to checked stand-ins."""


# ---- torch ---------------------------------------------------------------------

_TORCH_MAGIC = 0x1950A86A20F9469CFC6C
"""First pickle of torch's legacy serialization format."""
_TORCH_PROTOCOL = 1001
_STORAGE_DTYPES = {
    "FloatStorage": "<f4",
    "DoubleStorage": "<f8",
    "HalfStorage": "<f2",
    "LongStorage": "<i8",
    "IntStorage": "<i4",
    "ShortStorage": "<i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}


class _StorageType(_Sealed):
    """``torch.<Kind>Storage`` as named in a storage's persistent id."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: str) -> None:
        self.dtype = np.dtype(dtype)


class _Storage(_Sealed):
    """A torch storage read from its legacy-format bytes: a flat numpy array."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


class _StorageUnpickler(_CheckedUnpickler):
    """Reads the pickles of one legacy-format storage: only storage types are global."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self.declared: dict[str, tuple[np.dtype, int]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        raise PickleRefused(f"a torch storage names {module}.{name} (only storage types allowed)")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"):
            raise PickleRefused(f"a torch storage has an unexpected persistent id {pid!r:.80}")
        kind, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(kind, _StorageType) or not isinstance(key, str):
            raise PickleRefused("a torch storage's persistent id is malformed")
        if not isinstance(numel, int) or numel < 0 or (len(pid) == 6 and pid[5] is not None):
            raise PickleRefused("a torch storage's size is malformed (views are not supported)")
        self.declared[key] = (kind.dtype, numel)
        return key


def _load_storage(data: Any) -> _Storage:
    """``torch.storage._load_from_bytes``: one storage in torch's legacy format (magic,
    protocol, system info, the storage's persistent id, its key list, then per key an
    int64 element count and the raw little-endian elements)."""
    if not isinstance(data, bytes):
        raise PickleRefused("a torch storage is not bytes")
    if data[:2] == b"PK":
        raise PickleRefused("torch storages in the zip format are not supported")
    file = io.BytesIO(data)
    if _StorageUnpickler(file).load() != _TORCH_MAGIC:
        raise PickleRefused("a torch storage lacks torch's magic number")
    if _StorageUnpickler(file).load() != _TORCH_PROTOCOL:
        raise PickleRefused("a torch storage has an unknown protocol version")
    info = _StorageUnpickler(file).load()
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise PickleRefused("a torch storage is not little-endian")
    reader = _StorageUnpickler(file)
    root = reader.load()
    keys = _StorageUnpickler(file).load()
    if keys != [root] or root not in reader.declared:
        raise PickleRefused("a torch storage must hold exactly one storage")
    dtype, numel = reader.declared[root]
    (count,) = struct.unpack("<q", file.read(8).ljust(8, b"\0"))
    raw = file.read()
    if count != numel or len(raw) != numel * dtype.itemsize:
        raise PickleRefused(f"a torch storage declares {numel} elements but holds {len(raw)} bytes")
    return _Storage(np.frombuffer(raw, dtype=dtype))


def _rebuild_tensor(
    storage: Any, offset: Any, size: Any, stride: Any, *_ignored: Any
) -> np.ndarray:
    """``torch._utils._rebuild_tensor_v2`` (and v1): a copy of the strided view, after
    checking that every element it reads lies inside the storage."""
    if not isinstance(storage, _Storage):
        raise PickleRefused("a torch tensor's storage is not a plain torch storage")
    dims, steps = _shape(size), _shape(stride)
    if len(dims) != len(steps) or not isinstance(offset, int) or offset < 0:
        raise PickleRefused("a torch tensor's size, stride or offset is malformed")
    numel = storage.array.size
    count = math.prod(dims)
    if count == 0:
        return np.zeros(dims, dtype=storage.array.dtype)
    last = offset + sum((d - 1) * s for d, s in zip(dims, steps, strict=True))
    if last >= numel or count > numel:
        raise PickleRefused(f"a torch tensor of size {dims} reads outside its storage of {numel}")
    itemsize = storage.array.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage.array[offset:],
        shape=dims,
        strides=tuple(s * itemsize for s in steps),
        writeable=False,
    )
    return np.array(view)


TORCH_GLOBALS: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch.storage", "_load_from_bytes"): _load_storage,
    ("collections", "OrderedDict"): collections.OrderedDict,
}
"""The names ``pickle.dumps(tensor)`` uses (CPU tensors of numpy-compatible dtypes),
mapped to stand-ins that build numpy arrays; torch is never imported."""


# ---- the result ----------------------------------------------------------------


def _resolve(value: Any, depth: int, seen: dict[int, Any]) -> Any:
    """Replace array stand-ins by their arrays, in place for lists, dicts and records."""
    if isinstance(value, _ArraySpec):
        if value.array is None:
            raise PickleRefused("a numpy array in the pickle has no data")
        return value.array
    if isinstance(value, _DtypeSpec | _NdarrayType | _Storage | _StorageType):
        raise PickleRefused("the pickle holds a bare numpy dtype or torch storage")
    if not isinstance(value, list | tuple | dict | set | frozenset | PickledRecord):
        return value
    if id(value) in seen:
        return seen[id(value)]
    if depth <= 0:
        raise PickleRefused(f"the pickle nests containers deeper than {_MAX_DEPTH} levels")
    seen[id(value)] = value
    inner = depth - 1
    if isinstance(value, list):
        value[:] = [_resolve(item, inner, seen) for item in value]
    elif isinstance(value, dict):
        items = [(_resolve(k, inner, seen), _resolve(v, inner, seen)) for k, v in value.items()]
        value.clear()
        value.update(items)
    elif isinstance(value, PickledRecord):
        _resolve(value.fields, inner, seen)
    else:
        resolved = type(value)(_resolve(item, inner, seen) for item in value)
        seen[id(value)] = resolved
        return resolved
    return value
