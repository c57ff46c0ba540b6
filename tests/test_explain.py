"""`--explain`: how often each of the scheduler's rules decided and what it changed
against the base rule alone, in the simulator and from a server's /stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from armory_client import PolicyClient
from server_harness import make_obs, running_server

from armory.cli import main
from armory.scheduling.just_in_time import RULES
from armory.scheduling.registry import make_scheduler
from armory.scheduling.rule_changes import RuleChanges
from armory.scheduling.snapshot import Batch
from armory.server_stats import StatsReading, combined
from armory.sim.fleet_family import generate_fleet
from armory.sim.simulator import SimConfig, simulate
from armory.sim.sweep import read_fleet
from armory.transports.http import stats_json

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


# ---- what each rule changed ---------------------------------------------------


def test_a_decision_against_the_base_rule_s_counts_how_it_differs() -> None:
    """Alike batches change nothing; a wait where the base rule runs holds the GPU until
    the wait's end; a batch where it waits ran; other robots are counted swapped."""
    same = RuleChanges.of(Batch((1, 2), rule="on-time"), Batch((2, 1)), now_s=1.0)
    assert (same.decisions, same.changed, same.both_ran, same.swapped) == (1, 0, 1, 0)
    held = RuleChanges.of(Batch((), wait_until_s=1.25, rule="wait"), Batch((3,)), now_s=1.0)
    assert (held.changed, held.held, held.held_s, held.ran, held.both_ran) == (1, 1, 0.25, 0, 0)
    ran = RuleChanges.of(Batch((3,)), Batch((), wait_until_s=2.0), now_s=1.0)
    assert (ran.changed, ran.held, ran.ran) == (1, 0, 1)
    other = RuleChanges.of(Batch((1, 4, 5)), Batch((1, 2)), now_s=1.0)
    assert (other.changed, other.robots, other.base_robots, other.swapped) == (1, 3, 2, 2)
    smaller = RuleChanges.of(Batch((1,)), Batch((1, 2)), now_s=1.0)
    assert (smaller.changed, smaller.swapped) == (1, 0)
    waits = RuleChanges.of(Batch((), wait_until_s=2.0), Batch((), wait_until_s=3.0), now_s=1.0)
    assert (waits.changed, waits.held, waits.ran) == (1, 0, 0)
    total = same + held + other
    assert (total.decisions, total.changed, total.swapped, total.robots) == (3, 2, 2, 5)
    assert total - held == same + other


def test_explaining_changes_no_decision_and_on_time_changes_nothing() -> None:
    """The base rule is asked beside the scheduler, on the same snapshots: the run is the
    same with and without explaining; every decision is compared once; on-time, the base
    rule itself, changes nothing; wait holds the GPU wherever it decides; over capacity
    fluid-share serves other robots than on-time would."""
    scheduler = make_scheduler("just-in-time")
    light = generate_fleet("mixed", 4).fleet  # 24 robots at 0.4x capacity: wait decides
    plain = simulate(light, scheduler, SimConfig(duration_s=5.0, seed=0))
    explained = simulate(light, scheduler, SimConfig(duration_s=5.0, seed=0, explain=True))
    assert (
        plain.system == explained.system and plain.decisions_by_rule == explained.decisions_by_rule
    )
    assert not plain.rule_changes
    changes = explained.rule_changes
    assert {r: c.decisions for r, c in changes.items()} == explained.decisions_by_rule
    assert changes["on-time"].changed == 0 and changes["on-time"].swapped == 0
    wait = changes["wait"]
    assert wait.decisions > 0 and wait.held == wait.changed == wait.decisions
    assert wait.held_s > 0.0
    over = simulate(
        read_fleet(FLEET), scheduler, SimConfig(duration_s=10.0, seed=0, explain=True)
    ).rule_changes
    assert over["fluid-share"].changed > 0 and over["fluid-share"].swapped > 0
    assert over["on-time"].changed == 0


def test_a_baseline_has_no_base_rule_to_be_held_against() -> None:
    """A scheduler of one rule is counted, not compared."""
    fleet = generate_fleet("mixed", 1001).fleet
    config = SimConfig(duration_s=2.0, seed=0, explain=True)
    report = simulate(fleet, make_scheduler("max-batch"), config)
    assert report.decisions_by_rule and not report.rule_changes


def test_simulate_explain_prints_what_each_rule_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`armory simulate --explain` prints a row per rule that decided, against on-time."""
    assert main(["simulate", "--fleet", str(FLEET), "--duration", "5", "--explain"]) == 0
    out = capsys.readouterr().out
    table = out.split("what each rule changed, against on-time alone on the same snapshots:")[1]
    rows = {line.split()[0]: line.split() for line in table.strip().splitlines()[2:]}
    assert rows["on-time"][2:4] == ["0", "(0.0%)"]
    assert "fluid-share" in rows


def test_rule_changes_from_a_server_are_range_checked_and_taken_between_readings() -> None:
    """/stats' rule changes: numbers >= 0 only (the field named otherwise); the fleet
    runner keeps the later reading less the earlier; a server restarted counts afresh."""
    base = {"batch_size_counts": {"1": 3}, "busy_s": 1.0}
    wait = {"decisions": 5, "changed": 5, "held": 5, "held_s": 0.1}
    before = StatsReading.from_json({**base, "rule_changes": {"wait": wait}})
    later = {"decisions": 9, "changed": 9, "held": 9, "held_s": 0.3}
    after = StatsReading.from_json(
        {**base, "rule_changes": {"wait": later, "on-time": {"decisions": 2}}}
    )
    since = after.rule_changes_since(before)
    assert since["wait"].decisions == 4 and since["wait"].held_s == pytest.approx(0.2)
    assert since["on-time"] == RuleChanges(decisions=2)
    assert before.rule_changes_since(after)["wait"] == before.rule_changes["wait"]
    for bad, named in (
        ({"decisions": -1}, "decisions"),
        ({"held_s": float("nan")}, "held_s"),
        ({"swapped": "3"}, "swapped"),
        ({"ran": True}, "ran"),
    ):
        with pytest.raises(ValueError, match=named):
            StatsReading.from_json({**base, "rule_changes": {"wait": bad}})
    both = combined([before, after])
    assert both.rule_changes["wait"].decisions == 14 and both.rule_changes["on-time"].decisions == 2


def test_a_server_that_explains_its_rules_reports_their_changes() -> None:
    """With explain_rules the server's /stats body holds what each rule changed (the base rule
    beside itself: nothing); without, nothing is compared."""
    for explain in (True, False):
        with (
            running_server(explain_rules=explain) as server,
            PolicyClient("127.0.0.1", server.port) as client,
        ):
            for step in range(4):
                client.infer(make_obs(1, step))
            reading = StatsReading.from_json(json.loads(stats_json(server.stats)))
        decided = reading.decisions_by_rule
        assert sum(decided.values()) >= 4
        if explain:
            assert {r: c.decisions for r, c in reading.rule_changes.items()} == decided
            assert all(c.changed == 0 for r, c in reading.rule_changes.items() if r == "on-time")
        else:
            assert reading.rule_changes == {}
