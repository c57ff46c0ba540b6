"""Hand-built scheduler inputs: snapshots from plain lists, no sockets, no simulator."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from armory.core.latency_profile import LatencyProfile
from armory.scheduling.snapshot import Snapshot

PerRobot = float | Sequence[float]
"""A value for every robot, or one value shared by all."""


def make_snapshot(
    deadline_s: Sequence[float],
    *,
    now_s: float = 0.0,
    max_batch_size: int = 4,
    eligible: bool | Sequence[bool] = True,
    weight: PerRobot = 1.0,
    obs_time_s: PerRobot | None = None,
    control_hz: PerRobot = 20.0,
    max_execution_horizon: int | Sequence[int] = 10,
    downlink_s: PerRobot = 0.005,
    robot_id: Sequence[int] | None = None,
    contact_order: Sequence[int] | None = None,
    latency_table_s: Sequence[float] | None = None,
) -> Snapshot:
    """A snapshot of ``len(deadline_s)`` robots (absolute deadlines, seconds).

    Defaults: ids and contact order ``0..n-1``, 20 Hz, max horizon 10 (0.5 s chunks),
    weight 1, downlink 5 ms, all eligible, observations taken at ``now_s``, latencies
    of the ``l40s-pi05`` preset.
    """
    num_robots = len(deadline_s)

    def column(value: object, dtype: type) -> np.ndarray:
        array = np.asarray(value, dtype=dtype)
        if array.ndim == 0:
            return np.full(num_robots, array, dtype=dtype)
        if array.shape != (num_robots,):
            raise ValueError(f"expected {num_robots} values, got {array.shape}")
        return array

    if latency_table_s is None:
        table_s = LatencyProfile.from_preset("l40s-pi05").table(max_batch_size)
    else:
        table_s = np.asarray(latency_table_s, dtype=np.float64)
        if table_s.shape != (max_batch_size + 1,):
            raise ValueError(f"latency table needs {max_batch_size + 1} entries (size 0 first)")
    return Snapshot(
        now_s=now_s,
        robot_id=column(range(num_robots) if robot_id is None else robot_id, np.int64),
        contact_order=column(
            range(num_robots) if contact_order is None else contact_order, np.int64
        ),
        deadline_s=column(deadline_s, np.float64),
        obs_time_s=column(now_s if obs_time_s is None else obs_time_s, np.float64),
        eligible=column(eligible, np.bool_),
        control_hz=column(control_hz, np.float64),
        max_execution_horizon=column(max_execution_horizon, np.int64),
        weight=column(weight, np.float64),
        downlink_s=column(downlink_s, np.float64),
        latency_table_s=table_s,
        max_batch_size=max_batch_size,
    )


def random_snapshot(rng: np.random.Generator) -> Snapshot:
    """A varied snapshot: 0-40 robots, shuffled ids and contacts, mixed rates and weights."""
    num_robots = int(rng.integers(0, 41))
    now_s = float(rng.uniform(0.0, 100.0))
    return make_snapshot(
        now_s + rng.uniform(-0.3, 0.8, num_robots),
        now_s=now_s,
        max_batch_size=int(rng.integers(1, 9)),
        eligible=rng.random(num_robots) < rng.uniform(0.0, 1.0),
        weight=rng.choice([0.5, 1.0, 2.0], num_robots),
        obs_time_s=now_s - rng.uniform(0.0, 0.4, num_robots),
        control_hz=rng.choice([10.0, 20.0, 30.0], num_robots),
        max_execution_horizon=rng.integers(5, 30, num_robots),
        downlink_s=rng.uniform(0.0, 0.02, num_robots),
        robot_id=rng.permutation(num_robots) + 1000,
        contact_order=rng.permutation(num_robots),
    )
