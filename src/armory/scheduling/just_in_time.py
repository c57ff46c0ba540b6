"""just-in-time: Armory's default scheduler, a few named rules in one decision path.

Within capacity (``on-time``, ``wait``, ``least-late``): every robot the server knows
is ordered by when its next chunk must have finished computing (deadline minus
downlink, its *due* time); for each batch size the scheduler plays that order in
back-to-back batches and weighs how late each chunk would finish by what its robot
loses per second (weight x rate). The least late size, then the one whose first batch
buys the most motion per GPU second, is chosen; it starts at once, or at its latest
start when that keeps everyone on time, so that chunks come from fresh observations
and the GPU stays free for others.

Over capacity, as the weighted fluid optimum (:mod:`armory.scheduling.fluid_mix`)
says: with every robot streaming (``fluid-share``), each robot's due time moves by
the dry wait that serves it the share of its ticks the optimum serves, and the rule
above runs on the moved times; otherwise robots are ranked by the weighted actions a
chunk adds, at batch sizes the optimum uses (``overload``, with ``empty-queue-wait``
and ``longest-chunk-due`` for singles). Small streaming fleets have their batch
checked by plays of the fleet forward (``rollout``, ``cadence``, ``steady-cadence``).
Directed robots the scheduler keeps waiting dry are told to send once dry
(:meth:`JustInTimeScheduler.waits_dry`).

Every batch names its rule (:data:`RULES`); docs/scheduling.md gives the reasoning,
the ablation of each rule and the measured results.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from armory.scheduling.base import Scheduler
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.fluid_mix import fluid_mix, surely_fits
from armory.scheduling.ordering import worth_order
from armory.scheduling.rollout_checks import best_cadence, best_first_batch, steady_cadence
from armory.scheduling.snapshot import Batch, Snapshot

BASE_RULE = "on-time"
"""The rule every decision falls back to; it cannot be turned off."""

RULES: dict[str, str] = {
    "on-time": "the first batch of the back-to-back plan (earliest due first) of the size "
    "that leaves the fleet least late and buys the most motion per GPU second",
    "wait": "every chunk of the best plan is on time: wait for the plan's latest start",
    "least-late": "the fleet fits but every plan is late by the margin: plans compared by "
    "lateness past the deadlines plus a fifth of a tick",
    "fluid-share": "over capacity, every robot streaming: each robot's due time moved by "
    "the dry wait that serves it the share of ticks the fluid optimum serves",
    "overload": "over capacity: robots by the weighted actions a chunk adds, at a batch "
    "size the fluid optimum uses",
    "empty-queue-wait": "over capacity in singles: wait for the observation a robot sends "
    "as its queue runs dry (a full chunk)",
    "longest-chunk-due": "over capacity in singles, equal weights, every robot streaming: "
    "among robots due now, the longest chunk first",
    "rollout": "over capacity, at most 16 streaming robots: a first batch that starves the "
    "fleet less over 0.75 s of play replaced the rule's",
    "cadence": "over capacity, at most 16 streaming robots: a steady cadence that starves "
    "less over 1.5 s replaced the batch",
    "steady-cadence": "the fleet fits, at most 16 streaming robots: a batch size whose "
    "back-to-back play starves nobody replaced one that starves somebody",
}
"""Every rule of the decision path, by the name a batch carries (docs/scheduling.md)."""

_DENSE_SIZES = 16
_NEVER_S = 1e6
"""A wait that stands for never (a robot the fluid optimum does not serve)."""
"""Up to this max batch size every size is a candidate; past it a geometric subset."""


def _directed(s: Snapshot) -> np.ndarray:
    """Per robot: it sends when the server says (all False when the snapshot says none)."""
    return np.zeros(s.num_robots, dtype=bool) if s.directed is None else s.directed


def candidate_sizes(max_size: int) -> np.ndarray:
    """Batch sizes to evaluate: all up to 16, then roughly geometric steps and the max."""
    if max_size <= _DENSE_SIZES:
        return np.arange(1, max_size + 1)
    sizes = set(range(1, _DENSE_SIZES + 1))
    size = _DENSE_SIZES
    while size < max_size:
        size = int(size * 1.5)
        sizes.add(min(size, max_size))
    sizes.add(max_size)
    return np.array(sorted(sizes))


class JustInTimeScheduler(Scheduler):
    """Serve each robot as late as is safe while the fleet fits; under overload, spend
    the GPU where a chunk buys the most weighted motion."""

    name = "just-in-time"

    def __init__(
        self,
        *,
        margin_s: float = 0.004,
        margin_ticks: float = 0.5,
        late_ticks: float = 0.2,
        overload_actions: float = 5.0,
        rollout_horizon_s: float = SchedulerConfig.rollout_horizon_s,
        rollout_margin: float = 0.5,
        rollout_max_robots: int = 16,
        cadence_horizon_s: float = SchedulerConfig.cadence_horizon_s,
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
        # When every plan is late by that margin on a fleet that fits, plans are
        # compared by how far they finish past the deadlines plus this many ticks: the
        # mirror's deadline sits 0 to 1 tick (half on average) before the tick that
        # would starve, so a chunk a little past it mostly still lands in time.
        self.late_ticks = late_ticks
        # Overload: even the best back-to-back plan loses more than this many actions
        # (weighted, in units of the heaviest robot's weight).
        self.overload_actions = overload_actions
        # Over capacity, with every plan late and every robot streaming observations,
        # the rule's batch is checked by rolling the fleet forward this long; another
        # batch replaces it only if it starves this many weighted ticks less. Fleets
        # above rollout_max_robots are not rolled out (the cost grows with robots x
        # sizes); a horizon of 0 turns rollouts off.
        self.rollout_horizon_s = rollout_horizon_s
        self.rollout_margin = rollout_margin
        self.rollout_max_robots = rollout_max_robots
        # With every robot streaming (and at most rollout_max_robots), the batch is
        # checked against back-to-back batches of one size played this long: over
        # capacity, the cadence that starves least replaces it if it starves
        # rollout_margin weighted ticks less; on a fleet that fits, one that starves
        # nobody replaces a batch whose own size would starve somebody. 0: off.
        self.cadence_horizon_s = cadence_horizon_s

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> JustInTimeScheduler:
        """A scheduler with the config's just-in-time options."""
        return cls(
            rollout_horizon_s=config.rollout_horizon_s,
            cadence_horizon_s=config.cadence_horizon_s,
            disabled_rules=config.disabled_rules,
        )

    def schedule(self, snapshot: Snapshot) -> Batch:
        """Called whenever the executor is free and at least one robot is eligible."""
        if not snapshot.eligible.any():
            return Batch((), rule=BASE_RULE)
        batch, over_capacity = self._rule(snapshot)
        if (
            over_capacity
            and len(batch.robot_ids) == 1
            and self._on("longest-chunk-due")
            and self._singles_by_horizon(snapshot)
        ):
            # The rollouts' continuations do not make this choice, and checked by them
            # it lost a third to a half of what it gains (docs/scheduling.md).
            return self._longest_chunk_due(snapshot, batch)
        if not batch.robot_ids or not self._streams_every_tick(snapshot):
            return batch
        if over_capacity:
            # Rollouts of the first batch, then steady cadences played longer.
            sizes_used = tuple(int(b) for b in self._fluid_optimum(snapshot)[1])
            checks = (
                ("rollout", best_first_batch, self.rollout_horizon_s),
                ("cadence", best_cadence, self.cadence_horizon_s),
            )
            for rule, check, horizon_s in checks:
                if horizon_s > 0.0 and self._on(rule):
                    checked = check(
                        snapshot,
                        batch,
                        horizon_s=horizon_s,
                        margin=self.rollout_margin,
                        sizes_used=sizes_used,
                    )
                    if checked is not batch:
                        batch = dataclasses.replace(checked, rule=rule)
            return batch
        if (
            self.cadence_horizon_s > 0.0
            and self._on("steady-cadence")
            and self._fluid_optimum(snapshot)[0]
        ):
            checked = steady_cadence(snapshot, batch, horizon_s=self.cadence_horizon_s)
            if checked is not batch:
                batch = dataclasses.replace(checked, rule="steady-cadence")
        return batch

    def _on(self, rule: str) -> bool:
        """Whether ``rule`` may decide (rules are turned off only to measure them)."""
        return rule not in self.disabled_rules

    def _rule(self, s: Snapshot, gap_s: np.ndarray | float = 0.0) -> tuple[Batch, bool]:
        """The rule's batch, and whether every plan is late on a fleet over capacity."""
        now = s.now_s
        # The plan covers every robot the server knows, in due order: robots whose
        # requests are still on their way (threshold and directed clients ask late)
        # need GPU time too. Only eligible robots can ride the next batch.
        due = s.deadline_s - s.downlink_s + gap_s
        rows = np.lexsort((s.contact_order, due))
        due = due[rows]
        value_per_s = s.weight[rows] * s.control_hz[rows]
        latency = s.latency_table_s
        candidates = rows[s.eligible[rows]]
        sizes = candidate_sizes(min(s.max_batch_size, candidates.size))
        tick_s = 1.0 / float(np.max(s.control_hz[candidates]))
        margin = self.margin_s + self.margin_ticks * tick_s

        # Back-to-back batches of each size over the due order: when each robot's chunk
        # finishes computing, how late that is, and the latest start keeping all on time.
        positions = np.arange(rows.size)
        finish_s = (positions[None, :] // sizes[:, None] + 1) * latency[sizes][:, None]
        lateness = np.maximum(0.0, now + finish_s + margin - due[None, :])
        tardiness = np.round((lateness * value_per_s[None, :]).sum(axis=1), 9)
        latest_start_s = (due[None, :] - finish_s).min(axis=1) - margin
        weights = s.weight[candidates]
        fleet_fits: bool | None = None  # the fluid optimum's verdict, looked up once
        if tardiness.min() > self.overload_actions * float(weights.max()):
            fleet_fits, sizes_used = self._fluid_optimum(s)
            if not fleet_fits and np.isscalar(gap_s) and self._on("fluid-share"):
                gaps = self._fluid_gaps(s)
                if gaps.any():
                    batch = self._rule(s, gap_s=gaps)[0]
                    return dataclasses.replace(batch, rule="fluid-share"), True
            if (
                np.isscalar(gap_s)
                and not fleet_fits
                and self._on("overload")
                and (sizes_used.max() > 1 or weights.max() > weights.min())
            ):
                return self._overloaded(s, sizes_used), True

        # The least late size; among equals, the most motion per GPU second in its first
        # batch (the first eligible robots in due order). It waits for its latest start
        # only if that makes nobody late.
        fresh_s = (
            s.chunk_seconds()[candidates]
            - s.downlink_s[candidates]
            - (now - s.obs_time_s[candidates])
        )
        gain_s = np.maximum(0.0, fresh_s[None, :] - latency[sizes][:, None])
        in_batch = np.arange(candidates.size)[None, :] < sizes[:, None]
        worth_per_s = (gain_s * (s.weight * s.control_hz)[candidates][None, :] * in_batch).sum(1)
        efficiency = worth_per_s / latency[sizes]
        keys = [-efficiency, tardiness]
        every_plan_late = tardiness.min() > 0.0
        if every_plan_late and fleet_fits is None:
            fleet_fits = self._fluid_optimum(s)[0]
        late_rule = every_plan_late and bool(fleet_fits) and self._on("least-late")
        if late_rule:
            # Every plan is late by the margin, yet the fleet fits: the least late plan
            # is the one that finishes least past the deadlines plus late_ticks. With
            # the margin instead, a heavy robot's lateness that would cost no tick can
            # outweigh a light robot's that costs one.
            late = np.maximum(0.0, now + finish_s - self.late_ticks * tick_s - due[None, :])
            keys.append(np.round((late * value_per_s[None, :]).sum(axis=1), 9))
        best = int(np.lexsort(keys)[0])
        if tardiness[best] == 0.0 and latest_start_s[best] > now and self._on("wait"):
            return Batch((), wait_until_s=float(latest_start_s[best]), rule="wait"), False
        rule = "least-late" if late_rule else BASE_RULE
        batch = Batch(tuple(s.robot_id[candidates[: sizes[best]]].tolist()), rule=rule)
        return batch, every_plan_late and not fleet_fits

    def _fluid_gaps(self, s: Snapshot) -> np.ndarray:
        """Per robot: how long after its queue runs dry its next chunk is due, so that
        it is served the share of its ticks the fluid optimum serves (a robot served a
        share phi of its ticks plays a chunk, then waits ``chunk (1/phi - 1)``)."""
        share = fluid_mix(s).share
        chunk_s = s.chunk_seconds()
        waits = chunk_s * (1.0 / np.maximum(share, 1e-6) - 1.0)
        # Only a robot that keeps sending observations can wait dry and still be served
        # from a fresh one; a robot that asks once and waits would be served a stale one.
        age_s = s.now_s - s.obs_time_s
        streams = age_s <= 2.0 / s.control_hz + 2.0 * s.downlink_s + self.margin_s
        # So can a directed robot whose observation was taken once its queue ran dry: its
        # action index stands still while it waits, and the chunk loses nothing. (A
        # threshold client would count the wait into its round trip and ask earlier.)
        held_dry = _directed(s) & (s.obs_time_s >= s.deadline_s - 1e-9)
        waits_ok = np.full(s.num_robots, bool(streams.all())) | held_dry
        return np.where((share >= 1.0 - 1e-3) | ~waits_ok, 0.0, np.minimum(waits, _NEVER_S))

    def waits_dry(self, snapshot: Snapshot) -> np.ndarray:
        """Directed robots the fluid optimum serves less than in full, on a fleet over
        capacity: fluid-share keeps them waiting dry, so they should send once dry."""
        s = snapshot
        if not self._on("fluid-share") or not _directed(s).any() or surely_fits(s):
            return np.zeros(s.num_robots, dtype=bool)
        return _directed(s) & (fluid_mix(s).share < 1.0 - 1e-3)

    def _singles_by_horizon(self, s: Snapshot) -> bool:
        """Whether the fluid optimum serves one robot per batch, every robot weighs the
        same, the robots' chunks hold different seconds of motion, and every robot
        streams observations.

        Robots that ask only when about to run dry (threshold and directed clients)
        are all due whenever they ask, so serving the longest chunk first would be a
        strict priority by horizon: on ``l40s-pi05-one-fast-6-w1`` with threshold
        requests the horizon-6 robot starved 99% (docs/scheduling.md).
        """
        chunk_s = s.chunk_seconds()
        return (
            int(self._fluid_optimum(s)[1].max()) == 1
            and float(s.weight.max()) == float(s.weight.min())
            and float(chunk_s.max()) > float(chunk_s.min())
            and self._all_streaming(s)
        )

    def _longest_chunk_due(self, s: Snapshot, batch: Batch) -> Batch:
        """Over capacity, one robot per batch: among eligible robots whose single must
        start now to land before their queues run dry, the one whose chunk holds the
        most seconds of motion (the earliest due first among equals); ``batch`` if none.

        The rule serves the earliest due, which over capacity is the robot that has
        been dry longest, so every robot ends up waiting dry and each class starves
        alike. Served on time, a robot with a long chunk buys its whole horizon
        without starving; robots with short chunks turn GPU time into motion least
        well and take the shortage, as in the fluid optimum.
        """
        rows = np.flatnonzero(s.eligible)
        due_s = s.deadline_s[rows] - s.downlink_s[rows]
        late = due_s - s.latency_s(1) <= s.now_s
        if not late.any():
            return batch
        rows, due_s = rows[late], due_s[late]
        order = np.lexsort((s.contact_order[rows], due_s, -s.chunk_seconds()[rows]))
        return Batch((int(s.robot_id[rows[order[0]]]),), rule="longest-chunk-due")

    def _streams_every_tick(self, s: Snapshot) -> bool:
        """Whether the fleet is small enough to roll out and every robot's held
        observation is at most a tick and a link old (it sends one every tick)."""
        return s.num_robots <= self.rollout_max_robots and self._all_streaming(s)

    def _all_streaming(self, s: Snapshot) -> bool:
        """Whether every robot of ``s`` streams observations (:meth:`_streaming`)."""
        return bool(self._streaming(s, np.arange(s.num_robots)).all())

    def _streaming(self, s: Snapshot, rows: np.ndarray) -> np.ndarray:
        """Per robot of ``rows``: its held observation is at most a tick and a link (and
        the jitter margin) old, as it is for a robot that sends one every tick."""
        age_s = s.now_s - s.obs_time_s[rows]
        return age_s <= 1.0 / s.control_hz[rows] + s.downlink_s[rows] + self.margin_s

    def _overloaded(self, s: Snapshot, sizes_used: np.ndarray) -> Batch:
        """The batch, of a size the fluid optimum uses, that buys the most weighted
        actions per second of forward pass."""
        rows, worth = worth_order(s, np.flatnonzero(s.eligible))
        if sizes_used.max() == 1 and self._on("empty-queue-wait"):
            wait_until_s = self._empty_queue_wait(s, rows, worth)
            if wait_until_s is not None:
                return Batch((), wait_until_s=wait_until_s, rule="empty-queue-wait")
        sizes = sizes_used[sizes_used <= rows.size]
        if sizes.size == 0:
            sizes = np.array([rows.size])
        rate = np.cumsum(worth)[sizes - 1] / s.latency_table_s[sizes]
        size = int(sizes[int(np.argmax(np.round(rate, 9)))])
        return Batch(tuple(s.robot_id[rows[:size]].tolist()), rule="overload")

    def _empty_queue_wait(self, s: Snapshot, rows: np.ndarray, worth: np.ndarray) -> float | None:
        """With one robot per batch: when to wait for a robot's next observation, the
        one taken as its queue runs dry, or None to serve now.

        A robot that streams observations (its held one is at most a tick and a link
        old) and whose queue runs dry within the next tick sends, on its last
        action's tick, an observation whose chunk overlaps nothing: a full chunk
        instead of one less what runs meanwhile. It arrives about a link after the
        deadline (the mirror knows the downlink; the uplink is taken as equal).
        Waiting for it is worth it when the full chunk buys more weighted actions
        per second of forward pass plus idle wait than the best chunk now does. The
        wake-up allows ``margin_s`` for jitter; the observation's arrival asks the
        scheduler again anyway.
        """
        now = s.now_s
        tick_s = 1.0 / s.control_hz[rows]
        deadline_s = s.deadline_s[rows]
        obs_s = s.obs_time_s[rows]
        link_s = s.downlink_s[rows]
        arrival_s = deadline_s + link_s
        pending = (
            self._streaming(s, rows)
            & (obs_s < deadline_s)
            & (arrival_s > now)
            & (arrival_s - now <= tick_s)
        )
        if not pending.any():
            return None
        latency_s = float(s.latency_table_s[1])
        full = s.weight[rows] * s.max_execution_horizon[rows]
        rate_waiting = np.where(pending, full / (latency_s + arrival_s - now), 0.0)
        best = int(np.argmax(rate_waiting))
        if rate_waiting[best] <= float(worth.max()) / latency_s:
            return None
        return float(arrival_s[best]) + self.margin_s

    def _fluid_optimum(self, s: Snapshot) -> tuple[bool, np.ndarray]:
        """Whether the fleet's fluid optimum serves every robot in full, and the batch
        sizes it uses (every candidate size if it uses none)."""
        if surely_fits(s):
            return True, candidate_sizes(s.max_batch_size)
        mix = fluid_mix(s)
        sizes = mix.sizes if mix.sizes.size else candidate_sizes(s.max_batch_size)
        return mix.fits, sizes
