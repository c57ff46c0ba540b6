"""The ``armory`` command line: one frozen dataclass per subcommand, parsed by tyro.

A new subcommand is a dataclass with a ``run()``
method returning the exit status, added to :data:`Command`. Mistakes in what the
user asked for (a bad fleet file, an unknown scheduler) end in one line on
stderr and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import tyro
import yaml
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from armory.cli_text import tyro_text
from armory.core.errors import PolicyError
from armory.core.latency_profile import check_profile_name
from armory.core.stop_signals import wait_for_stop
from armory.engine.config import ServerConfig
from armory.eval.command import Eval, EvalError
from armory.fleet_spec import RequestMode
from armory.observe.logs import LogFormat, configure_logging
from armory.placement.registry import check_placement_name, placement_names
from armory.policies.config import PolicyConfig, for_server, make_policy
from armory.policies.mock import MockPolicyConfig
from armory.report import SimReport
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler, rule_descriptions, scheduler_names
from armory.sim import sweep
from armory.sim.bound import fleet_bound
from armory.sim.fleet_family import write_family
from armory.sim.fleet_notes import fleet_notes, short_window_notes
from armory.sim.multi_gpu import simulate_gpus
from armory.sim.simulator import SimConfig, simulate
from armory.sim.table import format_gpus, format_report, format_rules, format_sweep
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.lerobot_grpc import LeRobotDoorConfig
from armory.transports.tickets import TicketGate
from armory.workers.errors import WorkerBatchError

if TYPE_CHECKING:
    from armory.serve import ArmoryServer

USAGE_ERROR = 2
RUN_FAILED = 1
"""Exit status of a run that started but could not finish (the server died mid-run)."""
_SCHEDULERS = ", ".join(scheduler_names())
"""The valid scheduler names, as help text lists them."""
_PLACEMENTS = ", ".join(placement_names())
"""The valid placement names, as help text lists them."""


class UsageError(Exception):
    """What the user asked for cannot be done; the message says why in one line."""


@contextmanager
def _usage_errors() -> Iterator[None]:
    """Turn the errors of reading inputs and checking options into :class:`UsageError`."""
    try:
        yield
    except (ValueError, OSError, yaml.YAMLError) as exc:
        raise UsageError(" ".join(str(exc).split())) from exc


def _check_seed(seed: int) -> None:
    """Refuse a negative --seed (random generators take none) before anything runs."""
    if seed < 0:
        raise ValueError(f"--seed must be >= 0, got {seed}")


def _print_notes(notes: list[str]) -> None:
    """Print what the fleet file itself sets against any scheduler
    (:mod:`armory.sim.fleet_notes`)."""
    for note in notes:
        print(f"\nnote: {note}")


def _print_report(
    report: SimReport,
    max_robot_rows: int,
    json_path: Path | None,
    extra: dict[str, object] | None = None,
) -> None:
    """Print a run's tables; also write its JSON report (with ``extra`` keys) if asked
    (simulate and fleet)."""
    print(format_report(report, max_robot_rows=max_robot_rows))
    if json_path is not None:
        with _usage_errors():
            json_path.parent.mkdir(parents=True, exist_ok=True)
            data = dataclasses.asdict(report) | (extra or {})
            json_path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"\nwrote {json_path}")


@dataclass(frozen=True)
class SchedulerOptions:
    """Scheduler options beyond name and seed (see ``armory.scheduling.config``)."""

    lookahead_horizon_s: float = SchedulerConfig.lookahead_horizon_s
    """lookahead-actions: seconds of fleet motion each candidate is scored over."""
    lookahead_depth: int = SchedulerConfig.lookahead_depth
    """lookahead-actions: batches planned ahead (1 = score the next batch only)."""
    lookahead_node_budget: int = SchedulerConfig.lookahead_node_budget
    """lookahead-actions: most candidate plans scored per decision."""
    disabled_rules: tuple[str, ...] = SchedulerConfig.disabled_rules
    """just-in-time: rules turned off, to measure what each earns (see --explain)."""

    def config(self, name: str, seed: int) -> SchedulerConfig:
        return SchedulerConfig(name=name, seed=seed, **dataclasses.asdict(self))


SchedulerOptionsArg = Annotated[
    SchedulerOptions, tyro.conf.OmitArgPrefixes, tyro.conf.arg(name="scheduler")
]
"""Scheduler options as flags without a prefix, in a help panel titled "scheduler"."""


@dataclass(frozen=True)
class Simulate:
    """Run one fleet against one scheduler in virtual time; print per-robot and fleet metrics."""

    fleet: Path
    """Fleet file (.yaml, .yml or .json); see docs/fleet-file.md."""
    scheduler: Annotated[str, tyro.conf.arg(help=f"Scheduler: {_SCHEDULERS}.")] = (
        SchedulerConfig.name
    )
    duration_s: Annotated[float, tyro.conf.arg(aliases=("--duration",))] = 60.0
    """Seconds of virtual time."""
    seed: int = 0
    """Seeds the network delays, start phases and the scheduler (if it draws numbers)."""
    json_path: Annotated[Path | None, tyro.conf.arg(name="json", metavar="PATH")] = None
    """Also write the full report here as JSON."""
    bound: bool = True
    """Compute the starvation bound (a linear program; slow for thousands of robots)."""
    charge_decision_time: bool = False
    """Start each batch only after the scheduler's measured decision time, as a server
    deciding from an idle GPU does (results then vary slightly from run to run)."""
    max_robot_rows: int = 40
    """Print at most this many robots (the JSON report holds all)."""
    explain: bool = False
    """Also print how often each of the scheduler's rules decided, what each does, and what
    each changed against the base rule alone on the same snapshots (the base rule is then
    asked on every snapshot too: twice the scheduler's work)."""
    gpus: int = 1
    """GPUs, each its own server (mirror, scheduler, decision step); robots are placed
    across them by --placement (docs/scale-out.md)."""
    placement: Annotated[str, tyro.conf.arg(help=f"With --gpus > 1: {_PLACEMENTS}.")] = "fluid"
    server_latency_profile: str | None = None
    """The latency profile the server starts from and learns (a preset or a profile file),
    where it is not the fleet's GPU: a server seeded for another GPU. Default: the
    fleet's own profile."""
    scheduler_options: SchedulerOptionsArg = SchedulerOptions()

    def run(self) -> int:
        with _usage_errors():
            if not self.duration_s > 0:
                raise ValueError(f"--duration-s must be > 0, got {self.duration_s}")
            if self.gpus < 1:
                raise ValueError(f"--gpus must be >= 1, got {self.gpus}")
            check_placement_name(self.placement)
            _check_seed(self.seed)
            if self.server_latency_profile is not None:
                check_profile_name(self.server_latency_profile)
            scheduler_config = self.scheduler_options.config(self.scheduler, self.seed)
            scheduler = make_scheduler(scheduler_config)
            fleet = sweep.read_fleet(self.fleet)
        config = SimConfig(
            duration_s=self.duration_s,
            seed=self.seed,
            charge_decision_time=self.charge_decision_time,
            explain=self.explain,
            server_latency_profile=self.server_latency_profile,
        )
        if self.gpus > 1:
            with _usage_errors():
                multi = simulate_gpus(
                    fleet, scheduler_config, config, num_gpus=self.gpus, placement=self.placement
                )
            if self.bound:
                bound = fleet_bound(fleet, num_gpus=self.gpus)
                system = dataclasses.replace(multi.report.system, bound_starvation=bound)
                multi = dataclasses.replace(
                    multi, report=dataclasses.replace(multi.report, system=system)
                )
            extra = {"placement": multi.placement, "num_moved": multi.num_moved}
            extra["gpus"] = [dataclasses.asdict(g) for g in multi.gpus]
            _print_report(multi.report, self.max_robot_rows, self.json_path, extra)
            _print_notes(fleet_notes(fleet))
            print("\n" + format_gpus(multi))
            if self.explain:
                print("\n" + format_rules(multi.report, rule_descriptions(multi.report.scheduler)))
            return 0
        report = simulate(fleet, scheduler, config)
        if self.bound:
            system = dataclasses.replace(report.system, bound_starvation=fleet_bound(fleet))
            report = dataclasses.replace(report, system=system)
        _print_report(report, self.max_robot_rows, self.json_path)
        _print_notes(fleet_notes(fleet))
        if self.explain:
            print("\n" + format_rules(report, rule_descriptions(report.scheduler)))
        return 0


@dataclass(frozen=True)
class Sweep:
    """Run fleets x schedulers x seeds; write results.csv, results.json and one plot per family."""

    fleets: tuple[Path, ...]
    """Fleet files, or directories whose .yaml/.yml/.json files are all fleets."""
    schedulers: Annotated[
        tuple[str, ...],
        tyro.conf.arg(help=f"Schedulers, each once: {_SCHEDULERS}."),
    ]
    out_dir: Annotated[Path, tyro.conf.arg(name="out")]
    """Directory for results.csv, results.json and <family>.png."""
    num_seeds: Annotated[int, tyro.conf.arg(name="seeds")] = 1
    """Seeds 0 .. N-1 per fleet and scheduler."""
    duration_s: Annotated[float, tyro.conf.arg(aliases=("--duration",))] = 60.0
    """Seconds of virtual time per run."""
    workers: int = 1
    """Worker processes (results do not depend on it)."""
    bound: bool = True
    """Compute each fleet's starvation bound."""
    scheduler_options: SchedulerOptionsArg = SchedulerOptions()

    def run(self) -> int:
        with _usage_errors():
            if not self.duration_s > 0:
                raise ValueError(f"--duration-s must be > 0, got {self.duration_s}")
            if self.num_seeds < 1:
                raise ValueError(f"--seeds must be >= 1, got {self.num_seeds}")
            if not self.fleets or not self.schedulers:
                raise ValueError("--fleets and --schedulers each need at least one value")
            if self.workers < 1:
                raise ValueError(f"--workers must be >= 1, got {self.workers}")
            names = dict.fromkeys(self.schedulers)  # a repeat would read as more seeds
            configs = [self.scheduler_options.config(name, 0) for name in names]
            for config in configs:
                make_scheduler(config)
            fleets = sweep.load_fleets(self.fleets)
            self.out_dir.mkdir(parents=True, exist_ok=True)
        total = len(fleets) * len(configs) * self.num_seeds
        with tqdm(total=total, desc="sweep", unit="run", file=sys.stderr) as bar:
            runs = sweep.run_grid(
                fleets,
                configs,
                range(self.num_seeds),
                duration_s=self.duration_s,
                workers=self.workers,
                with_bound=self.bound,
                on_run=lambda _: bar.update(),
            )
        paths = sweep.write_outputs(runs, self.out_dir)
        print(format_sweep(sweep.aggregate(runs)))
        print()
        for path in paths:
            print(f"wrote {path}")
        return 0


API_KEY_ENV = "ARMORY_API_KEY"


@dataclass(frozen=True)
class Serve:
    """Serve a policy to many robots through three doors (openpi WebSocket, GR00T ZeroMQ,
    LeRobot gRPC), batching robots of every door together, scheduled."""

    host: str = "127.0.0.1"
    """Address to bind; 127.0.0.1 unless robots connect from other machines."""
    port: int | None = 8000
    """Port of the openpi WebSocket door (and of GET /healthz); 0 picks a free one, None
    keeps that door closed."""
    api_key: str | None = None
    """Require 'Authorization: Api-Key <key>' on the openpi door, as gRPC metadata on the
    LeRobot door outside --lerobot.allowed-networks, and as the GR00T door's api_token unless
    --groot.api-token is set (default: $ARMORY_API_KEY if set)."""
    seed: int = 0
    """Seeds schedulers that draw random numbers."""
    log_level: str = "INFO"
    """Logging level of the server (DEBUG, INFO, WARNING, ERROR)."""
    log_format: LogFormat = "text"
    """Log lines as text, or as one JSON object per line (for log collectors)."""
    log_decisions: bool = False
    """Also log one line per batch: its robots, the scheduler rule that chose them, its size,
    predicted and actual forward-pass time."""
    server: ServerConfig = dataclasses.field(default_factory=ServerConfig)
    groot: GrootDoorConfig = dataclasses.field(default_factory=GrootDoorConfig)
    """The GR00T ZeroMQ door: --groot.port 5555 opens it (--groot.n15-port a second one
    for N1.5 robots)."""
    lerobot: LeRobotDoorConfig = dataclasses.field(default_factory=LeRobotDoorConfig)
    """The LeRobot async-inference gRPC door: --lerobot.port 8080 opens it."""
    scheduler_options: SchedulerOptionsArg = SchedulerOptions()
    policy: PolicyConfig = dataclasses.field(default_factory=MockPolicyConfig)

    def run(self) -> int:
        with _usage_errors():
            level = logging.getLevelName(self.log_level.upper())
            if not isinstance(level, int):
                raise ValueError(f"--log-level {self.log_level!r} is not a logging level")
            server = self.make_server()
        configure_logging(level, log_format=self.log_format, log_decisions=self.log_decisions)
        from armory.serve import run_server

        try:
            return run_server(server)
        except OSError as exc:  # e.g. a door's port is taken: the message names the door
            raise UsageError(f"cannot serve: {exc}") from exc

    def make_server(self, *, ticket_audience: str | None = None) -> ArmoryServer:
        """The server these options describe, not yet started (``ValueError`` names a bad
        option); ``armory cluster`` builds each replica's server with it, naming the
        replica as ``ticket_audience``: its openpi door then answers ``/move``, by which
        the front door moves robots off it, and with an API key also lets in robots
        holding the front door's ticket for that replica."""
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {self.port}")
        api_key = self.api_key or os.environ.get(API_KEY_ENV) or None
        doors = []
        if self.groot.is_open:
            doors.extend(
                self.groot.doors(self.host, on_kill=lambda: server.request_stop(), api_key=api_key)
            )
        if self.lerobot.port is not None:
            doors.append(self.lerobot.door(self.host, api_key=api_key))
        if self.port is None and not doors:
            raise ValueError("every door is closed: give --port or another door's port")
        _check_seed(self.seed)
        scheduler = make_scheduler(self.scheduler_options.config(self.server.scheduler, self.seed))
        from armory.serve import ArmoryServer

        policy = make_policy(for_server(self.policy, self.server.max_batch_size))
        server = ArmoryServer(
            policy,
            self.server,
            host=self.host,
            port=self.port,
            api_key=api_key,
            tickets=TicketGate(api_key, ticket_audience) if api_key and ticket_audience else None,
            movable=ticket_audience is not None,
            scheduler=scheduler,
            doors=doors,
        )
        return server


def _replica_defaults() -> Serve:
    return Serve(port=0)


@dataclass(frozen=True)
class Cluster:
    """Serve one policy from several replicas under Ray Serve, one engine (and GPU) each;
    a front door tells each robot its replica, placed by load (docs/scale-out.md)."""

    replicas: int = 2
    """Replicas, each its own engine with its own doors."""
    placement: Annotated[str, tyro.conf.arg(help=f"Placement: {_PLACEMENTS}.")] = "fluid"
    host: str = "127.0.0.1"
    """Address of the front door; 127.0.0.1 unless robots connect from other machines."""
    port: int = 8000
    """Port of the front door (robots connect to ws://host:port; 0 picks a free one)."""
    gpus_per_replica: float = 0.0
    """GPUs per replica (1 on a GPU machine; 0 runs the replicas on CPUs)."""
    cpus_per_replica: float = 1.0
    ray_address: str | None = None
    """Join this Ray cluster (auto, or the head's host:port) instead of starting one."""
    forget_after_s: float = 30.0
    """Seconds after which placement forgets a robot its replica no longer serves (its
    load no longer counts; a robot reconnecting within it keeps its replica)."""
    move_robots: bool = True
    """Move robots on Armory's client off a replica over capacity to one with room (each
    reconnects once, after a reply); --no-move-robots moves robots only off a replica
    that failed."""
    tls_ca_file: str | None = None
    """With TLS (--replica.server.tls-cert-file, on the front door and every replica): the
    CA the front door trusts when it reads the replicas; default: the system's CAs and
    the certificate itself (self-signed)."""
    replica: Serve = dataclasses.field(default_factory=_replica_defaults)
    """Each replica's server, as armory serve takes it (its ports are picked free)."""

    def run(self) -> int:
        with _usage_errors():
            check_placement_name(self.placement)
            from armory.cluster.supervisor import SupervisorConfig

            if not self.forget_after_s > 0:
                raise ValueError(f"--forget-after-s must be > 0, got {self.forget_after_s}")
            supervisor = SupervisorConfig(
                forget_after_s=self.forget_after_s, move_robots=self.move_robots
            )
            try:
                import ray  # noqa: F401

                from armory.cluster.ray_cluster import ClusterConfig, ClusterRunner
            except ModuleNotFoundError as exc:
                raise ValueError(
                    f"armory cluster needs Ray Serve ({exc.name} is missing): "
                    "pip install 'armory[cluster]'"
                ) from exc
            config = ClusterConfig(
                num_replicas=self.replicas,
                gpus_per_replica=self.gpus_per_replica,
                cpus_per_replica=self.cpus_per_replica,
                placement=self.placement,
                host=self.host,
                port=self.port,
                ray_address=self.ray_address,
                supervisor=supervisor,
                tls_ca_file=self.tls_ca_file,
            )
            runner = ClusterRunner(config, self.replica)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        logging.getLogger("websockets").setLevel(logging.WARNING)  # one line per robot
        with runner:
            print(f"front door: {runner.uri} (GET /place, /replicas, /healthz)", flush=True)
            for slot, address in enumerate(runner.addresses()):
                doors = address.door_addresses() if address else {}
                print(f"replica {slot}: {doors}", flush=True)
            wait_for_stop()
            print("stopping the front door, the replicas and Ray", flush=True)  # to the end
        return 0


@dataclass(frozen=True)
class Profile:
    """Time a policy's forward pass at batch sizes 1..max (warm) and write a latency profile
    file (percentiles, peak memory) that fleet files and policy:mock --policy.latency-profile
    read back."""

    out: Path
    """The profile file to write (JSON, e.g. configs/profiles/cpu-smolvla-tiny.json)."""
    max_batch_size: int = 8
    """Batch sizes 1..this are timed (unless --batch-sizes lists them)."""
    batch_sizes: tuple[int, ...] = ()
    """Explicit batch sizes to time instead of 1..max."""
    warmup: int = 2
    """Untimed passes before each batch size's timed ones."""
    repeats: int = 10
    """Timed passes per batch size."""
    device: str = ""
    """Where it runs, for the record (e.g. 'cuda: NVIDIA H200'); default: the policy's."""
    policy: PolicyConfig = dataclasses.field(default_factory=MockPolicyConfig)

    def run(self) -> int:
        from armory.core.profile_file import write_profile
        from armory.policies.profiling import profile_policy

        with _usage_errors():
            sizes = self.batch_sizes or tuple(range(1, self.max_batch_size + 1))
            if min(sizes) < 1:
                raise ValueError(f"batch sizes must be >= 1, got {sizes}")
            if self.warmup < 0 or self.repeats < 1:
                raise ValueError(
                    f"--warmup must be >= 0 and --repeats >= 1, got {self.warmup}, {self.repeats}"
                )
            policy = make_policy(self.policy)
        try:
            profile = profile_policy(
                policy,
                sizes,
                warmup=self.warmup,
                repeats=self.repeats,
                device=self.device,
                options=json.dumps(dataclasses.asdict(self.policy), default=str),
                on_sample=lambda size, s: print(f"batch {size:3d}: {1000 * s:9.2f} ms (median)"),
            )
        except (PolicyError, WorkerBatchError) as exc:  # a worker that hung, died or raised
            print(
                f"armory: error: profiling stopped: {exc} (a slow machine may need a longer "
                "--policy.worker.watchdog-min-s)",
                file=sys.stderr,
            )
            return RUN_FAILED
        finally:
            policy.close()
        with _usage_errors():
            write_profile(self.out, profile)
        print(f"wrote {self.out}")
        return 0


@dataclass(frozen=True)
class Fleet:
    """Run a fleet file's robots as real clients against a policy server; print the same
    per-robot and fleet metrics as simulate, measured by the robots themselves."""

    fleet: Path
    """Fleet file (.yaml, .yml or .json), as simulate reads it; see docs/fleet-file.md."""
    host: str = "127.0.0.1"
    """Host of the policy server (or a ws:// URI)."""
    port: int = 8000
    """Port of the policy server."""
    duration_s: Annotated[float, tyro.conf.arg(aliases=("--duration",))] = 20.0
    """Seconds each robot runs."""
    json_path: Annotated[Path | None, tyro.conf.arg(name="json", metavar="PATH")] = None
    """Also write the full report here as JSON."""
    api_key: str | None = None
    """Send 'Authorization: Api-Key <key>' (default: $ARMORY_API_KEY if set)."""
    request_mode: RequestMode | None = None
    """Override the fleet file's request_mode."""
    inject_delays: bool = True
    """Sleep each robot's uplink/downlink delay from the fleet file around every request, so a
    loopback run resembles the simulated links (--no-inject-delays over a real network)."""
    seed: int = 0
    """Seeds start phases, injected delays and observation contents."""
    bound: bool = True
    """Compute the starvation bound of the fleet as the server serves it: the fleet file's,
    with the server's max batch size and learned latency profile where they differ (each
    difference is warned about)."""
    connect_timeout_s: float = 10.0
    """Seconds to reach the server before giving up."""
    request_timeout_s: float = 5.0
    """Seconds a robot waits for one reply before counting a request error."""
    max_robot_rows: int = 40
    """Print at most this many robots (the JSON report holds all)."""
    explain: bool = False
    """Also print how often each of the scheduler's rules decided and what each does; and,
    from a server started with --server.explain-rules, what each changed."""
    plot: Annotated[Path | None, tyro.conf.arg(metavar="DIR")] = None
    """Also write PNGs here: each robot's queue depth over the run (queue_depth.png) and the
    server's batch sizes (batch_sizes.png)."""

    def run(self) -> int:
        with _usage_errors():
            from armory.fleet import FleetError, FleetOptions, FleetProgress, ServerLost, run_fleet
            from armory.fleet.trace import FleetTrace, plot_fleet

            options = FleetOptions(
                host=self.host,
                port=self.port,
                api_key=self.api_key or os.environ.get(API_KEY_ENV) or None,
                duration_s=self.duration_s,
                request_mode=self.request_mode,
                inject_delays=self.inject_delays,
                seed=self.seed,
                connect_timeout_s=self.connect_timeout_s,
                request_timeout_s=self.request_timeout_s,
            )
            fleet = sweep.read_fleet(self.fleet)
        logging.basicConfig(level=logging.WARNING, format="armory fleet: %(message)s")
        bars: list[tqdm] = []  # the progress bar, from the robots' first second on

        def show(progress: FleetProgress) -> None:
            if not bars:
                bar_format = "{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}"
                bars.append(tqdm(total=self.duration_s, desc="fleet", bar_format=bar_format))
            bars[0].n = min(progress.elapsed_s, self.duration_s)
            bars[0].set_postfix(progress.postfix(), refresh=False)
            bars[0].refresh()

        try:
            trace = FleetTrace() if self.plot is not None else None
            run = run_fleet(
                fleet,
                options,
                bound_of=fleet_bound if self.bound else None,
                on_progress=show,
                trace=trace,
            )
            try:
                with logging_redirect_tqdm():  # warnings print above the bar, not into it
                    report = asyncio.run(run)
                for bar in bars:
                    bar.n = self.duration_s  # the run ran its whole duration
            finally:
                for bar in bars:
                    bar.close()
        except ServerLost as exc:
            print(f"armory: error: {exc}", file=sys.stderr)
            return RUN_FAILED
        except FleetError as exc:
            raise UsageError(str(exc)) from exc
        _print_report(report, self.max_robot_rows, self.json_path)
        mode = self.request_mode or fleet.request_mode
        # Directed leads are the server's (its own margin and profile): only what the
        # fleet file's clients decide is noted here.
        _print_notes(short_window_notes(dataclasses.replace(fleet, request_mode=mode)))
        if self.explain:
            descriptions = rule_descriptions(report.scheduler)
            print("\n" + format_rules(report, descriptions))
            if len(descriptions) > 1 and not report.rule_changes:
                print("(what each rule changed: start the server with --server.explain-rules)")
        if trace is not None and self.plot is not None:
            for path in plot_fleet(trace, report.system.batch_size_histogram, self.plot):
                print(f"wrote {path}")
        return 0


@dataclass(frozen=True)
class Fleets:
    """Generate random fleets of a family as fleet files (schedulers are tuned on training
    seeds, below 1000, and judged on test seeds, 1000 and above)."""

    action: tyro.conf.Positional[Literal["generate"]]
    out: Path
    """Folder the fleet files are written into."""
    family: str = "mixed"
    """Fleet family: mixed."""
    count: int = 10
    """Fleets to write, from seeds seed .. seed + count - 1."""
    seed: int = 1000
    request_mode: RequestMode | None = None
    """Every fleet in this request mode (e.g. chunk-fraction: LeRobot's clients); default:
    each fleet's own."""

    def run(self) -> int:
        with _usage_errors():
            paths = write_family(self.family, self.count, self.seed, self.out, self.request_mode)
        print(f"wrote {len(paths)} fleet files to {self.out}")
        return 0


Command = (
    Annotated[Simulate, tyro.conf.subcommand("simulate")]
    | Annotated[Sweep, tyro.conf.subcommand("sweep")]
    | Annotated[Serve, tyro.conf.subcommand("serve")]
    | Annotated[Cluster, tyro.conf.subcommand("cluster")]
    | Annotated[Profile, tyro.conf.subcommand("profile")]
    | Annotated[Fleet, tyro.conf.subcommand("fleet")]
    | Annotated[Eval, tyro.conf.subcommand("eval")]
    | Annotated[Fleets, tyro.conf.subcommand("fleets")]
)


def _raise_usage_error(message: str) -> NoReturn:
    raise UsageError(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``armory`` script; returns the exit status."""
    try:
        with tyro_text(_raise_usage_error):
            command = tyro.cli(
                Command,  # type: ignore[arg-type]
                args=argv,
                prog="armory",
                description="Armory: batched, queue-aware serving of one robot policy to many "
                "robots.",
            )
        return command.run()
    except (UsageError, EvalError) as exc:
        print(f"armory: error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
