"""Scheduler configuration shared by the CLI, fleet runs and the server."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    """Which scheduler to run and its options (each scheduler reads the ones it uses)."""

    name: str = "just-in-time"
    """Registry name; see ``armory.scheduling.registry.scheduler_names()``."""
    seed: int = 0
    """Seed of schedulers that draw random numbers (``random``)."""
    lookahead_horizon_s: float = 1.0
    """lookahead-actions: seconds of fleet motion each candidate is scored over."""
    lookahead_depth: int = 1
    """lookahead-actions: batches planned ahead (1 = score the next batch only)."""
    lookahead_node_budget: int = 64
    """lookahead-actions: most candidate plans scored per decision."""
    disabled_rules: tuple[str, ...] = ()
    """just-in-time: rules turned off, to measure what each earns (docs/scheduling.md)."""

    def __post_init__(self) -> None:
        if self.lookahead_horizon_s <= 0:
            raise ValueError(f"lookahead_horizon_s must be > 0, got {self.lookahead_horizon_s}")
        if self.lookahead_depth < 1:
            raise ValueError(f"lookahead_depth must be >= 1, got {self.lookahead_depth}")
        if self.lookahead_node_budget < 1:
            raise ValueError(
                f"lookahead_node_budget must be >= 1, got {self.lookahead_node_budget}"
            )
