"""The worker side's model interface: what ``worker_main`` drives in the worker process.

Standard library and numpy only (a backend module may import its own libraries).
"""

from __future__ import annotations

import abc
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BackendInfo:
    """What a backend declares once it is built; becomes the server's PolicyMetadata."""

    name: str
    """Short policy name for the metadata frame and logs."""
    action_horizon: int
    """Rows of every chunk."""
    action_dim: int
    """Columns of every chunk."""
    inputs: Mapping[str, Mapping[str, Any]]
    """Declared inputs by key: ``{"shape": [int | None, ...], "dtype": str, "required":
    bool}`` (``InputSpec``'s fields; dtype ``"str"`` for text)."""
    noise_shape: tuple[int, ...] | None = None
    """Shape of the per-sample noise the model starts from, when it takes fixed noise."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """JSON-able entries for the metadata frame (e.g. the LeRobot policy type)."""

    def to_message(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action_horizon": self.action_horizon,
            "action_dim": self.action_dim,
            "inputs": {key: dict(spec) for key, spec in self.inputs.items()},
            "noise_shape": None if self.noise_shape is None else list(self.noise_shape),
            "extra": dict(self.extra),
        }


class Backend(abc.ABC):
    """A model in the worker process: built from JSON options, one batch at a time."""

    @abc.abstractmethod
    def info(self) -> BackendInfo:
        """Called once after the backend is built (it may run a forward pass to find out)."""

    def set_noise(self, noise: np.ndarray | None) -> None:
        """Called once before serving with the fixed per-sample noise (``info().noise_shape``,
        float32), or None for the model's own random noise."""
        if noise is not None:
            raise ValueError(f"{self.info().name} takes no fixed noise")

    @abc.abstractmethod
    def infer(self, observations: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """One forward pass: ``len(observations)`` maps of arrays (read-only views, valid only
        during the call) and str; returns (batch, action_horizon, action_dim) float32."""

    def example_observation(self) -> dict[str, Any]:
        """A valid observation of zeros (and empty text) for warm-up and profiling."""
        out: dict[str, Any] = {}
        for key, spec in self.info().inputs.items():
            if spec["dtype"] == "str":
                out[key] = ""
            elif spec.get("required", True):
                shape = tuple(1 if dim is None else dim for dim in spec["shape"])
                out[key] = np.zeros(shape, dtype=spec["dtype"])
        return out

    def peak_memory_bytes(self) -> int | None:
        """Peak memory of the model so far (called after each batch): the worker process's
        peak resident set, by default; a GPU backend reports its device's allocations."""
        return peak_rss_bytes()

    def close(self) -> None:  # noqa: B027
        """Called once before the worker exits."""


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size in bytes (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS: bytes; Linux: KiB
