"""Placement policies by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from armory.placement.base import Placement, ReplicaProfile
from armory.placement.fluid import FluidPlacement
from armory.placement.simple import LeastRobotsPlacement, RandomPlacement, RoundRobinPlacement

_FACTORIES: dict[str, Callable[[Sequence[ReplicaProfile], int], Placement]] = {
    RandomPlacement.name: lambda replicas, seed: RandomPlacement(replicas, seed=seed),
    RoundRobinPlacement.name: lambda replicas, seed: RoundRobinPlacement(replicas),
    LeastRobotsPlacement.name: lambda replicas, seed: LeastRobotsPlacement(replicas),
    FluidPlacement.name: lambda replicas, seed: FluidPlacement(replicas),
}


def placement_names() -> list[str]:
    """Every valid placement name."""
    return list(_FACTORIES)


def check_placement_name(name: str) -> None:
    """Raise ``ValueError`` listing the valid names unless ``name`` is one."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown placement {name!r}; valid names: {', '.join(placement_names())}")


def make_placement(name: str, replicas: Sequence[ReplicaProfile], *, seed: int = 0) -> Placement:
    """A new placement policy ``name`` over ``replicas`` (``seed`` for those that draw)."""
    check_placement_name(name)
    return _FACTORIES[name](replicas, seed)
