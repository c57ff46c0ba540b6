"""Placement by load: each robot on the replica the fluid model leaves least loaded."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from armory.placement.base import Placement, RobotDemand
from armory.placement.fluid_load import replica_load

OVER_CAPACITY = 1.0
"""A replica whose fluid load exceeds this is over capacity: robots move off it."""

LOAD_TIE = 0.02
"""Replicas whose loads after adding a robot differ by at most this are tied on load."""

_IMPROVES = 1e-9
"""A move must lower the hottest load by more than this (against rounding)."""


class FluidPlacement(Placement):
    """Places each robot where the fluid load after adding it is least (among loads within
    ``LOAD_TIE`` of the least: the fewest robots like it, then the fewest robots, then the
    least load, then the lowest index); moves robots only off a replica over capacity or
    one that failed."""

    name = "fluid"

    def choose(self, demand: RobotDemand, candidates: Sequence[int]) -> int:
        loads = {k: self.load(k, [demand]) for k in candidates}
        least = min(loads.values())
        # Loads this close are equal to the model's precision: then fewer robots (smaller
        # batches, shorter forward passes) decide, as they do for robots far below capacity.
        # Among those, the fewest robots of the same kind first: each replica then
        # serves the same mix, a copy at scale of the fleet.
        close = [k for k in candidates if loads[k] <= least + LOAD_TIE]
        demands = {k: self.demands(k) for k in close}
        return min(
            close,
            key=lambda k: (demands[k].count(demand), len(demands[k]), loads[k], k),
        )

    def rebalance(self, movable: Callable[[str], bool] | None = None) -> dict[str, int]:
        """Move robots (those ``movable`` allows), one at a time, off the most loaded
        replica while it is over capacity and a move lowers the highest load of the two
        replicas involved."""
        moved: dict[str, int] = {}
        for _ in range(len(self._where)):
            alive = [k for k, up in enumerate(self.alive) if up]
            loads = {k: self.load(k) for k in alive}
            hot = max(alive, key=lambda k: (loads[k], -k))
            if loads[hot] <= OVER_CAPACITY:
                break
            best: tuple[float, str, int] | None = None
            members = self.members(hot)
            tried: set[RobotDemand] = set()
            for robot_id in members:
                demand = self._demand[robot_id]
                if demand in tried or (movable is not None and not movable(robot_id)):
                    continue
                tried.add(demand)
                rest = [self._demand[r] for r in members if r != robot_id]
                hot_after = replica_load(rest, self.profiles[hot])
                for k in alive:
                    if k == hot:
                        continue
                    worst = max(hot_after, self.load(k, [demand]))
                    if worst < loads[hot] - _IMPROVES and (best is None or worst < best[0]):
                        best = (worst, robot_id, k)
            if best is None:
                break
            _, robot_id, k = best
            self.move(robot_id, k)
            moved[robot_id] = k
        return moved
