"""Which replica holds each of the cluster's slots, and where its doors listen.

The cluster has a fixed number of slots, one per replica Ray Serve runs. A replica
that starts (the first ones, or one Ray Serve starts in place of one that died)
takes a free slot; a replica found dead frees its slot. Placement works on slots,
so a restarted replica takes the place of the one that died. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaAddress:
    """One replica's engine, as it announces itself when its doors are open."""

    replica_id: str
    """Unique per replica process (a restarted replica has a new one)."""
    host: str
    """Address its doors listen on."""
    openpi_port: int
    groot_port: int | None = None
    lerobot_port: int | None = None
    pid: int = 0
    """Its process (on its node)."""
    tls: bool = False
    """Its openpi door speaks TLS (``wss://``)."""

    def door_addresses(self) -> dict[str, str]:
        """Where a robot reaches each open door of this replica."""
        doors = {"openpi": f"{'wss' if self.tls else 'ws'}://{self.host}:{self.openpi_port}"}
        if self.groot_port is not None:
            doors["groot"] = f"tcp://{self.host}:{self.groot_port}"
        if self.lerobot_port is not None:
            doors["lerobot"] = f"{self.host}:{self.lerobot_port}"
        return doors


class ReplicaTable:
    """Slots ``0 .. num_slots - 1``, each empty or held by one live replica."""

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"a cluster needs at least one replica, got {num_slots}")
        self.slots: list[ReplicaAddress | None] = [None] * num_slots
        self._retired: set[str] = set()

    def arrive(self, address: ReplicaAddress) -> int | None:
        """A replica announced itself: the slot it takes (None when it already holds one,
        was retired as dead, or every slot is held)."""
        if address.replica_id in self._retired or self.slot_of(address.replica_id) is not None:
            return None
        for slot, held in enumerate(self.slots):
            if held is None:
                self.slots[slot] = address
                return slot
        return None

    def retire(self, slot: int) -> ReplicaAddress | None:
        """The replica in ``slot`` is dead: free the slot for good (it never returns)."""
        address, self.slots[slot] = self.slots[slot], None
        if address is not None:
            self._retired.add(address.replica_id)
        return address

    def slot_of(self, replica_id: str) -> int | None:
        for slot, held in enumerate(self.slots):
            if held is not None and held.replica_id == replica_id:
                return slot
        return None

    @property
    def num_up(self) -> int:
        return sum(held is not None for held in self.slots)
