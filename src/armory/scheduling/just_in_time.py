"""just-in-time: Armory's default scheduler, a few named rules in one decision path.

Within capacity (``on-time``, ``wait``): every robot the server knows
is ordered by the tick that would first find its queue empty (a period after its
deadline), less its downlink, and robots already past that by what they lose per
second of delay (weight x rate); for each batch size the scheduler plays that order in
back-to-back batches, the first of them holding only robots whose observations are in,
and weighs how late each chunk would finish past its *due* time (deadline minus
downlink: the period kept as slack) by what its robot loses per second. The
least late size, then the one whose first batch buys the most motion per GPU second,
is chosen; it starts at once, or at its latest start when that keeps everyone on time,
so that chunks come from fresh observations and the GPU stays free for others (not
where every robot is directed: their observations come when the server asked).

Over capacity, as the weighted fluid optimum (:mod:`armory.scheduling.fluid_mix`)
says: with every robot streaming (``fluid-share``; directed robots, and robots that ask
once their chunks are played out, may wait dry too), each robot's due time moves by
the dry wait that serves it the share of its ticks the optimum serves, and the rule
above runs on the moved times; otherwise robots are ranked by the weighted actions a
chunk adds, at batch sizes the optimum uses (``overload``).
Directed robots the scheduler keeps waiting dry are told to send holding fewer actions,
or once dry (:meth:`JustInTimeScheduler.held_shares`).

Every batch names its rule (:data:`RULES`); docs/scheduling.md gives the reasoning,
the ablation of each rule and the measured results.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import numpy as np

from armory.scheduling.base import Scheduler
from armory.scheduling.batch_sizes import candidate_sizes, read_only
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.fluid_mix import IN_FULL_TOLERANCE, fluid_mix_unless_fed
from armory.scheduling.ordering import worth_order
from armory.scheduling.snapshot import Batch, Snapshot

BASE_RULE = "on-time"
"""The rule every decision falls back to; it cannot be turned off."""

RULES: dict[str, str] = {
    "on-time": "the first batch of the back-to-back plan (the earliest to find its queue "
    "empty first, robots past that by weight x rate) of the size that leaves the fleet "
    "least late and buys the most motion per GPU second",
    "wait": "every chunk of the best plan is on time: wait for the plan's latest start "
    "(unless every robot is directed)",
    "fluid-share": "over capacity, every robot streaming (or directed, or asking once its "
    "chunk is played out): each robot's due time moved by the dry wait that serves it the "
    "share of ticks the fluid optimum serves",
    "overload": "over capacity: robots by the weighted actions a chunk adds, at a batch "
    "size the fluid optimum uses",
}
"""Every rule of the decision path, by the name a batch carries (docs/scheduling.md)."""

_NEVER_S = 1e6
"""A wait that stands for never (a robot the fluid optimum does not serve)."""
_IN_FULL = 1.0 - IN_FULL_TOLERANCE
"""A fluid share at least this large serves the robot in full (no dry wait)."""
_LAYOUTS_KEPT = 16
"""Plan layouts (fleet size, max batch size) kept between decisions."""


def _directed(s: Snapshot) -> np.ndarray:
    """Per robot: it sends when the server says (all False when the snapshot says none)."""
    return np.zeros(s.num_robots, dtype=bool) if s.directed is None else s.directed


def _batch_numbers(in_due_order: np.ndarray, max_size: int) -> np.ndarray:
    """Per candidate size (rows) and robot in due order (columns): how many back-to-back
    batches of that size have run once that robot's chunk is computed. The first batch
    holds the first eligible robots; every other robot, eligible or not (its request
    still on its way), rides a later batch in due order."""
    if in_due_order[:max_size].all():
        return _back_to_back(in_due_order.size, max_size)
    sizes = candidate_sizes(max_size)[:, None]
    first = np.cumsum(in_due_order) <= sizes
    first &= in_due_order
    after = np.arange(in_due_order.size) - np.cumsum(first, axis=1)
    after //= sizes
    after += 2
    return np.where(first, 1, after)


@functools.lru_cache(maxsize=_LAYOUTS_KEPT)
def _back_to_back(num_robots: int, max_size: int) -> np.ndarray:
    """:func:`_batch_numbers` where the first ``max_size`` robots in due order are all
    eligible: position ``j`` rides batch ``j // size + 1`` (read-only)."""
    sizes = candidate_sizes(max_size)
    return read_only(np.arange(num_robots)[None, :] // sizes[:, None] + 1)


@functools.lru_cache(maxsize=_LAYOUTS_KEPT)
def _in_first_batch(num_candidates: int, max_size: int) -> np.ndarray:
    """Per candidate size (rows) and eligible robot in due order (columns): whether it
    rides the first batch of that size (read-only)."""
    sizes = candidate_sizes(max_size)
    return read_only(np.arange(num_candidates)[None, :] < sizes[:, None])


class JustInTimeScheduler(Scheduler):
    """Serve each robot as late as is safe while the fleet fits; under overload, spend
    the GPU where a chunk buys the most weighted motion."""

    name = "just-in-time"

    def __init__(
        self,
        *,
        margin_s: float = 0.004,
        margin_ticks: float = 0.5,
        overload_actions: float = 5.0,
        disabled_rules: tuple[str, ...] = (),
    ) -> None:
        unknown = sorted(set(disabled_rules) - set(RULES) | ({BASE_RULE} & set(disabled_rules)))
        if unknown:
            raise ValueError(
                f"just-in-time cannot turn off {unknown}; rules that can be turned off: "
                f"{', '.join(r for r in RULES if r != BASE_RULE)}"
            )
        self.disabled_rules = frozenset(disabled_rules)
        # Safety margin added to every predicted finish: a fixed part (latency and
        # network jitter) and a part in control ticks of the fastest robot
        # (observations and actions happen on tick boundaries).
        self.margin_s = margin_s
        self.margin_ticks = margin_ticks
        # Overload: even the best back-to-back plan loses more than this many actions
        # (weighted, in units of the heaviest robot's weight).
        self.overload_actions = overload_actions

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> JustInTimeScheduler:
        """A scheduler with the config's just-in-time options."""
        return cls(disabled_rules=config.disabled_rules)

    def base_rule_only(self) -> JustInTimeScheduler:
        """This scheduler, its options kept, with every rule but ``on-time`` turned off."""
        base = copy.copy(self)
        base.disabled_rules = frozenset(RULES) - {BASE_RULE}
        return base

    def schedule(self, snapshot: Snapshot) -> Batch:
        """Called whenever the executor is free and at least one robot is eligible."""
        if not snapshot.eligible.any():
            return Batch((), rule=BASE_RULE)
        if snapshot.num_robots == 1:
            return self._one_robot(snapshot)
        return self._rule(snapshot, None)

    def _one_robot(self, s: Snapshot) -> Batch:
        """:meth:`_rule` for a fleet of one eligible robot, in scalars (the same decision
        at a fifth of the cost): a plan of one batch of one."""
        hz = float(s.control_hz[0])
        due = float(s.deadline_s[0] - s.downlink_s[0])
        latency_s = float(s.latency_table_s[1])
        margin = self._margin_s(hz)
        # Weighted by the robot's weight relative to the heaviest (its own): 1.
        tardiness = round(max(s.now_s + latency_s + margin - due, 0.0) * hz, 9)
        if tardiness > 0.0 and tardiness > self.overload_actions:
            return self._rule(s, None)
        if tardiness == 0.0 and self._waits(s) and due - latency_s - margin > s.now_s:
            return Batch((), wait_until_s=due - latency_s - margin, rule="wait")
        return Batch((int(s.robot_id[0]),), rule=BASE_RULE)

    def _margin_s(self, fastest_hz: float) -> float:
        """Safety margin added to every predicted finish: the fixed part and the part in
        control ticks of the fastest robot that may ride."""
        return self.margin_s + self.margin_ticks * (1.0 / fastest_hz)

    def _on(self, rule: str) -> bool:
        """Whether ``rule`` may decide (rules are turned off only to measure them)."""
        return rule not in self.disabled_rules

    def _waits(self, s: Snapshot) -> bool:
        """Whether ``wait`` may hold the GPU for a plan's latest start: not where every
        robot is directed, since a directed robot's observation arrives when the server
        asked for it (a lead before its queue runs dry) and grows no fresher by waiting."""
        return self._on("wait") and not _directed(s).all()

    def _rule(self, s: Snapshot, gap_s: np.ndarray | None) -> Batch:
        """The batch of the plan over robots in due order; with ``gap_s`` (fluid-share)
        each due time moved by its robot's dry wait, and no over-capacity rule again."""
        now = s.now_s
        # The plan covers every robot the server knows: robots whose requests are
        # still on their way (threshold and directed clients ask late) need GPU time
        # too. Only eligible robots can ride the next batch. The order ("due order"
        # below) is by the tick that would first find each queue empty, a period after its
        # deadline (the mirror's deadline is the queue's last action); each chunk's
        # lateness still counts from the deadline, that period kept as slack. Robots
        # whose first empty tick has passed lose weight x rate per second whatever
        # their turn, so the plan's weighted lateness is least with the heaviest first.
        due = s.deadline_s - s.downlink_s
        if gap_s is not None:
            due += gap_s
        weight = s.relative_weight()
        value_per_s = weight * s.control_hz
        first_empty = due + 1.0 / s.control_hz
        rows = np.lexsort((s.contact_order, -value_per_s, np.maximum(first_empty, now)))
        due = due[rows]
        value_per_s = value_per_s[rows]
        in_due_order = s.eligible[rows]
        candidates = rows[in_due_order]
        max_size = min(s.max_batch_size, candidates.size)
        sizes = candidate_sizes(max_size)
        latency_s = s.latency_table_s[sizes]
        margin = self._margin_s(float(s.control_hz[candidates].max()))

        # Back-to-back batches of each size over the due order (the first of eligible
        # robots only): when each robot's chunk finishes computing, how late that is
        # (weighted), and the least late size.
        finish_s = _batch_numbers(in_due_order, max_size) * latency_s[:, None]
        lateness = now + finish_s
        lateness += margin
        lateness -= due
        np.maximum(lateness, 0.0, out=lateness)
        lateness *= value_per_s
        tardiness = lateness.sum(axis=1).round(9)
        least_tardiness = float(tardiness.min())
        if (
            gap_s is None
            and least_tardiness > 0.0
            and least_tardiness > self.overload_actions * float(weight[candidates].max())
        ):
            fleet_fits, sizes_used, share = self._fluid_optimum(s)
            if not fleet_fits and self._on("fluid-share"):
                gaps = self._fluid_gaps(s, share)
                if gaps.any():
                    return dataclasses.replace(self._rule(s, gap_s=gaps), rule="fluid-share")
            if not fleet_fits and self._on("overload"):
                return self._overloaded(s, sizes_used)

        # The least late size; among equals, the most motion per GPU second in its first
        # batch (the first eligible robots in due order).
        if sizes.size == 1 or np.count_nonzero(tardiness == least_tardiness) == 1:
            best = int(tardiness.argmin())
        else:
            best = self._most_motion(s, candidates, value_per_s[in_due_order], tardiness, max_size)
        # It waits for its latest start only if that makes nobody late.
        if tardiness[best] == 0.0 and self._waits(s):
            latest_start_s = float((due - finish_s[best]).min() - margin)
            if latest_start_s > now:
                return Batch((), wait_until_s=latest_start_s, rule="wait")
        return Batch(tuple(s.robot_id[candidates[: sizes[best]]].tolist()), rule=BASE_RULE)

    def _most_motion(
        self,
        s: Snapshot,
        candidates: np.ndarray,
        value_per_s: np.ndarray,
        tardiness: np.ndarray,
        max_size: int,
    ) -> int:
        """Index of the least late candidate size whose first batch (the first
        ``candidates``, eligible robots in due order) buys the most motion per second of
        forward pass; ``value_per_s`` is each candidate's weight x rate."""
        sizes = candidate_sizes(max_size)
        latency_s = s.latency_table_s[sizes]
        fresh_s = (
            s.max_execution_horizon[candidates] / s.control_hz[candidates]
            - s.downlink_s[candidates]
            - (s.now_s - s.obs_time_s[candidates])
        )
        gain_s = fresh_s - latency_s[:, None]
        np.maximum(gain_s, 0.0, out=gain_s)
        gain_s *= value_per_s
        gain_s *= _in_first_batch(candidates.size, max_size)
        efficiency = gain_s.sum(1) / latency_s
        return int(np.lexsort((-efficiency, tardiness))[0])

    def _fluid_gaps(self, s: Snapshot, share: np.ndarray) -> np.ndarray:
        """Per robot: how long after its queue runs dry its next chunk is due, so that
        it is served the ``share`` of its ticks the fluid optimum serves (a robot served
        a share phi of its ticks plays a chunk, then waits ``chunk (1/phi - 1)``; one
        whose chunk replaces the ``x`` actions it held at its observation plays ``E - x``
        of it and waits ``(E - x) / f (1/phi - 1)``)."""
        chunk_s = s.chunk_seconds()
        # Only a robot that keeps sending observations can wait dry and still be served
        # from a fresh one; a robot that asks once and waits would be served a stale one.
        # One that says it streams does (a LeRobot client sends once its queue is short,
        # as it is when dry: what it held long ago is no sign); others by their age.
        age_s = s.now_s - s.obs_time_s
        streams = age_s <= 2.0 / s.control_hz + 2.0 * s.downlink_s + self.margin_s
        if s.streams is not None:
            streams |= s.streams
        # So can a directed robot: the server told it what to hold when it sends (once
        # dry: its action index stands still while it waits, and the chunk loses
        # nothing), and what it held is lost to each chunk alike. (A threshold client
        # would count the wait into its round trip and ask earlier.)
        directed = _directed(s)
        held_at_obs_s = np.clip(s.deadline_s - s.obs_time_s, 0.0, chunk_s)
        held_s = np.where(directed, held_at_obs_s, 0.0)
        waits = (chunk_s - held_s) * (1.0 / np.maximum(share, 1e-6) - 1.0)
        waits_ok = np.full(s.num_robots, bool(streams.all())) | directed
        # So can a robot that asks only once its chunk is played out, for the observation
        # it sent dry: unlike a threshold client it does not ask earlier for the wait (a
        # round-trip estimate would count the wait in, and spiral).
        if s.plays_out is not None:
            waits_ok |= s.plays_out & (held_at_obs_s == 0.0)
        return np.where((share >= _IN_FULL) | ~waits_ok, 0.0, np.minimum(waits, _NEVER_S))

    def held_shares(self, snapshot: Snapshot) -> np.ndarray:
        """Directed robots the fluid optimum serves less than in full (over capacity
        fluid-share keeps them waiting dry; a robot whose round trip holds more ticks
        than its chunk is worth serving only from an observation taken once dry): the
        share of their ticks the optimum serves when each chunk pays the ticks its round
        trip holds on average (such a robot sends at a point of its queue, not at a tick
        a batch was planned for: :attr:`~armory.scheduling.fluid_mix.FluidMix.phase_share`);
        1 for every other robot."""
        s = snapshot
        shares = np.ones(s.num_robots)
        if not self._on("fluid-share") or not _directed(s).any():
            return shares
        mix = fluid_mix_unless_fed(s)
        if mix is None:
            return shares
        held = _directed(s) & (mix.share < _IN_FULL)
        return np.where(held, mix.phase_share, shares)

    def _overloaded(self, s: Snapshot, sizes_used: np.ndarray) -> Batch:
        """The batch, of a size the fluid optimum uses, that buys the most weighted
        actions per second of forward pass."""
        rows, worth = worth_order(s, np.flatnonzero(s.eligible))
        sizes = sizes_used[sizes_used <= rows.size]
        if sizes.size == 0:
            sizes = np.array([rows.size])
        rate = np.cumsum(worth)[sizes - 1] / s.latency_table_s[sizes]
        size = int(sizes[int(np.argmax(np.round(rate, 9)))])
        return Batch(tuple(s.robot_id[rows[:size]].tolist()), rule="overload")

    def _fluid_optimum(self, s: Snapshot) -> tuple[bool, np.ndarray, np.ndarray]:
        """Whether the GPU keeps up with the fleet (its fluid optimum serves every robot
        as much as the robot's round trip allows), the batch sizes it uses (every
        candidate size if it uses none), and the share of each robot's ticks the GPU
        leaves it (all ones, unsolved, when the fleet surely fits; one for a robot held
        back by its own round trip alone, which a dry wait would not help)."""
        mix = fluid_mix_unless_fed(s)
        if mix is None:
            return True, candidate_sizes(s.max_batch_size), np.ones(s.num_robots)
        sizes = mix.sizes if mix.sizes.size else candidate_sizes(s.max_batch_size)
        return mix.fits, sizes, np.where(mix.held, mix.share, 1.0)
