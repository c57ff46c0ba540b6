"""Structure-aware mutation: a valid message, changed in one to three places.

A message is a tree of maps, lists, numpy arrays and scalars. The mutator picks a
random node and changes it in a way a buggy or hostile robot might: a number becomes
an extreme (0, -1, 2**53, 2**63, 2**64, 1e308, 5e-324, NaN, inf, ...), a value
changes type, a key goes missing or a new one appears, an array changes dtype or
shape or fills with NaN, an array map lies about its size, containers nest deep or
grow long. :func:`mutate_bytes` then damages the encoded frame itself, now and then.
Deterministic for a given ``numpy.random.Generator``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

EXTREME_NUMBERS: tuple[Any, ...] = (
    0,
    -1,
    1,
    2**31,
    2**53,
    2**53 + 1,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -(2**63),
    10**6,
    0.0,
    -0.0,
    1e-9,
    5e-324,
    1e308,
    -1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
)
"""Numbers that broke or could break range checks."""

ODD_VALUES: tuple[Any, ...] = (
    None,
    "",
    "x" * 300,
    b"",
    b"\x00" * 64,
    [],
    {},
    [None],
    {"__ndarray__": True},
    {b"__ndarray__": True, b"data": b"", b"dtype": "<f4", b"shape": [2**40]},
    {b"__ndarray__": True, b"data": b"\x00" * 8, b"dtype": "|O", b"shape": [1]},
    {b"__npgeneric__": True, b"data": 1.5, b"dtype": "<i8"},
    {"__ndarray_class__": True, "as_npy": b"\x93NUMPY garbage"},
)
"""Values of the wrong type or malformed array maps."""

_ODD_DTYPES = ("float64", "int8", "uint16", "bool", "float16", "int64")


class Mutator:
    """Mutates messages with its own random generator (one per door and seed)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def mutate(self, message: Any) -> Any:
        """A changed deep copy of ``message``: one to three nodes mutated."""
        out = copy.deepcopy(message)
        for _ in range(int(self.rng.integers(1, 4))):
            out = self._mutate_somewhere(out)
        return out

    def _mutate_somewhere(self, root: Any) -> Any:
        """Walk down from ``root`` to a random node and replace it."""
        path: list[tuple[Any, Any]] = []  # (container, key)
        node = root
        while isinstance(node, dict | list) and node and self.rng.random() < 0.7:
            keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
            key = keys[int(self.rng.integers(len(keys)))]
            path.append((node, key))
            node = node[key]
        new = self._mutate_node(node)
        if not path:
            return new
        container, key = path[-1]
        if new is _DELETE:
            del container[key]
        else:
            container[key] = new
        return root

    def _mutate_node(self, node: Any) -> Any:
        ops: list[Callable[[Any], Any]] = [self._extreme, self._odd, self._delete]
        if isinstance(node, dict):
            ops += [self._add_key, self._nest, self._grow]
        elif isinstance(node, list):
            ops += [self._grow, self._nest, self._truncate]
        elif isinstance(node, np.ndarray):
            ops += [self._array_dtype, self._array_shape, self._array_values] * 2
        elif isinstance(node, str):
            ops += [self._long_text]
        return ops[int(self.rng.integers(len(ops)))](node)

    def _extreme(self, _: Any) -> Any:
        return EXTREME_NUMBERS[int(self.rng.integers(len(EXTREME_NUMBERS)))]

    def _odd(self, _: Any) -> Any:
        return copy.deepcopy(ODD_VALUES[int(self.rng.integers(len(ODD_VALUES)))])

    def _delete(self, _: Any) -> Any:
        return _DELETE

    def _add_key(self, node: dict[Any, Any]) -> dict[Any, Any]:
        node[f"extra_{int(self.rng.integers(1000))}"] = self._extreme(None)
        return node

    def _nest(self, node: Any) -> Any:
        for _ in range(int(self.rng.integers(2, 120))):
            node = [node]
        return node

    def _grow(self, node: Any) -> Any:
        count = int(self.rng.choice([10, 1000, 50_000]))
        if isinstance(node, dict):
            return {**node, **{f"k{i}": {} for i in range(count)}}
        return [*node, *([{}] * count)]

    def _truncate(self, node: list[Any]) -> list[Any]:
        return node[: int(self.rng.integers(len(node) + 1))]

    def _long_text(self, _: str) -> str:
        return "\u00e9" * int(self.rng.choice([257, 5000]))

    def _array_dtype(self, node: np.ndarray) -> np.ndarray:
        dtype = _ODD_DTYPES[int(self.rng.integers(len(_ODD_DTYPES)))]
        with np.errstate(all="ignore"):
            return node.astype(dtype)

    def _array_shape(self, node: np.ndarray) -> np.ndarray:
        choice = int(self.rng.integers(4))
        if choice == 0:
            return node.reshape(-1)
        if choice == 1:
            return node[None]
        if choice == 2:
            return node[..., :0]
        return np.zeros((0,), node.dtype)

    def _array_values(self, node: np.ndarray) -> np.ndarray:
        out = np.array(node, dtype=node.dtype if node.dtype.kind == "f" else np.float32)
        if out.size:
            with np.errstate(over="ignore"):  # 1e38 in a float16 array is inf: fine
                out.reshape(-1)[int(self.rng.integers(out.size))] = self.rng.choice(
                    [np.nan, np.inf, -np.inf, 1e38]
                )
        return out


class _Delete:
    """Marker: remove the node from its container."""


_DELETE = _Delete()


def mutate_bytes(frame: bytes, rng: np.random.Generator) -> bytes:
    """``frame`` with bytes flipped, cut short or extended with garbage."""
    data = bytearray(frame)
    choice = int(rng.integers(3))
    if choice == 0 and data:
        for _ in range(int(rng.integers(1, 8))):
            data[int(rng.integers(len(data)))] = int(rng.integers(256))
    elif choice == 1:
        del data[int(rng.integers(len(data) + 1)) :]
    else:
        data += rng.bytes(int(rng.integers(1, 64)))
    return bytes(data)
