"""Discrete-event fleet simulator in virtual time.

Robots tick at their rates and send observations over links with sampled
delays; the server keeps the newest observation of each robot in a
:class:`~armory.engine.queue_mirror.QueueMirror` and, whenever its single GPU is
free, decides the next batch through the real-time server's own
:class:`~armory.engine.decision_step.DecisionStep` (snapshot, scheduler, check,
dispatch with the landing estimate of the learned profile). The batch runs for
the latency the fleet's profile gives (with optional jitter); each chunk then
travels back and lands on its robot.

Deterministic per seed: one PCG64 generator draws every delay in event order,
and ties in the event heap are broken by insertion order.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from armory.core.latency_profile import LatencyProfile
from armory.engine.decision_step import DecisionStep
from armory.engine.queue_mirror import NO_CHUNK, QueueMirror, QueueReport, RobotLimits
from armory.engine.session import directed_defer_s, directed_lead_s, directed_send_index
from armory.fleet_spec import (
    STREAMING_MODES,
    DelaySpec,
    FleetSpec,
    RequestMode,
    RobotGroup,
    RobotSpec,
)
from armory.report import SimReport, startup_s
from armory.scheduling.base import Scheduler
from armory.scheduling.rule_changes import RuleChanges
from armory.sim.metrics import build_report
from armory.sim.robot import SimRobot


class _Event(IntEnum):
    # At equal times, lower values run first.
    LAND = 0
    TICK = 1
    OBS_ARRIVE = 2
    BATCH_DONE = 3
    WAKE = 4
    DEFER = 5
    DEFERRED = 6


@dataclass(frozen=True)
class SimConfig:
    """How long to run and with which seed."""

    duration_s: float = 60.0
    seed: int = 0
    check_invariants: bool = True
    """Assert every batch's invariants (cheap; off only for profiling)."""
    charge_decision_time: bool = False
    """Start each batch only after the scheduler's measured wall-clock decision time, as
    a server deciding from an idle GPU does (results then vary from run to run)."""
    explain: bool = False
    """Also count what each rule of the scheduler changed against its base rule alone
    (:mod:`armory.scheduling.rule_changes`; doubles the scheduler's work, not its timing)."""
    server_latency_profile: str | None = None
    """The profile the server starts from and learns (a preset name or a profile file),
    where it is not the fleet's own GPU: a server seeded for another GPU, as
    ``armory serve --server.latency-profile`` seeds it (None: the fleet's profile)."""


