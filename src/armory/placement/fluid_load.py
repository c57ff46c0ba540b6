"""How loaded a replica is, from the fluid model the scheduler already solves.

A replica's load is the share of its GPU's time the fluid optimum
(:func:`armory.scheduling.fluid.solve_fluid`, weighted, at the least GPU time,
each chunk charged the ticks expected at a random phase) spends serving its
robots, plus the share of their actions it cannot serve: below 1.0 the replica
keeps every robot moving with ``1 - load`` of its GPU to spare (its headroom);
above 1.0 it is over capacity. Robots alike in rate, horizon, link and weight
form one class, so the program stays small, and loads are memoised by the
replica's class counts and latency table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import astuple
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from armory.scheduling.fluid import solve_fluid
from armory.scheduling.fluid_mix import GPU_COST

if TYPE_CHECKING:  # the placement interface computes loads with this module
    from armory.placement.base import ReplicaProfile, RobotDemand

_MEMO_SIZE = 65_536


def replica_load(demands: Iterable[RobotDemand], profile: ReplicaProfile) -> float:
    """GPU share plus unserved share of actions of ``demands`` on ``profile``'s GPU."""
    counts = Counter(demands)
    if not counts:
        return 0.0
    key = tuple(sorted(counts.items(), key=lambda item: astuple(item[0])))
    return _load(key, profile.latency_table_s)


@lru_cache(maxsize=_MEMO_SIZE)
def _load(
    classes: tuple[tuple[RobotDemand, int], ...], latency_table_s: tuple[float, ...]
) -> float:
    control_hz = np.array([d.control_hz for d, _ in classes])
    count = np.array([n for _, n in classes], dtype=np.float64)
    latency_s = np.array(latency_table_s)
    solution = solve_fluid(
        control_hz,
        np.array([d.max_execution_horizon for d, _ in classes], dtype=np.float64),
        np.array([d.round_trip_s for d, _ in classes]),
        latency_s,
        weight=np.array([d.weight for d, _ in classes]),
        count=count,
        gpu_cost=GPU_COST,
        expected_ticks=True,
    )
    gpu_share = float(solution.batches_per_s @ latency_s)
    asked = float(count @ control_hz)
    unserved = float(count @ (control_hz - solution.actions_per_s)) / asked
    return gpu_share + max(0.0, unserved)
