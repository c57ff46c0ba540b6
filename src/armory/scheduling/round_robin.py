"""round-robin: robots take turns in order of first contact, full batches.

A pointer holds the first-contact rank of the robot whose turn comes next. Each
batch starts at the pointer and takes eligible robots in contact order, wrapping
around, until the batch is full; the pointer then moves just past the last robot
taken. The pointer is a contact rank, not an array index, so robots that connect
or disconnect between decisions do not shift anyone's turn.
"""

from __future__ import annotations

import numpy as np

from armory.scheduling.base import Scheduler
from armory.scheduling.snapshot import Batch, Snapshot


class RoundRobinScheduler(Scheduler):
    """Serve eligible robots in turn, in order of first contact."""

    name = "round-robin"

    def __init__(self) -> None:
        self._next_contact = 0
        """First-contact rank from which the next batch starts looking."""

    def schedule(self, snapshot: Snapshot) -> Batch:
        """Called when the executor is free: the next robots in turn, up to the max batch."""
        rows = np.flatnonzero(snapshot.eligible)
        if rows.size == 0:
            return Batch((), rule=self.name)
        rows = rows[np.argsort(snapshot.contact_order[rows], kind="stable")]
        start = int(np.searchsorted(snapshot.contact_order[rows], self._next_contact))
        taken = np.roll(rows, -start)[: snapshot.max_batch_size]
        self._next_contact = int(snapshot.contact_order[taken[-1]]) + 1
        return Batch(tuple(snapshot.robot_id[taken].tolist()), rule=self.name)
