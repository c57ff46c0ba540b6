"""Run a fleet file's robots as real clients over real sockets, in one asyncio process.

One `RobotRuntime` per robot of the fleet file, each with its own
`AsyncPolicyClient` connection (wrapped in a :class:`~armory.fleet.link.FleetClient`
that may inject the file's link delays), ticks at the robot's rate, sends
observations made from the server's declared inputs in the fleet's request mode
(every-tick, threshold or directed) and carries the robot's weight, rate and
horizons in its ``__armory__`` state. After the run every robot is measured from
its own ground truth (its runtime's counters, its executed actions), the server's
batch counts come from its ``/stats``, and :func:`~armory.report.make_report`
builds the same report ``armory simulate`` builds. The bound is computed for the
fleet as the server serves it (:func:`served_fleet`); a server that stops answering
during the run is :class:`ServerLost`, not a report of zeros.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from armory_client import (
    ArmoryClientError,
    AsyncPolicyClient,
    ConnectTimeout,
    HandshakeRejected,
    InferClient,
    RobotRuntime,
    RuntimeConfig,
    RuntimeSummary,
    SafetyConfig,
)
from armory_client.wire.placement import names_a_robot

from armory.core.latency_profile import LatencyProfile
from armory.fleet.link import FleetClient
from armory.fleet.observations import ObservationFactory
from armory.fleet.robot import SyntheticRobot
from armory.fleet.trace import FleetTrace
from armory.fleet_spec import REQUEST_MODES, FleetSpec, RobotSpec
from armory.placement.query import robot_demand
from armory.report import RobotTally, SimReport, make_report, startup_s
from armory.server_stats import StatsReading, read_stats

logger = logging.getLogger(__name__)

WrapClient = Callable[[RobotSpec, InferClient], InferClient]
"""Wraps one robot's client (tests use it to check every reply)."""

_HISTORY_LEN = 256
"""Tick and request records each runtime keeps (its summary counts the whole run)."""

PROGRESS_PERIOD_S = 1.0
"""Seconds between two calls of a run's ``on_progress``."""

PROFILE_TOLERANCE = 0.10
"""A server's latency at the max batch size that differs from the fleet file's by more than
this fraction replaces the fleet file's in the bound (with a warning)."""


class FleetError(Exception):
    """The fleet cannot run against this server; the message says why in one line."""


class ServerLost(FleetError):
    """The server stopped answering during the run; there is no report to trust."""


@dataclass(frozen=True)
class FleetProgress:
    """The run so far, given to ``on_progress`` about once a second."""

    elapsed_s: float
    """Seconds since the robots started."""
    num_chunks_applied: int
    """Chunks the robots have applied, all together."""
    num_request_errors: int
    """Requests that failed (a lost connection, a timeout, an error reply)."""
    starvation: float = 0.0
    """Starved ticks / counted ticks of all robots so far (their runtimes' counts)."""
    num_batches: int | None = None
    """Forward passes the server ran since the run started (None: it has no ``/stats``)."""

    def postfix(self) -> dict[str, str]:
        """The progress bar's fields after the elapsed seconds."""
        fields = {"starved": f"{100 * self.starvation:.1f}%"}
        if self.num_batches is not None:
            fields["batches"] = str(self.num_batches)
        fields["chunks"] = str(self.num_chunks_applied)
        fields["errors"] = str(self.num_request_errors)
        return fields


