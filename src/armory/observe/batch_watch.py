"""Watches the batch loop: the per-batch metrics and, at ``--log-decisions``, one log
line per batch (its robots, the rule that chose them, size, predicted and actual
forward-pass time)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from armory.observe.metrics import ServerMetrics
from armory.scheduling.snapshot import Batch

decision_logger = logging.getLogger("armory.decisions")
"""One line per batch at INFO; ``armory serve`` keeps it at WARNING unless
``--log-decisions``."""


class BatchWatch:
    """A :class:`~armory.engine.batch_observer.BatchObserver` feeding metrics and logs."""

    def __init__(
        self, metrics: ServerMetrics | None, *, name_of: Callable[[int], str], scheduler: str
    ) -> None:
        self.metrics = metrics
        self.name_of = name_of
        """The robot name of an engine id."""
        self.scheduler = scheduler
        self.num_batches = 0

    def decided(self, batch: Batch, decision_s: float) -> None:
        if self.metrics is not None:
            self.metrics.decided(decision_s)

    def batch_done(self, batch: Batch, policy_s: float, predicted_s: float) -> None:
        self.num_batches += 1
        size = len(batch.robot_ids)
        if self.metrics is not None:
            self.metrics.batch_done(size, policy_s)
        if decision_logger.isEnabledFor(logging.INFO):
            robots = [self.name_of(robot_id) for robot_id in batch.robot_ids]
            rule = batch.rule or self.scheduler
            decision_logger.info(
                "batch %d (size %d) by rule %s: %s; predicted %.1f ms, took %.1f ms",
                self.num_batches,
                size,
                rule,
                ", ".join(robots),
                1e3 * predicted_s,
                1e3 * policy_s,
                extra={
                    "event": "batch",
                    "batch": self.num_batches,
                    "robots": robots,
                    "rule": rule,
                    "size": size,
                    "predicted_ms": round(1e3 * predicted_s, 3),
                    "actual_ms": round(1e3 * policy_s, 3),
                },
            )
