"""The BatchObserver interface: what the batch loop tells whoever watches it."""

from __future__ import annotations

from typing import Protocol

from armory.scheduling.snapshot import Batch


class BatchObserver(Protocol):
    """Told of every decision and forward pass (on the event loop; must be quick)."""

    def decided(self, batch: Batch, decision_s: float) -> None:
        """Called after each scheduling decision, empty batches included."""

    def batch_done(self, batch: Batch, policy_s: float, predicted_s: float) -> None:
        """Called when a forward pass is back: the worker's seconds for it and the learned
        latency the loop expected, before the profile learns from it."""
