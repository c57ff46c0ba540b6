"""Orders of eligible robots shared by several schedulers."""

from __future__ import annotations

import numpy as np

from armory.scheduling.snapshot import Snapshot


def earliest_deadline_order(snapshot: Snapshot, due_s: np.ndarray | None = None) -> np.ndarray:
    """Indices of the eligible robots, earliest due time first (ties: first contact).

    ``due_s`` (one entry per robot) defaults to the snapshot's deadlines.
    """
    if due_s is None:
        due_s = snapshot.deadline_s
    rows = np.flatnonzero(snapshot.eligible)
    order = np.lexsort((snapshot.contact_order[rows], due_s[rows]))
    return rows[order]