@dataclass(frozen=True)
class FleetOptions:
    """Where the server is and how to run the robots (checked on construction)."""

    # Server
    host: str = "127.0.0.1"
    """Host name or address of the policy server (or a ws:// URI, then ``port`` is ignored)."""
    port: int = 8000
    api_key: str | None = None
    """Sent as ``Authorization: Api-Key <key>``."""
    # Run
    duration_s: float = 20.0
    """Seconds each robot ticks."""
    request_mode: str | None = None
    """every-tick, threshold or directed; None: the fleet file's."""
    inject_delays: bool = True
    """Sleep the fleet file's uplink and downlink delays around each request."""
    seed: int = 0
    """Seeds start phases, injected delays and observation contents."""
    # Timeouts
    connect_timeout_s: float = 10.0
    """Seconds to reach the server (each robot's connection, and the first probe)."""
    request_timeout_s: float = 5.0
    """Seconds a robot waits for one reply before counting a request error."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError(f"--duration-s must be > 0, got {self.duration_s}")
        if self.request_mode is not None and self.request_mode not in REQUEST_MODES:
            raise ValueError(
                f"unknown request mode {self.request_mode!r}; valid: {', '.join(REQUEST_MODES)}"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {self.port}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if names_a_robot(self.host):
            raise ValueError(
                f"--host {self.host!r} names a robot; each robot of the fleet names itself"
            )
        for name in ("connect_timeout_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0")

    @property
    def server_uri(self) -> str:
        """The server's WebSocket URI, as the client builds it from ``host`` and ``port``."""
        is_uri = self.host.startswith(("ws://", "wss://"))
        return AsyncPolicyClient(self.host, None if is_uri else self.port).uri

    def client(self, robot: RobotSpec | None = None) -> AsyncPolicyClient:
        """A new (unconnected) client of the server. A ``robot``'s URI names it and says
        what it asks of a GPU, its smallest round trip included (``name_robot``), so that
        the front door of ``armory cluster`` places it by load and keeps it on its replica
        across reconnects; a server ignores the query."""
        client = AsyncPolicyClient(
            self.server_uri,
            None,
            api_key=self.api_key,
            connect_timeout_s=self.connect_timeout_s,
            request_timeout_s=self.request_timeout_s,
        )
        if robot is not None:
            try:
                asks = dataclasses.asdict(robot_demand(robot))
            except ValueError:  # beyond the wire's bounds: the server refuses it, by name
                asks = {}
            client.name_robot(robot.robot_id, **asks)
        return client


