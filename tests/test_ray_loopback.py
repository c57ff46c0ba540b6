"""loopback_ray: Ray's single-machine mode for the block, everything put back after."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("ray")

from ray._private import ray_constants, services

from armory.cluster.ray_loopback import SINGLE_MACHINE_ENV, loopback_ray


def test_loopback_ray_gives_a_loopback_node_address_and_restores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within the block Ray picks 127.0.0.1 for a new node and its processes inherit the
    switch; after it the variable and Ray's constant are what they were."""
    monkeypatch.setenv(SINGLE_MACHINE_ENV, "1")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    with loopback_ray():
        assert os.environ[SINGLE_MACHINE_ENV] == "0"
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert os.environ[SINGLE_MACHINE_ENV] == "1"
    assert ray_constants.ENABLE_RAY_CLUSTER is True


def test_loopback_ray_removes_a_variable_it_added(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable unset before the block is unset after it, even when the block raises."""
    monkeypatch.delenv(SINGLE_MACHINE_ENV, raising=False)
    with pytest.raises(RuntimeError), loopback_ray():
        raise RuntimeError("ray.init failed")
    assert SINGLE_MACHINE_ENV not in os.environ
