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


def worth_order(snapshot: Snapshot, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` ordered by the weighted actions a chunk would add past each robot's
    queue (``weight * f * (E/f - overlap with the old queue)``, the weight relative to
    the heaviest robot's), then by deadline and first contact; and those worths in that
    order."""
    s = snapshot
    added_s = s.chunk_seconds()[rows] - np.maximum(0.0, s.deadline_s[rows] - s.obs_time_s[rows])
    weight = s.relative_weight()[rows]
    worth = weight * s.control_hz[rows] * np.maximum(added_s, 0.0)
    order = np.lexsort((s.contact_order[rows], s.deadline_s[rows], -worth))
    return rows[order], worth[order]
