"""random: a batch of random size made of random eligible robots (a floor for comparisons).

The size is drawn uniformly from ``1..min(max_batch_size, eligible)`` and the
robots uniformly without replacement, from a PCG64 generator seeded with
``SchedulerConfig.seed``: the same seed gives the same sequence of decisions.
"""

from __future__ import annotations

import numpy as np

from armory.scheduling.base import Scheduler
from armory.scheduling.snapshot import Batch, Snapshot


class RandomBatchScheduler(Scheduler):
    """Pick a random number of random eligible robots."""

    name = "random"

    def __init__(self, *, seed: int = 0) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def schedule(self, snapshot: Snapshot) -> Batch:
        """Called when the executor is free: a uniform size, then uniform distinct robots."""
        rows = np.flatnonzero(snapshot.eligible)
        max_size = min(snapshot.max_batch_size, rows.size)
        if max_size == 0:
            return Batch((), rule=self.name)
        size = int(self._rng.integers(1, max_size, endpoint=True))
        chosen = self._rng.choice(rows, size=size, replace=False)
        return Batch(tuple(snapshot.robot_id[chosen].tolist()), rule=self.name)
