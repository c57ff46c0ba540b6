"""Schedulers by name."""

from __future__ import annotations

from collections.abc import Callable

from armory.scheduling.base import Scheduler
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.greedy_deadline import GreedyDeadlineScheduler
from armory.scheduling.just_in_time import RULES, JustInTimeScheduler
from armory.scheduling.lookahead_actions import LookaheadActionsScheduler
from armory.scheduling.max_batch import MaxBatchScheduler
from armory.scheduling.random_batch import RandomBatchScheduler
from armory.scheduling.round_robin import RoundRobinScheduler

_FACTORIES: dict[str, Callable[[SchedulerConfig], Scheduler]] = {
    JustInTimeScheduler.name: JustInTimeScheduler.from_config,
    MaxBatchScheduler.name: lambda config: MaxBatchScheduler(),
    RoundRobinScheduler.name: lambda config: RoundRobinScheduler(),
    GreedyDeadlineScheduler.name: lambda config: GreedyDeadlineScheduler(),
    RandomBatchScheduler.name: lambda config: RandomBatchScheduler(seed=config.seed),
    LookaheadActionsScheduler.name: LookaheadActionsScheduler.from_config,
}


def rule_descriptions(name: str) -> dict[str, str]:
    """What each rule of scheduler ``name`` does, by the name its batches carry (the base
    rule, which every decision falls back to, first)."""
    if name == JustInTimeScheduler.name:
        return dict(RULES)
    return {name: "the scheduler's only rule"}


def scheduler_names() -> list[str]:
    """Every valid scheduler name."""
    return list(_FACTORIES)


def make_scheduler(config: SchedulerConfig | str) -> Scheduler:
    """A new scheduler for ``config`` (or a bare name with default options)."""
    if isinstance(config, str):
        config = SchedulerConfig(name=config)
    factory = _FACTORIES.get(config.name)
    if factory is None:
        raise ValueError(
            f"unknown scheduler {config.name!r}; valid names: {', '.join(scheduler_names())}"
        )
    return factory(config)