async def run_fleet(
    fleet: FleetSpec,
    options: FleetOptions,
    *,
    bound_of: Callable[[FleetSpec, int], float] | None = None,
    wrap_client: WrapClient | None = None,
    on_progress: Callable[[FleetProgress], None] | None = None,
    trace: FleetTrace | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SimReport:
    """Run every robot of ``fleet`` against the server for ``options.duration_s``.

    ``bound_of`` computes the report's starvation bound, of :func:`served_fleet` on as
    many GPUs as the server has (a cluster's front door: its replicas);
    ``on_progress`` is called every :data:`PROGRESS_PERIOD_S` during the run; ``trace``
    records the robots' queues and the server's batches for plots.
    Raises FleetError when the server cannot be reached, refuses the connection,
    or cannot serve the fleet's robots; ServerLost when it stops answering during
    the run.
    """
    mode = options.request_mode or fleet.request_mode
    specs = fleet.robot_specs()
    server_uri = options.server_uri
    # The probe connects as the fleet's first robot: a cluster's front door places that
    # robot, which connects next, rather than a robot that never comes back.
    metadata = await _probe(options.client(specs[0]))
    _check_server(fleet, metadata)
    try:
        factory = ObservationFactory(metadata.get("inputs") or {}, seed=options.seed)
    except ValueError as exc:
        raise FleetError(f"server at {server_uri}: {exc}") from exc
    rng = np.random.default_rng(options.seed)
    robots = [SyntheticRobot(factory, i, clock=clock) for i in range(len(specs))]
    runtimes = []
    for spec, robot in zip(specs, robots, strict=True):
        client: InferClient = FleetClient(
            options.client(spec),
            robot,
            uplink=spec.uplink if options.inject_delays else None,
            downlink=spec.downlink if options.inject_delays else None,
            rng=np.random.default_rng(rng.integers(2**63)),
        )
        if wrap_client is not None:
            client = wrap_client(spec, client)
        runtime = RobotRuntime(
            robot,
            client,
            RuntimeConfig(
                robot_id=spec.robot_id,
                control_hz=spec.control_hz,
                max_execution_horizon=spec.max_execution_horizon,
                min_execution_horizon=spec.min_execution_horizon,
                weight=spec.weight,
                request_mode=mode,
                threshold_margin_s=fleet.threshold_margin_s,
                chunk_size_threshold=fleet.chunk_size_threshold,
                duration_s=options.duration_s,
                history_len=_HISTORY_LEN,
                # Synthetic robots count what they execute: no held actions on dry ticks.
                safety=SafetyConfig(on_dry="nothing"),
            ),
            clock=clock,
        )
        robot.watch(runtime.queue)
        runtimes.append(runtime)
    phases = rng.uniform(size=len(specs))
    phases_s = [float(p) / s.control_hz for p, s in zip(phases, specs, strict=True)]

    before = await read_stats(server_uri, options.api_key)
    started_s = clock()
    summaries = await _run_all(
        runtimes,
        phases_s,
        uri=server_uri,
        on_progress=on_progress,
        clock=clock,
        read_counts=lambda: _counts_since(before, server_uri, options.api_key),
        trace=trace,
    )
    wall_s = clock() - started_s
    after = await read_stats(server_uri, options.api_key)
    if not await _still_serving(options.client(specs[0])):
        failed = sum(s.num_request_errors for s in summaries)
        raise ServerLost(
            f"the policy server at {server_uri} stopped answering during the run "
            f"({failed} requests failed); no report"
        )
    served = served_fleet(fleet, metadata, after or before)
    reading = after or before
    num_gpus = 1 if reading is None else reading.num_replicas  # a cluster: its replicas'

    tallies = [
        robot_tally(spec, summary, robot, startup_s=startup_s(fleet, spec))
        for spec, summary, robot in zip(specs, summaries, robots, strict=True)
    ]
    counts, busy_s = after.since(before) if after is not None else ({}, 0.0)
    return make_report(
        tallies,
        batch_size_counts=counts,
        gpu_busy_s=busy_s,
        duration_s=options.duration_s,
        scheduler=str((metadata.get("armory") or {}).get("scheduler", "unknown")),
        fleet=fleet.name,
        seed=options.seed,
        request_mode=mode,
        bound_starvation=None if bound_of is None else bound_of(served, num_gpus),
        timing=_timing(summaries, wall_s, after),
        clock="wall",
        decisions_by_rule={} if after is None else after.rules_since(before),
        rule_changes={} if after is None else after.rule_changes_since(before),
    )


async def _probe(client: AsyncPolicyClient) -> dict[str, Any]:
    """Connect once, read the metadata frame, close."""
    try:
        await client.connect()
        return client.metadata
    except ConnectTimeout as exc:
        raise FleetError(f"cannot reach the policy server: {exc}") from exc
    except HandshakeRejected as exc:
        raise FleetError(str(exc)) from exc
    except ArmoryClientError as exc:
        raise FleetError(f"server at {client.uri} misbehaved on connect: {exc}") from exc
    finally:
        await client.close()


def _check_server(fleet: FleetSpec, metadata: Mapping[str, Any]) -> None:
    """Refuse a fleet the server cannot serve; warn where it differs from the fleet file."""
    horizon = metadata.get("action_horizon")
    if not isinstance(horizon, int):
        raise FleetError("the server's metadata names no action_horizon: not an openpi server?")
    for group in fleet.robots:
        if group.max_execution_horizon > horizon:
            raise FleetError(
                f"robot group {group.name!r} plays {group.max_execution_horizon} actions per "
                f"chunk but the server's policy returns {horizon}"
            )
    if horizon != fleet.action_horizon:
        logger.warning(
            "the fleet file says action_horizon %d, the server's policy returns %d",
            fleet.action_horizon,
            horizon,
        )


def served_fleet(
    fleet: FleetSpec, metadata: Mapping[str, Any], stats: StatsReading | None
) -> FleetSpec:
    """The fleet file as the server serves it, for the bound: the server's max batch size
    (its metadata) and its learned latency profile (its ``/stats``) where they differ from
    the fleet file's, each difference warned about; what the server does not report stays
    the fleet file's. Called after the run, when the server has measured its passes."""
    changes: dict[str, Any] = {}
    max_batch = (metadata.get("armory") or {}).get("max_batch_size")
    if isinstance(max_batch, int) and max_batch >= 1 and max_batch != fleet.max_batch_size:
        logger.warning(
            "the fleet file says max_batch_size %d, the server batches up to %d; "
            "the bound uses the server's",
            fleet.max_batch_size,
            max_batch,
        )
        changes["max_batch_size"] = max_batch
    points = stats.latency_points_s if stats is not None else {}
    if points:
        size = changes.get("max_batch_size", fleet.max_batch_size)
        file_s = fleet.profile().latency_s(size)
        server_s = LatencyProfile(points).latency_s(size)
        if abs(server_s - file_s) > PROFILE_TOLERANCE * file_s:
            logger.warning(
                "the fleet file's latency profile takes %.0f ms for a batch of %d, the "
                "server's passes %.0f ms; the bound uses the server's",
                1e3 * file_s,
                size,
                1e3 * server_s,
            )
            changes["latency_points"] = points
    return dataclasses.replace(fleet, **changes) if changes else fleet


async def _still_serving(client: AsyncPolicyClient) -> bool:
    """Whether the server still accepts ``client``'s connection (asked after the run)."""
    try:
        await client.connect()
        return True
    except ArmoryClientError:
        return False
    finally:
        await client.close()


async def _run_all(
    runtimes: Sequence[RobotRuntime],
    phases_s: Sequence[float],
    *,
    uri: str,
    on_progress: Callable[[FleetProgress], None] | None,
    clock: Callable[[], float],
    read_counts: Callable[[], Awaitable[dict[int, int] | None]],
    trace: FleetTrace | None,
) -> list[RuntimeSummary]:
    """Run every runtime, each from its start phase; the first failure stops them all."""

    async def one(runtime: RobotRuntime, phase_s: float) -> RuntimeSummary:
        await asyncio.sleep(phase_s)
        return await runtime.run()

    async def report_progress(started_s: float) -> None:
        assert on_progress is not None
        while True:
            await asyncio.sleep(PROGRESS_PERIOD_S)
            summaries = [runtime.summary() for runtime in runtimes]
            counts = await read_counts()
            counted = sum(s.num_counted_ticks for s in summaries)
            on_progress(
                FleetProgress(
                    elapsed_s=clock() - started_s,
                    num_chunks_applied=sum(s.num_chunks_applied for s in summaries),
                    num_request_errors=sum(s.num_request_errors for s in summaries),
                    starvation=sum(s.num_starved_ticks for s in summaries) / max(counted, 1),
                    num_batches=None if counts is None else sum(counts.values()),
                )
            )

    tasks = [asyncio.ensure_future(one(r, p)) for r, p in zip(runtimes, phases_s, strict=True)]
    watchers = []
    if on_progress is not None:
        watchers.append(asyncio.ensure_future(report_progress(clock())))
    if trace is not None:
        watchers.append(asyncio.ensure_future(trace.record(runtimes, clock, read_counts)))
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for watcher in watchers:
            watcher.cancel()
        for runtime in runtimes:
            runtime.stop()
        await asyncio.wait(tasks)
    for runtime, task in zip(runtimes, tasks, strict=True):
        exc = task.exception()
        if isinstance(exc, HandshakeRejected):
            raise FleetError(str(exc)) from exc
        if exc is not None:
            raise FleetError(
                f"robot {runtime.config.robot_id!r} stopped: {type(exc).__name__}: {exc}"
            ) from exc
    return [task.result() for task in tasks]


async def _counts_since(
    before: StatsReading | None, uri: str, api_key: str | None
) -> dict[int, int] | None:
    """The server's forward passes per size since ``before`` (None without ``/stats``)."""
    now = await read_stats(uri, api_key)
    if now is None:
        return None
    counts, _ = now.since(before)
    return counts


def robot_tally(
    spec: RobotSpec, summary: RuntimeSummary, robot: SyntheticRobot, *, startup_s: float
) -> RobotTally:
    """One robot's counts: its runtime's for ticks, chunks and bytes, its own for ages.

    The runtime counts ticks from the first chunk on; the ticks it waited for that
    chunk past ``startup_s`` after its first tick count as starved, as in the
    simulator (:func:`armory.report.startup_s`).
    """
    counted, starved = summary.num_counted_ticks, summary.num_starved_ticks
    if summary.num_chunks_applied:
        waited = summary.num_ticks - counted
        late = max(0, waited - (math.floor(startup_s * spec.control_hz) + 1))
        counted += late
        starved += late
    return RobotTally.for_robot(
        spec,
        counted_ticks=counted,
        starved_ticks=starved,
        executed=summary.num_executed,
        age_sum_s=robot.age_sum_s,
        chunks_applied=summary.num_chunks_applied,
        requests_sent=summary.num_requests,
        bytes_sent=summary.bytes_sent,
    )


def _timing(
    summaries: Sequence[RuntimeSummary], wall_s: float, stats: StatsReading | None
) -> dict[str, float]:
    """Wall-clock measurements of the run: robots' round trips and lapses, server costs."""
    trips = [s.mean_round_trip_s for s in summaries if s.mean_round_trip_s is not None]
    timing = {
        "wall_s": wall_s,
        "num_request_errors": float(sum(s.num_request_errors for s in summaries)),
        "num_missed_ticks": float(sum(s.num_missed_ticks for s in summaries)),
    }
    if trips:
        timing["mean_round_trip_ms"] = 1e3 * float(np.mean(trips))
    if stats is not None:
        timing["server_decision_ms_mean"] = stats.decision_ms_mean
        if stats.decision_cpu_ms_mean is not None:
            timing["server_decision_cpu_ms_mean"] = stats.decision_cpu_ms_mean
        if stats.overhead_ms_p50 is not None and stats.overhead_ms_p99 is not None:
            timing["server_overhead_ms_p50"] = float(stats.overhead_ms_p50)
            timing["server_overhead_ms_p99"] = float(stats.overhead_ms_p99)
        if stats.steps_ms_p50 is not None and stats.steps_ms_p99 is not None:
            timing["server_steps_ms_p50"] = float(stats.steps_ms_p50)
            timing["server_steps_ms_p99"] = float(stats.steps_ms_p99)
    return timing
