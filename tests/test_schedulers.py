"""Invariants every registered scheduler keeps, and the registry's contract."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_snapshot, random_snapshot

from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler, scheduler_names
from armory.scheduling.snapshot import check_batch

BASELINES = ("max-batch", "round-robin", "greedy-deadline", "random", "lookahead-actions")

CONFIGS = [SchedulerConfig(name=name) for name in scheduler_names()] + [
    SchedulerConfig(name="lookahead-actions", lookahead_depth=2, lookahead_node_budget=16),
    SchedulerConfig(name="lookahead-actions", lookahead_depth=3, lookahead_node_budget=5),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-d{c.lookahead_depth}")
def test_batches_keep_the_invariants_on_random_snapshots(config: SchedulerConfig) -> None:
    """Never over the max, never a robot twice, never ineligible; an empty batch only when
    nobody is eligible or with a wake-up time in the future."""
    rng = np.random.default_rng(20240611)
    scheduler = make_scheduler(config)
    for _ in range(200):
        snapshot = random_snapshot(rng)
        batch = scheduler.schedule(snapshot)
        check_batch(snapshot, batch)
        if snapshot.eligible.any() and not batch.robot_ids:
            assert batch.wait_until_s is not None and batch.wait_until_s > snapshot.now_s


@pytest.mark.parametrize("name", scheduler_names())
def test_nothing_eligible_gives_an_empty_batch(name: str) -> None:
    """With no eligible robot every scheduler returns an empty batch."""
    snapshot = make_snapshot([0.1, 0.2, 0.3], eligible=False)
    assert make_scheduler(name).schedule(snapshot).robot_ids == ()


@pytest.mark.parametrize("name", scheduler_names())
def test_no_robots_gives_an_empty_batch(name: str) -> None:
    """An empty fleet gives an empty batch."""
    assert make_scheduler(name).schedule(make_snapshot([])).robot_ids == ()


def test_registry_holds_every_baseline() -> None:
    """The four baselines and max-batch are registered under their names."""
    names = scheduler_names()
    assert set(BASELINES) <= set(names)
    for name in BASELINES:
        assert make_scheduler(name).name == name


def test_unknown_name_error_lists_every_valid_name() -> None:
    """An unknown name raises ValueError naming it and every valid name."""
    with pytest.raises(ValueError) as error:
        make_scheduler("no-such-scheduler")
    message = str(error.value)
    assert "'no-such-scheduler'" in message
    for name in scheduler_names():
        assert name in message


def test_factories_pass_the_config_options() -> None:
    """random gets the seed and lookahead-actions its depth and budget from the config."""
    snapshot = make_snapshot(np.linspace(0.0, 0.5, 12), max_batch_size=4)
    seeded = [make_scheduler(SchedulerConfig(name="random", seed=seed)) for seed in (3, 3, 4)]
    draws = [[s.schedule(snapshot).robot_ids for _ in range(10)] for s in seeded]
    assert draws[0] == draws[1] != draws[2]
    lookahead = make_scheduler(
        SchedulerConfig(name="lookahead-actions", lookahead_depth=2, lookahead_node_budget=3)
    )
    lookahead.schedule(snapshot)
    assert lookahead.num_plans_scored == 3
    just_in_time = make_scheduler(SchedulerConfig(name="just-in-time", disabled_rules=("wait",)))
    assert just_in_time.disabled_rules == {"wait"}
