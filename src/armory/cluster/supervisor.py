"""Keeps the front door's replica table true: new replicas in, dead ones out, robots
that left forgotten.

Each period the supervisor reads the replicas that announced themselves (from the
cluster's registry) and probes every slot's replica (:mod:`armory.cluster.health`).
A replica whose port refuses connections, or that misses ``misses_to_down`` probes
in a row (hung), is declared down: the front door places its robots again. Ray Serve
restarts it; the new process announces itself and takes the free slot. A replica
that answers says which robots it serves; placed robots it has stopped serving are
forgotten after ``forget_after_s`` (:meth:`FrontDoor.reconcile`), and the robots it reports
are weighed by what they reported there. Then robots on Armory's client move off a
replica over capacity (:meth:`FrontDoor.rebalance`): the supervisor asks the replica to
let each go (``/move``), which it does after the robot's next reply.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from armory.cluster.front_door import FrontDoor
from armory.cluster.health import Probe, move_robot, probe_replica
from armory.cluster.replica_table import ReplicaAddress

logger = logging.getLogger(__name__)


PROFILE_TOLERANCE = 0.02
"""A replica's learned latency replaces the profile placement holds for it once some
batch size's seconds moved by more than this share: a replica's medians wander by a
little with every probe, each new profile costs placement a fluid program per replica
at the next rebalance (tens of milliseconds on the front door's loop), and loads this
close are tied for placement anyway (``LOAD_TIE``)."""


@dataclass(frozen=True)
class SupervisorConfig:
    """How often and how patiently replicas are checked."""

    period_s: float = 0.5
    """Seconds between rounds of probes."""
    timeout_s: float = 1.0
    """A probe not answered within this many seconds is a miss."""
    misses_to_down: int = 3
    """Misses in a row after which a replica that still accepts connections is down."""
    max_batch_size: int = 4
    """Of the replicas' servers: the learned latency is read up to this size."""
    forget_after_s: float = 30.0
    """A placed robot its replica has not reported for this long has left: placement
    forgets it (a robot reconnecting within it keeps its replica)."""
    move_robots: bool = True
    """Move robots on Armory's client off a replica over capacity to one with room (each
    reconnects once, after a reply); off: robots move only when their replica fails."""

    def __post_init__(self) -> None:
        if not self.period_s > 0 or not self.timeout_s > 0 or not self.forget_after_s > 0:
            raise ValueError(f"period_s, timeout_s and forget_after_s must be > 0, got {self}")
        if self.misses_to_down < 1:
            raise ValueError(f"misses_to_down must be >= 1, got {self.misses_to_down}")


class Supervisor:
    """Runs on the front door's event loop until cancelled."""

    def __init__(
        self,
        door: FrontDoor,
        announced: Callable[[], Awaitable[list[ReplicaAddress]]],
        config: SupervisorConfig,
        *,
        api_key: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: a TLS client context trusting the replicas' certificate, to
        probe replicas whose doors speak TLS."""
        self.door = door
        self._announced = announced
        self.config = config
        self._api_key = api_key
        self._ssl_context = ssl_context
        self._told: set[str] = set()
        """Replicas whose probe error was logged (once each)."""
        self._misses: dict[str, int] = {}

    async def run(self) -> None:
        while True:
            try:
                await self.round()
            except Exception:  # the registry briefly unreachable must not end supervision
                logger.exception("supervision round failed; retrying")
            await asyncio.sleep(self.config.period_s)

    async def _probe(self, address: ReplicaAddress) -> Probe:
        return await probe_replica(
            address.host,
            address.openpi_port,
            timeout_s=self.config.timeout_s,
            max_batch_size=self.config.max_batch_size,
            api_key=self._api_key,
            ssl_context=self._ssl_context if address.tls else None,
        )

    async def round(self) -> None:
        """Admit replicas that announced themselves and answer; retire dead ones."""
        table = self.door.table
        new = [
            address
            for address in await self._announced()
            if table.slot_of(address.replica_id) is None and address.replica_id not in self._misses
        ]
        held = [(slot, a) for slot, a in enumerate(table.slots) if a is not None]
        # All at once: a replica that never answers costs one timeout per round, not one
        # timeout per round for each such replica before the others are looked at.
        probed = [*new, *(a for _, a in held)]
        probes = await asyncio.gather(*(self._probe(a) for a in probed))
        for address, probe in zip(probed, probes, strict=True):
            if probe.error is not None and address.replica_id not in self._told:
                self._told.add(address.replica_id)
                logger.warning(
                    "replica %s at %s:%d: %s",
                    address.replica_id,
                    address.host,
                    address.openpi_port,
                    probe.error,
                )
        for address, probe in zip(new, probes[: len(new)], strict=True):
            if probe.alive and self.door.replica_up(address, probe.profile) is not None:
                self._misses[address.replica_id] = 0
        probes = probes[len(new) :]
        for (slot, address), probe in zip(held, probes, strict=True):
            if probe.alive:
                self._misses[address.replica_id] = 0
                current = self.door.placement.profiles[slot]
                if probe.profile is not None and probe.profile.differs_from(
                    current, PROFILE_TOLERANCE
                ):
                    self.door.placement.update_profile(slot, probe.profile)
                if probe.presence is not None:
                    gone = self.door.reconcile(
                        slot, probe.presence, after_s=self.config.forget_after_s
                    )
                    if gone:
                        logger.info("robots gone from slot %d, forgotten: %s", slot, gone)
                continue
            misses = self._misses.get(address.replica_id, 0) + 1
            self._misses[address.replica_id] = misses
            if probe.refused or misses >= self.config.misses_to_down:
                self.door.replica_down(slot)
        if self.config.move_robots:
            await self._rebalance()

    async def _rebalance(self) -> None:
        """Move robots off replicas over capacity: each old replica lets its robot go after
        the robot's next reply; a robot it cannot let go stays where it is."""
        for robot, source, target in self.door.rebalance():
            address = self.door.table.slots[source]
            moved = address is not None and await move_robot(
                address.host,
                address.openpi_port,
                robot,
                timeout_s=self.config.timeout_s,
                api_key=self._api_key,
                ssl_context=self._ssl_context if address.tls else None,
            )
            if moved:
                logger.info(
                    "robot %s moves from slot %d (over capacity) to slot %d", robot, source, target
                )
            else:
                logger.info(
                    "robot %s stays on slot %d: its replica did not let it go (not connected "
                    "there on Armory's client, or not answering)",
                    robot,
                    source,
                )
                self.door.undo_move(robot, source)
