"""The placement interface: robots arrive, leave and are moved between replicas.

A :class:`Placement` keeps which replica serves each robot. The simulator of K
GPUs (``armory simulate --gpus K``) and the cluster's front door
(``armory cluster``) place robots through the same objects: :meth:`place` when a
robot arrives, :meth:`remove` when it leaves, :meth:`fail` when its replica dies
(its robots are placed again on the others), :meth:`rebalance` to move robots off
a replica over capacity. A policy only chooses a replica for one robot
(:meth:`Placement.choose`); everything else is shared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from armory_client.wire.queue_state import (
    MAX_CONTROL_HZ,
    MAX_DURATION_S,
    MAX_EXECUTION_HORIZON,
    MAX_WEIGHT,
)

from armory.placement.fluid_load import replica_load


@dataclass(frozen=True)
class RobotDemand:
    """What one robot asks of a GPU, as placement sees it."""

    control_hz: float = 20.0
    """Actions the robot executes per second."""
    max_execution_horizon: int = 10
    """Actions of each chunk it may execute."""
    round_trip_s: float = 0.0
    """Its smallest uplink plus downlink."""
    weight: float = 1.0
    """Importance of its motion (weighted throughput)."""

    def __post_init__(self) -> None:
        if not self.control_hz > 0:
            raise ValueError(f"control_hz must be > 0, got {self.control_hz}")
        if self.max_execution_horizon < 1:
            raise ValueError(
                f"max_execution_horizon must be >= 1, got {self.max_execution_horizon}"
            )
        if not self.round_trip_s >= 0:
            raise ValueError(f"round_trip_s must be >= 0, got {self.round_trip_s}")
        if not self.weight > 0:
            raise ValueError(f"weight must be > 0, got {self.weight}")
        # The wire's own upper bounds: a placement request comes from the network, and
        # one absurd demand must not skew the fluid program other robots are placed by.
        for name, value, most in (
            ("control_hz", self.control_hz, MAX_CONTROL_HZ),
            ("max_execution_horizon", self.max_execution_horizon, MAX_EXECUTION_HORIZON),
            ("round_trip_s", self.round_trip_s, MAX_DURATION_S),
            ("weight", self.weight, MAX_WEIGHT),
        ):
            if not value <= most:
                raise ValueError(f"{name} must be <= {most:g}, got {value}")


@dataclass(frozen=True)
class ReplicaProfile:
    """One replica's GPU as placement sees it: seconds per forward pass by batch size."""

    latency_table_s: tuple[float, ...]
    """Entry ``b - 1``: seconds of a batch of ``b``; its length is the max batch size."""

    def __post_init__(self) -> None:
        if not self.latency_table_s or not all(x > 0 for x in self.latency_table_s):
            raise ValueError(
                f"latency_table_s must be non-empty and > 0, got {self.latency_table_s}"
            )

    def differs_from(self, other: ReplicaProfile, tolerance: float) -> bool:
        """Whether some batch size's seconds differ from ``other``'s by more than
        ``tolerance`` of ``other``'s (or the tables' max batch sizes differ)."""
        if len(self.latency_table_s) != len(other.latency_table_s):
            return True
        return any(
            abs(mine - theirs) > tolerance * theirs
            for mine, theirs in zip(self.latency_table_s, other.latency_table_s, strict=True)
        )


class NoReplicaError(RuntimeError):
    """Every replica is down: a robot cannot be placed."""


class Placement(ABC):
    """Which replica serves each robot; subclasses choose a replica for one robot."""

    name: ClassVar[str]

    def __init__(self, replicas: Sequence[ReplicaProfile]) -> None:
        if not replicas:
            raise ValueError("placement needs at least one replica")
        self.profiles: list[ReplicaProfile] = list(replicas)
        self.alive: list[bool] = [True] * len(self.profiles)
        self._where: dict[str, int] = {}
        self._demand: dict[str, RobotDemand] = {}

    # ---- what a policy decides ------------------------------------------

    @abstractmethod
    def choose(self, demand: RobotDemand, candidates: Sequence[int]) -> int:
        """Called when a robot is placed: the replica among ``candidates`` (alive, never
        empty) that serves it."""

    def rebalance(self, movable: Callable[[str], bool] | None = None) -> dict[str, int]:
        """Called after arrivals settle: robots to move (robot id -> new replica) and
        moved; only robots ``movable`` says may move (None: any). Policies that do not
        weigh load move nobody."""
        return {}

    # ---- bookkeeping shared by every policy -----------------------------

    @property
    def num_replicas(self) -> int:
        return len(self.profiles)

    def replica_of(self, robot_id: str) -> int | None:
        return self._where.get(robot_id)

    def members(self, replica: int) -> list[str]:
        """Robot ids the replica serves, in order of placement."""
        return [r for r, k in self._where.items() if k == replica]

    def demand_of(self, robot_id: str) -> RobotDemand:
        """What a placed robot asks of its GPU (``KeyError`` if it is not placed)."""
        return self._demand[robot_id]

    def demands(self, replica: int) -> list[RobotDemand]:
        return [self._demand[r] for r in self.members(replica)]

    def load(self, replica: int, extra: Sequence[RobotDemand] = ()) -> float:
        """The replica's fluid load with ``extra`` robots added (:mod:`fluid_load`; below 1,
        ``1 - load`` is its headroom), whatever the policy."""
        return replica_load([*self.demands(replica), *extra], self.profiles[replica])

    def place(self, robot_id: str, demand: RobotDemand) -> int:
        """Place a robot (again, if it was placed) and return its replica."""
        self.remove(robot_id)
        candidates = [k for k, up in enumerate(self.alive) if up]
        if not candidates:
            raise NoReplicaError(f"no replica is up to serve robot {robot_id!r}")
        replica = self.choose(demand, candidates)
        if replica not in candidates:
            raise AssertionError(f"{self.name} chose replica {replica}, not one of {candidates}")
        self._where[robot_id] = replica
        self._demand[robot_id] = demand
        return replica

    def remove(self, robot_id: str) -> None:
        """A robot left (unknown ids are ignored)."""
        self._where.pop(robot_id, None)
        self._demand.pop(robot_id, None)

    def move(self, robot_id: str, replica: int) -> None:
        """Serve a placed robot from ``replica`` instead."""
        if robot_id not in self._where:
            raise KeyError(f"robot {robot_id!r} is not placed")
        if not self.alive[replica]:
            raise ValueError(f"replica {replica} is down")
        self._where[robot_id] = replica

    def update_demand(self, robot_id: str, demand: RobotDemand) -> None:
        """A placed robot asks otherwise than it said (its replica measured it); it stays
        where it is (unknown ids are ignored)."""
        if robot_id in self._demand:
            self._demand[robot_id] = demand

    def fail(self, replica: int) -> dict[str, int]:
        """Replica ``replica`` died: place its robots on the others; returns where each
        went. With no replica up its robots are removed (they are placed anew when they
        come back)."""
        self.alive[replica] = False
        victims = self.members(replica)
        if not any(self.alive):
            for robot_id in victims:
                self.remove(robot_id)
            return {}
        return {robot_id: self.place(robot_id, self._demand[robot_id]) for robot_id in victims}

    def restore(self, replica: int, profile: ReplicaProfile | None = None) -> None:
        """Replica ``replica`` is up again (robots arrive there as the policy chooses)."""
        self.alive[replica] = True
        if profile is not None:
            self.profiles[replica] = profile

    def update_profile(self, replica: int, profile: ReplicaProfile) -> None:
        """The replica learned its GPU's latency anew."""
        self.profiles[replica] = profile
