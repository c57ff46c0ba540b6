"""What each rule of a scheduler changed: its decisions held against those its base
rule alone makes on the same snapshots (``--explain``).

A scheduler of several rules names the rule behind every batch (``Batch.rule``), and
counting them says how often each rule decided, not what it did. With explaining on,
the decision step also asks the scheduler's base rule alone
(:meth:`~armory.scheduling.base.Scheduler.base_rule_only`) on the same snapshot (a
decision is a pure function of its snapshot) and tallies, per rule, how often and how
the two differ: the GPU held where the base rule would run a batch, a batch run where
it would wait, or other robots. The base rule is asked after the decision is timed:
explaining doubles the scheduler's work but does not show in decision times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from armory.scheduling.snapshot import Batch


@dataclass(frozen=True)
class RuleChanges:
    """One rule's decisions against the base rule's on the same snapshots (sums)."""

    decisions: int = 0
    """Decisions of the rule compared."""
    changed: int = 0
    """Of those, decisions other than the base rule's: a wait where it runs a batch, a
    batch where it waits, other robots, or another wait."""
    held: int = 0
    """The rule waited where the base rule would run a batch."""
    held_s: float = 0.0
    """Seconds those waits plan to hold the GPU (each until the time it names; a wait
    for the next event counts none)."""
    ran: int = 0
    """The rule ran a batch where the base rule would wait."""
    both_ran: int = 0
    """Decisions on which both ran a batch."""
    robots: int = 0
    """Robots in the rule's batches on those decisions."""
    base_robots: int = 0
    """Robots in the base rule's batches on those decisions."""
    swapped: int = 0
    """Robots in the rule's batches that the base rule's batch leaves out (on those
    decisions)."""

    @classmethod
    def of(cls, batch: Batch, base: Batch, now_s: float) -> RuleChanges:
        """One decision, ``batch``, against the base rule's ``base`` at ``now_s``."""
        runs, base_runs = bool(batch.robot_ids), bool(base.robot_ids)
        if runs and base_runs:
            swapped = len(set(batch.robot_ids) - set(base.robot_ids))
            changed = swapped > 0 or len(batch.robot_ids) != len(base.robot_ids)
            return cls(
                decisions=1,
                changed=int(changed),
                both_ran=1,
                robots=len(batch.robot_ids),
                base_robots=len(base.robot_ids),
                swapped=swapped,
            )
        if runs or base_runs:
            held_s = 0.0
            if base_runs and batch.wait_until_s is not None:
                held_s = max(batch.wait_until_s - now_s, 0.0)
            return cls(decisions=1, changed=1, held=int(base_runs), held_s=held_s, ran=int(runs))
        return cls(decisions=1, changed=int(batch.wait_until_s != base.wait_until_s))

    def __add__(self, other: RuleChanges) -> RuleChanges:
        return _combined(self, other, 1)

    def __sub__(self, other: RuleChanges) -> RuleChanges:
        return _combined(self, other, -1)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuleChanges:
        """From a ``/stats`` answer: every field a finite number >= 0 (missing ones 0);
        raises ValueError naming the first that is not."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = data.get(f.name, 0)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"rule changes: {f.name} must be a number, got {value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"rule changes: {f.name} must be >= 0, got {value!r}")
            values[f.name] = type(f.default)(value)  # each field's own type: int or float
        return cls(**values)


def _combined(a: RuleChanges, b: RuleChanges, sign: int) -> RuleChanges:
    return RuleChanges(
        **{f.name: getattr(a, f.name) + sign * getattr(b, f.name) for f in dataclasses.fields(a)}
    )


def changes_since(
    now: Mapping[str, RuleChanges], earlier: Mapping[str, RuleChanges]
) -> dict[str, RuleChanges]:
    """Per rule, the changes between two readings of running sums (rules with none left
    out; a counter that went down, a server restarted between them, counts afresh)."""
    since = {}
    for rule, changes in now.items():
        delta = changes - earlier.get(rule, RuleChanges())
        if delta.decisions < 0:
            delta = changes
        if delta.decisions > 0:
            since[rule] = delta
    return since


def summed(tallies: list[Mapping[str, RuleChanges]]) -> dict[str, RuleChanges]:
    """Per rule, the changes of several tallies together (a cluster's replicas, K GPUs)."""
    total: dict[str, RuleChanges] = {}
    for tally in tallies:
        for rule, changes in tally.items():
            total[rule] = total.get(rule, RuleChanges()) + changes
    return total
