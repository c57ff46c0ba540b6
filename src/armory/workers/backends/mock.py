"""The ``mock`` worker backend: numpy only, for testing the worker machinery without torch.

Actions are a pure function of each observation's declared inputs
(:func:`worker_mock_actions`), so a test can recompute every chunk. A forward pass
lasts ``intercept_s + slope_s * batch`` (slept; the first at each batch size
``cold_pass_s`` longer, as a new input shape often runs on a GPU). With ``fault_key``
set, a text input of that name makes the worker misbehave on purpose (tests only; off
by default):
``crash`` (SIGKILL itself), ``exit`` (exit code 3), ``hang`` (sleep for an hour),
``raise`` (a ValueError for the batch).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from armory.workers.backends.base import Backend, BackendInfo


def make_backend(options: dict[str, Any]) -> MockBackend:
    return MockBackend(**options)


class MockBackend(Backend):
    """A hash of each observation, after a latency that grows with the batch."""

    def __init__(
        self,
        *,
        action_horizon: int = 10,
        action_dim: int = 7,
        image_keys: Sequence[str] = ("observation/image",),
        image_shape: Sequence[int] = (96, 96, 3),
        state_key: str = "observation/state",
        state_dim: int = 8,
        intercept_s: float = 0.0,
        slope_s: float = 0.0,
        noise_shape: Sequence[int] | None = None,
        fault_key: str | None = None,
        start_error: str | None = None,
        cold_pass_s: float = 0.0,
    ) -> None:
        """``start_error`` makes building fail with that message (tests of start-up errors);
        ``cold_pass_s`` lengthens the first pass at each batch size (a cold start)."""
        if start_error:
            raise RuntimeError(start_error)
        inputs: dict[str, dict[str, Any]] = {
            key: {"shape": list(image_shape), "dtype": "uint8", "required": True}
            for key in image_keys
        }
        inputs[state_key] = {"shape": [state_dim], "dtype": "float32", "required": True}
        if fault_key:
            inputs[fault_key] = {"shape": None, "dtype": "str", "required": False}
        self._info = BackendInfo(
            name="mock-worker",
            action_horizon=action_horizon,
            action_dim=action_dim,
            inputs=inputs,
            noise_shape=None if noise_shape is None else tuple(noise_shape),
        )
        self._intercept_s = intercept_s
        self._slope_s = slope_s
        self._fault_key = fault_key
        self._noise: np.ndarray | None = None
        self._cold_pass_s = cold_pass_s
        self._warm_sizes: set[int] = set()

    def info(self) -> BackendInfo:
        return self._info

    def set_noise(self, noise: np.ndarray | None) -> None:
        if noise is not None and self._info.noise_shape is None:
            raise ValueError("this mock takes no noise (set noise_shape)")
        self._noise = None if noise is None else np.array(noise, dtype=np.float32)

    def infer(self, observations: Sequence[Mapping[str, Any]]) -> np.ndarray:
        for obs in observations:
            self._fault(obs)
        done_s = time.perf_counter() + self._intercept_s + self._slope_s * len(observations)
        if len(observations) not in self._warm_sizes:
            self._warm_sizes.add(len(observations))
            done_s += self._cold_pass_s
        info = self._info
        chunks = np.stack(
            [
                worker_mock_actions(obs, info.inputs, info.action_horizon, info.action_dim)
                for obs in observations
            ]
        )
        if self._noise is not None:
            chunks += 0.1 * self._noise.reshape(-1)[: info.action_dim]
        remaining_s = done_s - time.perf_counter()
        if remaining_s > 0:
            time.sleep(remaining_s)
        return chunks

    def _fault(self, obs: Mapping[str, Any]) -> None:
        fault = obs.get(self._fault_key) if self._fault_key else None
        if fault == "crash":
            sys.stderr.write("mock worker: crashing on purpose (SIGKILL)\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault == "exit":
            sys.stderr.write("mock worker: exiting on purpose (code 3)\n")
            sys.stderr.flush()
            os._exit(3)
        elif fault == "hang":
            time.sleep(3600)
        elif fault == "raise":
            raise ValueError("mock worker: failing this batch on purpose")


def worker_mock_actions(
    obs: Mapping[str, Any], inputs: Mapping[str, Any], action_horizon: int, action_dim: int
) -> np.ndarray:
    """(action_horizon, action_dim) float32 uniform in [-1, 1), seeded by a hash of the
    declared non-text inputs (key, dtype, shape and bytes of each, in key order)."""
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(inputs):
        value = obs.get(key)
        if not isinstance(value, np.ndarray):
            continue
        array = np.ascontiguousarray(value)
        digest.update(f"{key}{array.dtype.str}{array.shape}".encode())
        digest.update(array.data)
    rng = np.random.Generator(np.random.PCG64(int.from_bytes(digest.digest(), "little")))
    return rng.uniform(-1.0, 1.0, size=(action_horizon, action_dim)).astype(np.float32)
