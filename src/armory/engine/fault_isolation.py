"""When a scheduler raises: find the robot whose state made it fail, or fall back.

A scheduling failure must not cost every waiting robot its request. The batch loop
asks :func:`decide_isolating` instead of the scheduler alone: it schedules the
snapshot; if that raises, it halves the fleet until one robot is left whose
presence makes the scheduler fail (``log2(n)`` more decisions, on the failure path
only), decides again without that robot, and, if the scheduler still raises,
takes the batch of a simple safe rule (max-batch: the most urgent eligible robots,
as many as the batch holds). The caller refuses the robots named as culprits.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from armory.scheduling.max_batch import MaxBatchScheduler
from armory.scheduling.snapshot import Batch, Snapshot

logger = logging.getLogger(__name__)

_FALLBACK = MaxBatchScheduler()
"""The safe rule of a decision the scheduler cannot take."""

_ROW_FIELDS = tuple(
    field.name
    for field in dataclasses.fields(Snapshot)
    if field.name not in ("now_s", "latency_table_s", "max_batch_size")
)
"""Snapshot fields holding one entry per robot."""


@dataclass(frozen=True)
class Isolated:
    """A decision taken despite a failing scheduler."""

    batch: Batch
    culprits: tuple[int, ...]
    """Engine ids of the robots whose state made the scheduler fail (to be refused): a
    robot is blamed only when the scheduler fails with it alone and succeeds without it."""
    fallback: bool
    """The batch is the safe rule's: the scheduler failed without them too."""


def subset(snapshot: Snapshot, rows: np.ndarray) -> Snapshot:
    """The snapshot holding only the robots at ``rows``."""
    columns = {name: getattr(snapshot, name) for name in _ROW_FIELDS}
    # A per-robot field may be absent (None: e.g. no robot is directed).
    return dataclasses.replace(
        snapshot, **{name: c[rows] for name, c in columns.items() if c is not None}
    )


def decide_isolating(schedule: Callable[[Snapshot], Batch], snapshot: Snapshot) -> Isolated:
    """``schedule(snapshot)``, which has just raised, taken again around the robot that
    made it fail; the safe rule's batch if none is found or it still fails. Called on the
    event loop, only after a failure."""
    culprit = find_culprit(schedule, snapshot)
    if culprit is not None:
        robot_id = int(snapshot.robot_id[culprit])
        rest = subset(snapshot, np.flatnonzero(np.arange(snapshot.num_robots) != culprit))
        try:
            return Isolated(schedule(rest), (robot_id,), fallback=False)
        except Exception:
            # Not this robot alone: the scheduler fails without it too; nobody is blamed.
            logger.exception("the scheduler fails without robot %d too", robot_id)
    logger.warning(
        "the scheduler failed on a fleet of %d robots; this batch follows the safe rule "
        "(max-batch: earliest deadlines first)",
        snapshot.num_robots,
    )
    return Isolated(_FALLBACK.schedule(snapshot), (), fallback=True)


def find_culprit(schedule: Callable[[Snapshot], Batch], snapshot: Snapshot) -> int | None:
    """Row of one robot whose presence alone makes ``schedule`` raise (halving the fleet:
    the failing half is kept); None when no single robot does."""
    rows = np.arange(snapshot.num_robots)
    while len(rows) > 1:
        half = len(rows) // 2
        for part in (rows[:half], rows[half:]):
            if _fails(schedule, subset(snapshot, part)):
                rows = part
                break
        else:
            return None  # only the two halves together fail
    if len(rows) == 1 and _fails(schedule, subset(snapshot, rows)):
        return int(rows[0])
    return None


def _fails(schedule: Callable[[Snapshot], Batch], snapshot: Snapshot) -> bool:
    try:
        schedule(snapshot)
    except Exception:
        return True
    return False
