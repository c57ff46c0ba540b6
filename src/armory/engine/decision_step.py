"""One scheduling decision: snapshot, choose, check, dispatch with its landing estimate.

The real-time batch loop (:mod:`armory.engine.batch_loop`) and the virtual-time
simulator (:mod:`armory.sim.simulator`) both decide through a :class:`DecisionStep`,
so a simulated result is a claim about the serving code, dispatch included. The
callers own only what differs between them: where time comes from, how a batch
reaches the GPU, and how chunks travel back.

A step takes the mirror's snapshot at ``now_s`` with the learned latency table,
asks the scheduler, checks the batch's invariants and counts the decision by the
rule that made it. :meth:`DecisionStep.dispatch` then tells the mirror when each
robot's chunk should land (start + learned latency + that robot's downlink), and
:meth:`DecisionStep.batch_done` feeds the measured time back to the profile and
the scheduler. A step that explains also asks the scheduler's base rule alone on
every snapshot and counts what the other rules changed
(:mod:`armory.scheduling.rule_changes`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from armory.core.latency_profile import LatencyProfile
from armory.engine.fault_isolation import decide_isolating
from armory.engine.queue_mirror import QueueMirror
from armory.engine.session import BATCH_SIZE_SMOOTHING
from armory.scheduling.base import Scheduler
from armory.scheduling.rule_changes import RuleChanges
from armory.scheduling.snapshot import Batch, Snapshot, check_batch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """What one call to the scheduler decided."""

    batch: Batch
    """Robots to run now (empty: wait, until ``batch.wait_until_s`` when set)."""
    decision_s: float
    """Wall-clock seconds of the snapshot, the scheduler and the check."""
    decision_cpu_s: float = 0.0
    """Processor seconds of the same in the deciding thread: not inflated by other
    threads and processes sharing the cores (a live server's clients on one machine)."""
    refused: tuple[int, ...] = ()
    """Robots removed from the mirror because the scheduler failed on their state (their
    requests are to be refused); only when faults are isolated."""


@dataclass(frozen=True)
class Dispatched:
    """One robot's part of a dispatched batch."""

    robot_id: int
    chunk_start: int
    """Action index the robot's chunk starts at."""
    land_s: float
    """When the mirror expects the chunk on the robot."""


@dataclass
class DecisionCounters:
    """Counters of the decisions and batches since the step was made."""

    num_decisions: int = 0
    """Calls to ``scheduler.schedule`` (empty batches included)."""
    decision_s: float = 0.0
    decision_cpu_s: float = 0.0
    """Processor seconds of the decisions, in the deciding thread."""
    num_scheduler_faults: int = 0
    """Decisions on which the scheduler raised (taken without the robot that caused it,
    or by the safe rule)."""
    decisions_by_rule: Counter[str] = field(default_factory=Counter)
    """Decisions by the rule that made them (``Batch.rule``; waits included)."""
    rule_changes: dict[str, RuleChanges] = field(default_factory=dict)
    """Per rule, its decisions against the base rule's on the same snapshots (only when
    the step explains)."""


class DecisionStep:
    """The mirror, the scheduler and the learned profile, and the one way to decide."""

    def __init__(
        self,
        mirror: QueueMirror,
        scheduler: Scheduler,
        profile: LatencyProfile,
        *,
        max_batch_size: int,
        check_invariants: bool = True,
        isolate_faults: bool = True,
        explain: bool = False,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.mirror = mirror
        self.scheduler = scheduler
        self.profile = profile
        """The server's learned forward-pass latency (planned, not true, times)."""
        self.max_batch_size = max_batch_size
        self.check_invariants = check_invariants
        self.isolate_faults = isolate_faults
        """A scheduler that raises is asked again without the robot whose state made it
        fail (:mod:`armory.engine.fault_isolation`); off, the error propagates."""
        self.base_rule = scheduler.base_rule_only() if explain else None
        """With ``explain``: the scheduler's base rule alone, asked on every snapshot after
        the scheduler to count what the other rules changed (None: not explained)."""
        self.counters = DecisionCounters()
        self.recent_batch_size = 1.0
        """Moving average of batch sizes (tells directed robots when to ask again)."""

    def snapshot(self, now_s: float) -> Snapshot:
        max_batch = self.max_batch_size
        return self.mirror.snapshot(now_s, self.profile.table(max_batch), max_batch)

    def decide(self, now_s: float) -> Decision | None:
        """The scheduler's batch at ``now_s``; None when no robot is eligible."""
        # Wall and processor time: on a shared machine wall time also counts the other
        # processes' turns on the cores (a thread-time read costs about 0.4 us).
        started = time.perf_counter()
        started_cpu = time.thread_time()
        snapshot = self.snapshot(now_s)
        if not snapshot.eligible.any():
            return None
        refused: tuple[int, ...] = ()
        faults = self.counters.num_scheduler_faults
        if self.isolate_faults:
            batch, refused = self._schedule_isolating(snapshot)
        else:
            batch = self._schedule_checked(snapshot)
        decision = Decision(
            batch=batch,
            decision_s=time.perf_counter() - started,
            decision_cpu_s=time.thread_time() - started_cpu,
            refused=refused,
        )
        c = self.counters
        c.num_decisions += 1
        c.decision_s += decision.decision_s
        c.decision_cpu_s += decision.decision_cpu_s
        rule = batch.rule or self.scheduler.name
        c.decisions_by_rule[rule] += 1
        if self.base_rule is not None and c.num_scheduler_faults == faults:
            self._explain(snapshot, rule, batch)
        return decision

    def _explain(self, snapshot: Snapshot, rule: str, batch: Batch) -> None:
        """Count what ``rule``'s ``batch`` changed against the base rule's on ``snapshot``."""
        assert self.base_rule is not None
        try:
            base = self.base_rule.schedule(snapshot)
        except Exception:
            # Explaining is a diagnostic: it never fails a decision.
            logger.exception("the base rule failed on a snapshot the scheduler decided")
            return
        changes = self.counters.rule_changes
        changes[rule] = changes.get(rule, RuleChanges()) + RuleChanges.of(
            batch, base, snapshot.now_s
        )

    def dispatch(self, batch: Batch, start_s: float) -> list[Dispatched]:
        """``batch`` starts its forward pass at ``start_s``: each robot's chunk is expected
        after the learned latency plus its downlink; the mirror plays it into its queue."""
        latency_s = self.planned_latency_s(len(batch.robot_ids))
        mirror = self.mirror
        dispatched = []
        for robot_id in batch.robot_ids:
            land_s = start_s + latency_s + mirror.downlink_s_of(robot_id)
            dispatched.append(Dispatched(robot_id, mirror.dispatch(robot_id, land_s), land_s))
        return dispatched

    def planned_latency_s(self, batch_size: int) -> float:
        return self.profile.latency_s(batch_size)

    def batch_done(self, batch: Batch, policy_s: float, *, learn: bool = True) -> None:
        """A batch's forward pass took ``policy_s``: the profile learns it (``learn``: the
        pass succeeded), the scheduler hears of it, the recent batch size moves."""
        size = len(batch.robot_ids)
        if learn:
            self.profile.observe(size, policy_s)
        self.scheduler.on_batch_done(batch, policy_s)
        self.recent_batch_size += BATCH_SIZE_SMOOTHING * (size - self.recent_batch_size)

    def held_shares(self, now_s: float) -> dict[int, float]:
        """Robots the scheduler will keep waiting dry between chunks, by id, with the
        share of their ticks it means to serve them (``Scheduler.held_shares``, below 1):
        directed ones are told to send holding fewer actions than the usual lead, or none.

        Raises ValueError when the scheduler's answer is not one share in [0, 1] per
        robot of the snapshot."""
        snapshot = self.snapshot(now_s)
        shares = np.asarray(self.scheduler.held_shares(snapshot), dtype=np.float64)
        if shares.shape != (snapshot.num_robots,):
            raise ValueError(
                f"held_shares gave shape {shares.shape} for {snapshot.num_robots} robots"
            )
        bad = ~((shares >= 0.0) & (shares <= 1.0))
        if bad.any():
            raise ValueError(
                f"held_shares gave {int(bad.sum())} shares outside [0, 1], "
                f"robot {int(snapshot.robot_id[bad][0])}'s {float(shares[bad][0])}"
            )
        held = np.flatnonzero(shares < 1.0)
        return dict(zip(snapshot.robot_id[held].tolist(), shares[held].tolist(), strict=True))

    def _schedule_checked(self, snapshot: Snapshot) -> Batch:
        batch = self.scheduler.schedule(snapshot)
        if self.check_invariants:
            check_batch(snapshot, batch)
        return batch

    def _schedule_isolating(self, snapshot: Snapshot) -> tuple[Batch, tuple[int, ...]]:
        """The scheduler's batch; when it raises, the batch taken without the robot whose
        state made it fail (that robot leaves the mirror), or the safe rule's."""
        try:
            return self._schedule_checked(snapshot), ()
        except Exception:
            logger.exception("scheduling failed; looking for the robot whose state caused it")
        isolated = decide_isolating(self._schedule_checked, snapshot)
        self.counters.num_scheduler_faults += 1
        for robot_id in isolated.culprits:
            logger.warning("robot %d refused: the scheduler fails on its queue state", robot_id)
            if robot_id in self.mirror:
                self.mirror.remove(robot_id)
        if self.check_invariants:
            check_batch(snapshot, isolated.batch)
        return isolated.batch, isolated.culprits