class Simulator:
    """Runs one fleet against one scheduler; :meth:`run` returns the report."""

    def __init__(self, fleet: FleetSpec, scheduler: Scheduler, config: SimConfig) -> None:
        self.fleet = fleet
        self.scheduler = scheduler
        self.config = config
        self._rng = np.random.Generator(np.random.PCG64(config.seed))
        specs = fleet.robot_specs()
        phases = self._rng.uniform(0.0, 1.0, size=len(specs))
        self.robots = []
        for spec, p in zip(specs, phases, strict=True):
            phase_s = float(p) / spec.control_hz
            end_s = phase_s + startup_s(fleet, spec)
            self.robots.append(SimRobot(spec, phase_s=phase_s, startup_end_s=end_s))
        self._true_profile = fleet.profile()
        seed_profile = (
            fleet.profile()
            if config.server_latency_profile is None
            else LatencyProfile.from_preset(config.server_latency_profile)
        )
        self.step = DecisionStep(
            QueueMirror(capacity=len(specs)),
            scheduler,
            seed_profile,
            max_batch_size=fleet.max_batch_size,
            check_invariants=config.check_invariants,
            isolate_faults=False,  # a scheduler that fails here is a bug to see
            explain=config.explain,
        )
        """The server's decision, as the real-time batch loop takes it."""
        self.mirror = self.step.mirror
        self.server_profile = self.step.profile
        self._limits = [declared_limits(spec, fleet.request_mode) for spec in specs]
        for i, limits in enumerate(self._limits):
            self.mirror.add(i, limits, now_s=0.0)
        self._held_obs_time_s = [0.0] * len(specs)
        self._arrivals = [0] * len(specs)
        """Observations of each robot that reached the server (a deferral names its own)."""
        self._deferred_chunk_start = [NO_CHUNK] * len(specs)
        """Directed: the chunk during which the robot's observation was last deferred."""
        self.num_deferred = 0
        """Directed observations answered "deferred" as their robots ran dry."""
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._gpu_busy = False
        self._wake_pending_s: float | None = None
        self.batch_sizes: list[int] = []
        self.gpu_busy_s = 0.0

    @property
    def num_decisions(self) -> int:
        return self.step.counters.num_decisions

    @property
    def decision_s(self) -> float:
        return self.step.counters.decision_s

    @property
    def decision_cpu_s(self) -> float:
        """Processor time of the decisions: unlike wall time, not inflated by other
        processes on a shared machine."""
        return self.step.counters.decision_cpu_s

    @property
    def decisions_by_rule(self) -> Counter[str]:
        return self.step.counters.decisions_by_rule

    @property
    def rule_changes(self) -> dict[str, RuleChanges]:
        """What each rule changed (empty unless the config explains)."""
        return self.step.counters.rule_changes

    # ---- event plumbing ------------------------------------------------

    def _push(self, t_s: float, kind: _Event, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t_s, kind, self._seq, payload))

    def _delay_s(self, spec: DelaySpec) -> float:
        if spec.jitter_s == 0.0:
            return spec.median_s
        return spec.median_s + spec.jitter_s * (2.0 * self._rng.random() - 1.0)

    # ---- run -----------------------------------------------------------

    def run(self) -> SimReport:
        for i, robot in enumerate(self.robots):
            self._push(robot.tick_time_s(0), _Event.TICK, i)
        end_s = self.config.duration_s
        handlers = {
            _Event.LAND: self._on_land,
            _Event.TICK: self._on_tick,
            _Event.OBS_ARRIVE: self._on_obs_arrive,
            _Event.BATCH_DONE: self._on_batch_done,
            _Event.WAKE: self._on_wake,
            _Event.DEFER: self._on_defer,
            _Event.DEFERRED: self._on_deferred,
        }
        heap = self._heap
        while heap and heap[0][0] <= end_s:
            t_s, kind, _, payload = heapq.heappop(heap)
            handlers[kind](t_s, payload)
        for robot in self.robots:
            robot.advance_to(end_s)
        return build_report(self, end_s)

    # ---- robots --------------------------------------------------------

    def _on_tick(self, t_s: float, i: int) -> None:
        """A robot's tick on which it sends an observation (chunk-fraction: may send; a
        chunk that landed since the tick was set can have refilled its queue)."""
        robot = self.robots[i]
        robot.advance_to(t_s)
        mode = self.fleet.request_mode
        if mode == "chunk-fraction":
            fraction = self.fleet.chunk_size_threshold
            if robot.wants_to_send_chunk_fraction(fraction):
                self._send_observation(t_s, i)
            n = robot.next_chunk_fraction_send_tick(fraction)
            self._push(robot.tick_time_s(n), _Event.TICK, i)
            return
        self._send_observation(t_s, i)
        if mode == "every-tick":
            self._push(robot.tick_time_s(robot.last_tick + 1), _Event.TICK, i)

    def _send_observation(self, t_s: float, i: int) -> None:
        robot = self.robots[i]
        robot.requests_sent += 1
        robot.request_in_flight = True
        arrive_s = t_s + self._delay_s(robot.spec.uplink)
        self._push(arrive_s, _Event.OBS_ARRIVE, (i, robot.report(), t_s))

    def _on_land(self, t_s: float, payload: tuple[int, int, float, int | None]) -> None:
        i, start, obs_time_s, send_index = payload
        robot = self.robots[i]
        robot.apply_chunk(t_s, start, obs_time_s)
        mode = self.fleet.request_mode
        if mode in STREAMING_MODES:
            return
        # One request is in flight at a time: this chunk answers it.
        robot.request_in_flight = False
        robot.record_round_trip(t_s - obs_time_s)
        if mode == "threshold":
            n = robot.next_threshold_send_tick(self.fleet.threshold_margin_s)
        else:
            n = robot.next_directed_send_tick(send_index)
        self._push(robot.tick_time_s(n), _Event.TICK, i)

    # ---- server --------------------------------------------------------

    def _on_obs_arrive(self, t_s: float, payload: tuple[int, QueueReport, float]) -> None:
        i, report, taken_s = payload
        self._arrivals[i] += 1
        if self.mirror.observe(i, report, t_s):
            self._held_obs_time_s[i] = taken_s
            if self._limits[i].directed:
                self._defer_when_dry(t_s, i, report)
        self._try_schedule(t_s)

    def _defer_when_dry(self, t_s: float, i: int, report: QueueReport) -> None:
        """A directed robot's observation just held: deferred when the robot runs dry, if
        no batch takes it before (:func:`~armory.engine.session.directed_defer_s`)."""
        defer_s = directed_defer_s(
            self._limits[i],
            report,
            dry_s=self.mirror.deadline_of(i),
            received_s=t_s,
            deferred_chunk_start=self._deferred_chunk_start[i],
        )
        if defer_s is not None:
            self._push(defer_s, _Event.DEFER, (i, self._arrivals[i], report.chunk_start))

    def _on_defer(self, t_s: float, payload: tuple[int, int, int]) -> None:
        """A directed robot ran dry: its observation, if no batch took it and no newer one
        came, is answered "deferred" (as the server's engine does)."""
        i, arrival, chunk_start = payload
        if self._arrivals[i] != arrival or not self.mirror.is_eligible(i):
            return
        self.mirror.release(i)
        self._deferred_chunk_start[i] = chunk_start
        self.num_deferred += 1
        self._push(t_s + self._delay_s(self.robots[i].spec.downlink), _Event.DEFERRED, i)

    def _on_deferred(self, t_s: float, i: int) -> None:
        """The robot hears its observation was deferred: it sends a fresh one at once."""
        self.robots[i].advance_to(t_s)
        self._send_observation(t_s, i)

    def _on_wake(self, t_s: float, _: object) -> None:
        if self._wake_pending_s == t_s:
            self._wake_pending_s = None
        self._try_schedule(t_s)

    def _try_schedule(self, now_s: float) -> None:
        if self._gpu_busy:
            return
        decision = self.step.decide(now_s)
        if decision is None:
            return
        batch = decision.batch
        if not batch.robot_ids:
            wake = batch.wait_until_s
            if wake is not None and wake > now_s and self._wake_pending_s != wake:
                self._wake_pending_s = wake
                self._push(wake, _Event.WAKE, None)
            return
        size = len(batch.robot_ids)
        jitter = self.fleet.latency_jitter
        latency_s = self._true_profile.latency_s(size)
        if jitter:
            latency_s *= 1.0 + jitter * (2.0 * self._rng.random() - 1.0)
        # The forward pass starts once the decision is made (when charged).
        start_s = now_s + (decision.decision_s if self.config.charge_decision_time else 0.0)
        chunks = [
            (d.robot_id, d.chunk_start, self._held_obs_time_s[d.robot_id])
            for d in self.step.dispatch(batch, start_s)
        ]
        self._gpu_busy = True
        self.batch_sizes.append(size)
        self.gpu_busy_s += max(0.0, min(latency_s, self.config.duration_s - start_s))
        self._push(start_s + latency_s, _Event.BATCH_DONE, (batch, latency_s, chunks))

    def _on_batch_done(self, t_s: float, payload: tuple) -> None:
        batch, latency_s, chunks = payload
        self._gpu_busy = False
        self.step.batch_done(batch, latency_s)
        held_shares = self._held_shares(t_s)
        for i, start, obs_time_s in chunks:
            robot = self.robots[i]
            land_s = t_s + self._delay_s(robot.spec.downlink)
            send_index = None
            if self.fleet.request_mode == "directed":
                # A robot the scheduler keeps waiting dry holds fewer actions, or none.
                lead_s = self._directed_lead_s(i, held_shares.get(i, 1.0))
                send_index = directed_send_index(start, self._limits[i], lead_s)
            self._push(land_s, _Event.LAND, (i, start, obs_time_s, send_index))
        self._try_schedule(t_s)

    def _held_shares(self, now_s: float) -> dict[int, float]:
        """Directed robots the scheduler will keep waiting dry, with the share of their
        ticks it means to serve them (none in other modes)."""
        if self.fleet.request_mode != "directed":
            return {}
        return self.step.held_shares(now_s)

    def _directed_lead_s(self, i: int, held_share: float) -> float:
        return directed_lead_s(
            self._limits[i],
            self.server_profile,
            self.step.recent_batch_size,
            self.fleet.max_batch_size,
            self.fleet.threshold_margin_s,
            held_share=held_share,
        )


def declared_limits(spec: RobotSpec | RobotGroup, request_mode: RequestMode) -> RobotLimits:
    """What a simulated robot (``spec``, or any robot of a group) declares to the server:
    its rate, horizons, weight, its links' median delays and how it sends."""
    return RobotLimits(
        control_hz=spec.control_hz,
        min_execution_horizon=spec.min_execution_horizon,
        max_execution_horizon=spec.max_execution_horizon,
        weight=spec.weight,
        uplink_s=spec.uplink.median_s,
        downlink_s=spec.downlink.median_s,
        directed=request_mode == "directed",
        streams=request_mode in STREAMING_MODES,
    )


def simulate(fleet: FleetSpec, scheduler: Scheduler, config: SimConfig | None = None) -> SimReport:
    """Run ``fleet`` against ``scheduler`` and return the report."""
    return Simulator(fleet, scheduler, config or SimConfig()).run()
