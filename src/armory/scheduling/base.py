"""The scheduler interface: a pure decision over a snapshot, driven by a loop that owns time."""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from armory.scheduling.snapshot import Batch, Snapshot


class Scheduler(abc.ABC):
    """Picks WHICH robots go into the next batch and HOW MANY.

    A scheduler does no I/O and reads no clock: everything it knows is in the
    snapshot. The real-time engine and the virtual-time simulator drive the same
    objects.
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def schedule(self, snapshot: Snapshot) -> Batch:
        """Called whenever the executor is free and at least one robot is eligible."""

    def base_rule_only(self) -> Scheduler | None:
        """The same scheduler with its base rule alone, which ``--explain`` holds each
        decision against to show what the other rules changed
        (:mod:`armory.scheduling.rule_changes`); None for a scheduler of one rule."""
        return None

    def on_batch_done(self, batch: Batch, latency_s: float) -> None:  # noqa: B027
        """Called when a batch's forward pass finishes, with its measured seconds."""

    def held_shares(self, snapshot: Snapshot) -> np.ndarray:
        """Called when chunks for directed robots are ready: per robot, the share of its
        ticks the scheduler means to serve it, below 1 for a robot it will keep waiting
        dry between chunks. The server then tells the robot to send holding fewer
        actions than the usual lead, none at all (once dry) where the share is at most
        what sending once dry gives (:func:`armory.engine.session.held_lead_s`). Every
        robot in full (all ones), unless a scheduler says otherwise."""
        return np.ones(snapshot.num_robots)
