"""The batch sizes a scheduler weighs: every size up to 16, then roughly geometric steps."""

from __future__ import annotations

import functools

import numpy as np

DENSE_SIZES = 16
"""Up to this max batch size every size is a candidate; past it a geometric subset."""


@functools.lru_cache(maxsize=64)
def candidate_sizes(max_size: int) -> np.ndarray:
    """Batch sizes to evaluate: all up to 16, then roughly geometric steps and the max
    (read-only; the same array for the same ``max_size``)."""
    if max_size <= DENSE_SIZES:
        return read_only(np.arange(1, max_size + 1))
    sizes = set(range(1, DENSE_SIZES + 1))
    size = DENSE_SIZES
    while size < max_size:
        size = int(size * 1.5)
        sizes.add(min(size, max_size))
    sizes.add(max_size)
    return read_only(np.array(sorted(sizes)))


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only (for arrays shared through a cache)."""
    array.flags.writeable = False
    return array
