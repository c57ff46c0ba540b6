"""Noise tickets through the mock policy and a real server: identity on the wire and
bit-identical chunks across runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from armory_client import PolicyClient
from server_harness import FAST_LINEAR, make_obs, running_server

from armory.policies.mock import MockPolicy, MockPolicyConfig, mock_actions
from armory.policies.noise import NoiseConfig, make_noise, save_ticket

HORIZON, DIM = 10, 7


def mock_config(noise: NoiseConfig, **overrides: Any) -> MockPolicyConfig:
    """A fast mock with ``noise``."""
    return MockPolicyConfig(latency_profile="linear", linear=FAST_LINEAR, noise=noise, **overrides)


def serve_and_collect(config: MockPolicyConfig, num_requests: int) -> tuple[dict, list[dict]]:
    """Start a server for ``config``, send ``num_requests`` observations; metadata, replies."""
    policy = config.make()
    with running_server(policy) as server, PolicyClient("127.0.0.1", server.port) as client:
        replies = [client.infer(make_obs(11, step)) for step in range(num_requests)]
        return client.metadata, replies


def test_mock_adds_scaled_noise() -> None:
    """With a seed the mock's chunk is its plain chunk plus noise_scale * noise."""
    config = MockPolicyConfig(noise=NoiseConfig(seed=3), noise_scale=0.5)
    policy = MockPolicy(config, sleep=lambda _: None)
    ticket = make_noise(NoiseConfig(seed=3), (HORIZON, DIM))
    assert ticket is not None
    obs = make_obs(1)
    (chunk,) = policy.infer_batch([obs])
    plain = mock_actions(obs, policy.metadata.inputs, HORIZON, DIM)
    np.testing.assert_array_equal(chunk, plain + np.float32(0.5) * ticket.array)
    assert chunk.dtype == np.float32
    assert policy.metadata.noise_sha256 == ticket.sha256


def test_mock_without_noise_reports_none() -> None:
    """No seed, no ticket: the plain chunk and no sha."""
    policy = MockPolicy(MockPolicyConfig(), sleep=lambda _: None)
    obs = make_obs(1)
    (chunk,) = policy.infer_batch([obs])
    np.testing.assert_array_equal(chunk, mock_actions(obs, policy.metadata.inputs, HORIZON, DIM))
    assert policy.metadata.noise_sha256 is None


def test_ticket_shape_mismatch_fails_when_the_policy_is_made(tmp_path: Path) -> None:
    """A ticket of the wrong shape fails make(), before any request."""
    path = save_ticket(tmp_path / "t.npz", np.zeros((HORIZON, DIM + 1), np.float32))
    config = mock_config(NoiseConfig(ticket=path))
    with pytest.raises(ValueError, match=r"has shape \(10, 8\); expected \(10, 7\)"):
        config.make()


def test_same_ticket_two_runs_bit_identical(tmp_path: Path) -> None:
    """Two servers with the same ticket answer the same observations with the same bytes,
    and name the ticket's sha in their metadata and in every reply."""
    values = np.random.default_rng(9).standard_normal((HORIZON, DIM)).astype(np.float32)
    path = save_ticket(tmp_path / "ticket.npz", values)
    ticket = make_noise(NoiseConfig(ticket=path), (HORIZON, DIM))
    assert ticket is not None
    config = mock_config(NoiseConfig(ticket=path))
    runs = [serve_and_collect(config, 4) for _ in range(2)]
    for metadata, replies in runs:
        assert metadata["noise_sha256"] == ticket.sha256
        assert all(reply["policy_timing"]["noise_sha256"] == ticket.sha256 for reply in replies)
    (_, first), (_, second) = runs
    assert [r["actions"].tobytes() for r in first] == [r["actions"].tobytes() for r in second]
    plain_metadata, _ = serve_and_collect(mock_config(NoiseConfig()), 0)
    assert "noise_sha256" not in plain_metadata


def test_different_tickets_give_different_chunks() -> None:
    """Another seed: another sha and other chunks for the same observations."""
    _, with_7 = serve_and_collect(mock_config(NoiseConfig(seed=7)), 1)
    _, with_8 = serve_and_collect(mock_config(NoiseConfig(seed=8)), 1)
    sha_7 = with_7[0]["policy_timing"]["noise_sha256"]
    assert sha_7 != with_8[0]["policy_timing"]["noise_sha256"]
    assert not np.array_equal(with_7[0]["actions"], with_8[0]["actions"])
