"""The executor never sends a chunk holding NaN or inf: that robot alone gets an error
naming the policy, and the rest of the batch is answered as usual."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from server_harness import expected_actions, make_mock, make_obs

from armory.core.errors import PolicyError
from armory.engine.executor import Executor
from armory.policies.base import Policy, PolicyMetadata

BAD_STATE = 777.0
"""An observation whose state starts with this value gets a chunk with a bad row."""


class _Diverging(Policy):
    """The mock, but the chunk of an observation whose state starts at `BAD_STATE` holds
    `bad_value` in its last row."""

    def __init__(self, bad_value: float) -> None:
        self.inner = make_mock()
        self.bad_value = bad_value

    @property
    def metadata(self) -> PolicyMetadata:
        return self.inner.metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        chunks = [np.array(c) for c in self.inner.infer_batch(observations)]
        for obs, chunk in zip(observations, chunks, strict=True):
            if obs["observation/state"][0] == BAD_STATE:
                chunk[-1, 0] = self.bad_value
        return chunks


@pytest.mark.parametrize("bad_value", [np.nan, np.inf])
def test_nonfinite_chunk_is_an_error_to_its_robot_alone(bad_value: float) -> None:
    """In one forward pass of two observations, the one whose chunk holds NaN or inf gets
    a PolicyError naming the policy and the row; the other gets its chunk."""
    policy = _Diverging(bad_value)
    bad = make_obs(1)
    bad["observation/state"] = np.full_like(bad["observation/state"], BAD_STATE)
    executor = Executor(policy)
    try:
        outcome = asyncio.run(executor.run([make_obs(0), bad]))
    finally:
        executor.shutdown()
    good, error = outcome.chunks
    np.testing.assert_array_equal(good, expected_actions(policy, make_obs(0)))
    assert isinstance(error, PolicyError)
    horizon = policy.metadata.action_horizon
    name = policy.metadata.name
    assert f"the policy {name!r} returned a chunk with NaN or inf in rows [{horizon - 1}]" in (
        str(error)
    )
    assert outcome.ok  # one forward pass: its time may still teach the latency profile
