"""`--explain`: how often each of the scheduler's rules decided, in the simulator and from
a server's /stats."""

from __future__ import annotations

from pathlib import Path

import pytest

from armory.cli import main
from armory.scheduling.just_in_time import RULES
from armory.scheduling.registry import make_scheduler
from armory.server_stats import StatsReading
from armory.sim.fleet_family import generate_fleet
from armory.sim.simulator import SimConfig, simulate

FLEET = Path(__file__).resolve().parents[1] / "configs" / "fleets" / "mixed-rate.yaml"


def test_every_decision_is_counted_under_its_rule() -> None:
    """The counts by rule add up to the decisions the simulator asked for, and name only
    just-in-time's documented rules."""
    fleet = generate_fleet("mixed", 1001).fleet
    report = simulate(fleet, make_scheduler("just-in-time"), SimConfig(duration_s=10.0, seed=0))
    assert sum(report.decisions_by_rule.values()) == report.timing["num_decisions"]
    assert set(report.decisions_by_rule) <= set(RULES)


def test_simulate_explain_prints_every_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """`armory simulate --explain` prints a line per rule with its count and what it does."""
    assert main(["simulate", "--fleet", str(FLEET), "--duration", "5", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "decisions by rule (just-in-time" in out
    for rule, description in RULES.items():
        assert any(line.split()[:1] == [rule] and description in line for line in out.splitlines())


def test_a_baseline_names_its_decisions_after_itself() -> None:
    """A scheduler with one rule counts every decision under its own name."""
    fleet = generate_fleet("mixed", 1001).fleet
    report = simulate(fleet, make_scheduler("max-batch"), SimConfig(duration_s=5.0, seed=0))
    assert list(report.decisions_by_rule) == ["max-batch"]


def test_rule_counts_from_a_server_are_taken_between_two_readings() -> None:
    """The fleet runner reports the decisions a server made during the run: the later
    /stats reading less the earlier one."""
    base = {"batch_size_counts": {"1": 3}, "busy_s": 1.0}
    before = StatsReading.from_json({**base, "decisions_by_rule": {"wait": 5, "on-time": 2}})
    after = StatsReading.from_json(
        {**base, "decisions_by_rule": {"wait": 9, "on-time": 2, "fluid-share": 4}}
    )
    assert after.rules_since(before) == {"wait": 4, "fluid-share": 4}
    assert after.rules_since(None) == {"wait": 9, "on-time": 2, "fluid-share": 4}


def test_an_unknown_rule_cannot_be_turned_off() -> None:
    """--disabled-rules names the rules that can be turned off when given a wrong one."""
    with pytest.raises(ValueError, match="fluid-share"):
        make_scheduler("just-in-time").__class__(disabled_rules=("no-such-rule",))
    with pytest.raises(ValueError, match="cannot turn off"):
        make_scheduler("just-in-time").__class__(disabled_rules=("on-time",))
