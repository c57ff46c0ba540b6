"""max-batch: earliest deadline first, as many robots as the batch holds."""

from __future__ import annotations

from armory.scheduling.base import Scheduler
from armory.scheduling.ordering import earliest_deadline_order
from armory.scheduling.snapshot import Batch, Snapshot


class MaxBatchScheduler(Scheduler):
    """Fill every batch to the max with the most urgent eligible robots."""

    name = "max-batch"

    def schedule(self, snapshot: Snapshot) -> Batch:
        rows = earliest_deadline_order(snapshot)[: snapshot.max_batch_size]
        return Batch(tuple(snapshot.robot_id[rows].tolist()), rule=self.name)
