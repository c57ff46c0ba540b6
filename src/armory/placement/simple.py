"""Placements that do not weigh load: random, round-robin and least-robots."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from armory.placement.base import Placement, ReplicaProfile, RobotDemand


class RandomPlacement(Placement):
    """Each robot on a replica drawn uniformly among those up."""

    name = "random"

    def __init__(self, replicas: Sequence[ReplicaProfile], *, seed: int = 0) -> None:
        super().__init__(replicas)
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def choose(self, demand: RobotDemand, candidates: Sequence[int]) -> int:
        return int(candidates[int(self._rng.integers(len(candidates)))])


class RoundRobinPlacement(Placement):
    """Replicas in turn: each robot on the next replica up after the last one used."""

    name = "round-robin"

    def __init__(self, replicas: Sequence[ReplicaProfile]) -> None:
        super().__init__(replicas)
        self._last = -1

    def choose(self, demand: RobotDemand, candidates: Sequence[int]) -> int:
        later = [k for k in candidates if k > self._last]
        self._last = later[0] if later else candidates[0]
        return self._last


class LeastRobotsPlacement(Placement):
    """Each robot on the replica serving the fewest robots (the lowest index on ties)."""

    name = "least-robots"

    def choose(self, demand: RobotDemand, candidates: Sequence[int]) -> int:
        counts = {k: 0 for k in candidates}
        for k in self._where.values():
            if k in counts:
                counts[k] += 1
        return min(candidates, key=lambda k: (counts[k], k))
