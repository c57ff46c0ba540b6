"""Observations a synthetic robot sends: whatever the server's metadata declares.

Camera-like inputs (integer or bool arrays, e.g. two 224x224x3 uint8 images) come
from a small bank of random frames made once for the whole fleet, so a robot
costs no image synthesis per tick; float inputs (the state vector) are drawn
fresh for every observation from a generator seeded by (seed, robot, step), so
no two observations of a fleet are alike and the mock policy's chunk of each is
distinct. Optional inputs are left out; a required text input gets a fixed prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

TEXT_DTYPE = "str"
"""Metadata dtype of a text input (``armory.policies.base.STR_DTYPE``)."""

_PROMPT = "armory fleet runner"


class ObservationFactory:
    """Makes observations matching a server's declared inputs (its metadata ``inputs`` map)."""

    def __init__(
        self, inputs: Mapping[str, Mapping[str, Any]], *, seed: int = 0, num_frames: int = 8
    ) -> None:
        """Raises ValueError naming an input whose declaration cannot be read."""
        if num_frames < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        self.seed = seed
        self.num_frames = num_frames
        self._frames: dict[str, list[np.ndarray]] = {}
        self._fresh: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self._text: dict[str, str] = {}
        rng = np.random.default_rng([seed, 0xF1EE7])
        for key, spec in sorted(inputs.items()):
            if not isinstance(spec, Mapping) or not spec.get("required", True):
                continue
            dtype_name = spec.get("dtype")
            if dtype_name == TEXT_DTYPE:
                self._text[key] = _PROMPT
                continue
            try:
                dtype = np.dtype(dtype_name)
                shape = tuple(1 if d is None else int(d) for d in spec.get("shape") or ())
            except (TypeError, ValueError) as exc:
                raise ValueError(f"declared input {key!r} is unreadable: {spec!r}") from exc
            if dtype.kind == "f":
                self._fresh[key] = (shape, dtype)
            elif dtype.kind in "biu":
                self._frames[key] = [_random_array(rng, shape, dtype) for _ in range(num_frames)]
            else:
                raise ValueError(f"declared input {key!r} has dtype {dtype.str!r}; cannot make it")

    def make(self, robot_index: int, step: int) -> dict[str, Any]:
        """Observation ``step`` of robot ``robot_index``: the same pair gives the same map."""
        obs: dict[str, Any] = dict(self._text)
        frame = (robot_index + step) % self.num_frames
        for key, frames in self._frames.items():
            obs[key] = frames[frame]
        if self._fresh:
            rng = np.random.default_rng([self.seed, robot_index, step])
            for key, (shape, dtype) in self._fresh.items():
                obs[key] = rng.standard_normal(shape).astype(dtype)
        return obs


def _random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
