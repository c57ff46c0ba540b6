"""benchmarks/family.py's ``--set``: the default run with one numeric constant changed
(benchmarks/family_ablation.py ``--constants`` sweeps them; docs/scheduling.md, "What
each constant is worth")."""

from __future__ import annotations

import math

import pytest
from fleet_files import load_script

from armory.scheduling import fluid_mix, just_in_time
from armory.scheduling.just_in_time import JustInTimeScheduler

family = load_script("benchmarks/family.py")
ablation = load_script("benchmarks/family_ablation.py")


def test_a_setting_is_a_known_constant_and_a_number() -> None:
    assert family.parse_setting("margin_s=0.008") == ("margin_s", 0.008)
    assert family.parse_setting("LINK_STEP_RATIO=1.5") == ("LINK_STEP_RATIO", 1.5)
    for text, complaint in [
        ("margin_s", "NAME=VALUE"),
        ("margin=0.1", "cannot change 'margin'"),
        ("margin_s=fast", "takes a number"),
        ("GPU_COST=-0.01", "finite number >= 0"),
        ("GPU_COST=inf", "finite number >= 0"),
        ("TABLE_STEP=0", "finite number > 0"),
        ("LINK_STEP_RATIO=1", "finite number > 1"),
        ("MIX_SHARE=2", ">= 0 and <= 1"),
    ]:
        with pytest.raises(ValueError, match=complaint):
            family.parse_setting(text)


def test_every_swept_constant_exists_where_the_setting_changes_it() -> None:
    """A constant renamed or moved in the scheduler fails here, not silently in a sweep."""
    scheduler = JustInTimeScheduler()
    settable = family.SCHEDULER_CONSTANTS | family.PROGRAM_CONSTANTS
    assert set(ablation.CONSTANT_SWEEP) == set(settable)
    for name, (low, high) in ablation.CONSTANT_SWEEP.items():
        shipped = getattr(scheduler if name in family.SCHEDULER_CONSTANTS else fluid_mix, name)
        assert isinstance(shipped, float) and math.isfinite(shipped)
        assert low < shipped < high, name
        # Both swept values, and the shipped one, are values --set takes.
        for value in (low, shipped, high):
            assert family.parse_setting(f"{name}={value!r}") == (name, value)


def test_program_constants_reach_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    # Restored after the test: the setting changes this process's modules.
    monkeypatch.setattr(fluid_mix, "IN_FULL_TOLERANCE", fluid_mix.IN_FULL_TOLERANCE)
    monkeypatch.setattr(fluid_mix, "LINK_STEP_S", fluid_mix.LINK_STEP_S)
    monkeypatch.setattr(just_in_time, "_IN_FULL", just_in_time._IN_FULL)
    family.apply_program_constants((("IN_FULL_TOLERANCE", 0.01), ("LINK_STEP_S", 0.01)))
    assert fluid_mix.IN_FULL_TOLERANCE == 0.01
    assert pytest.approx(0.99) == just_in_time._IN_FULL
    assert fluid_mix.LINK_STEP_S == 0.01


def test_a_setting_reaches_the_default_run_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wide margin makes the default serve earlier: its run differs. Another scheduler's
    job applies nothing (its results are cached under keys that carry no setting)."""
    clients = family.Clients()

    def job(name: str, settings: tuple) -> tuple:
        return ("mixed", 4, name, 2.0, clients, (), False, 0, settings)

    wide = (("margin_s", 0.3),)
    shipped = family._run(job(family.OURS, ()))
    changed = family._run(job(family.OURS, wide))
    assert changed["num_decisions"] != shipped["num_decisions"]
    monkeypatch.setattr(fluid_mix, "LINK_STEP_S", fluid_mix.LINK_STEP_S)
    family._run(job("max-batch", (("LINK_STEP_S", 0.05),)))
    assert fluid_mix.LINK_STEP_S == 0.005
