"""greedy-deadline: the largest batch of the most urgent robots that lands in time.

Robots are ranked by when their chunk must leave the server: the deadline minus
the expected downlink. With ``d0`` the most urgent of those times, a batch of the
``b`` most urgent robots is on time when ``now + latency(b) <= d0``. The scheduler
takes the largest on-time ``b``; when even one robot cannot be served in time it
takes the ``b`` with the best throughput ``b / latency(b)`` (ties: the larger).
"""

from __future__ import annotations

import numpy as np

from armory.scheduling.base import Scheduler
from armory.scheduling.ordering import earliest_deadline_order
from armory.scheduling.snapshot import Batch, Snapshot


class GreedyDeadlineScheduler(Scheduler):
    """Grow the batch of the most urgent robots while the most urgent one stays on time."""

    name = "greedy-deadline"

    def schedule(self, snapshot: Snapshot) -> Batch:
        """Called when the executor is free: the b most urgent robots, b as above."""
        send_by_s = snapshot.deadline_s - snapshot.downlink_s
        rows = earliest_deadline_order(snapshot, send_by_s)
        max_size = min(snapshot.max_batch_size, rows.size)
        if max_size == 0:
            return Batch((), rule=self.name)
        size = self._batch_size(snapshot, max_size, float(send_by_s[rows[0]]))
        return Batch(tuple(snapshot.robot_id[rows[:size]].tolist()), rule=self.name)

    @staticmethod
    def _batch_size(snapshot: Snapshot, max_size: int, first_send_by_s: float) -> int:
        """The largest on-time size, else the size of best throughput (ties: the larger)."""
        sizes = np.arange(1, max_size + 1)
        latency_s = snapshot.latency_table_s[1 : max_size + 1]
        on_time = snapshot.now_s + latency_s <= first_send_by_s
        if on_time.any():
            return int(sizes[on_time][-1])
        throughput = sizes / latency_s
        return int(sizes[np.flatnonzero(throughput == throughput.max())[-1]])
