"""Capacity: robots a server sustains without starvation, Armory against one request at a time.

The fleet: N identical robots at 20 Hz playing 10 actions a chunk (at least 2
before switching), 5 ms +- 2 ms links, clients in threshold mode (they ask when
their queue would run dry within the measured round trip, LeRobot's rule with its
threshold set from the latency), on a GPU-like linear profile (50 ms + 10 ms per robot in a batch).
Two servers, the same engine:

- **one request at a time**: max batch 1, first come first served (the request
  whose observation is oldest goes first), as upstream openpi's server behaves;
- **Armory**: max batch 16, the just-in-time scheduler.

For each, the simulator first predicts the largest N with starvation at most
``--threshold``; then real runs (the server in this process, ``armory fleet`` in a
child process, over loopback) move N up or down by one from there until N passes
and N + 1 fails. The ratio of the two Ns is the result.

Then one fleet (configs/fleets/mixed-rate-gpu.yaml) runs against Armory once per
request mode, reporting the observation bytes each robot sends per second beside
its starvation.

    python benchmarks/capacity.py [--duration 12] [--threshold 0.02]
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from _loopback import mock_server, run_fleet_process

from armory.fleet.loopback import server_config_for
from armory.fleet_spec import REQUEST_MODES, FleetSpec, fleet_from_dict, load_fleet
from armory.scheduling.base import Scheduler
from armory.scheduling.registry import make_scheduler
from armory.scheduling.snapshot import Batch, Snapshot
from armory.sim.simulator import SimConfig, simulate
from armory.sim.table import format_table


class FirstComeFirstServed(Scheduler):
    """The robots whose held observation is oldest, up to the max batch (benchmark only)."""

    name = "first-come"

    def schedule(self, snapshot: Snapshot) -> Batch:
        rows = np.flatnonzero(snapshot.eligible)
        rows = rows[np.argsort(snapshot.obs_time_s[rows], kind="stable")]
        return Batch(tuple(snapshot.robot_id[rows[: snapshot.max_batch_size]].tolist()))


@dataclass(frozen=True)
class ServerMode:
    label: str
    max_batch_size: int
    make_scheduler: Callable[[], Scheduler]


SERVER_MODES = [
    ServerMode("one request at a time (openpi)", 1, FirstComeFirstServed),
    ServerMode("Armory", 16, lambda: make_scheduler("just-in-time")),
]


def capacity_fleet(num_robots: int, max_batch_size: int) -> FleetSpec:
    link = {"median_s": 0.005, "jitter_s": 0.002}
    return fleet_from_dict(
        {
            "name": f"capacity-{num_robots}",
            "action_horizon": 10,
            "max_batch_size": max_batch_size,
            "latency_profile": "linear",
            "linear": {"intercept_s": 0.05, "slope_s": 0.01},
            "request_mode": "threshold",
            "robots": [
                {
                    "name": "robot",
                    "count": num_robots,
                    "control_hz": 20,
                    "min_execution_horizon": 2,
                    "max_execution_horizon": 10,
                    "uplink": link,
                    "downlink": link,
                }
            ],
        }
    )


def simulated_capacity(mode: ServerMode, threshold: float, duration_s: float) -> int:
    """Largest N (counting up from 1) whose simulated starvation is at most ``threshold``."""
    n = 0
    while True:
        fleet = capacity_fleet(n + 1, mode.max_batch_size)
        report = simulate(fleet, mode.make_scheduler(), SimConfig(duration_s=duration_s))
        if report.system.starvation > threshold:
            return n
        n += 1


def real_run(mode: ServerMode, num_robots: int, duration_s: float) -> dict:
    fleet = capacity_fleet(num_robots, mode.max_batch_size)
    with mock_server(fleet, scheduler=mode.make_scheduler()) as server:
        return run_fleet_process(fleet, server.port, duration_s, "--no-bound")


def real_capacity(
    mode: ServerMode, start: int, threshold: float, duration_s: float
) -> tuple[int, dict[int, dict]]:
    """From ``start``, step N by one until N passes and N + 1 fails; (N, reports by N)."""
    reports: dict[int, dict] = {}
    n = max(start, 1)
    while True:
        reports[n] = report = real_run(mode, n, duration_s)
        starved = report["system"]["starvation"]
        print(f"  {mode.label}: {n} robots, {100 * starved:.1f}% starved", flush=True)
        if starved <= threshold:
            if n + 1 in reports:
                return n, reports
            n += 1
        else:
            if n - 1 in reports or n == 1:
                return n - 1, reports
            n -= 1


def mode_comparison(duration_s: float) -> list[tuple[str, ...]]:
    """configs/fleets/mixed-rate-gpu.yaml against Armory once per request mode."""
    base = load_fleet("configs/fleets/mixed-rate-gpu.yaml")
    rows = []
    directed_bytes = None
    results = {}
    for request_mode in REQUEST_MODES:
        fleet = dataclasses.replace(base, request_mode=request_mode)
        with mock_server(fleet, config=server_config_for(fleet)) as server:
            results[request_mode] = run_fleet_process(fleet, server.port, duration_s, "--no-bound")
    directed_bytes = results["directed"]["system"]["bytes_sent_per_robot_per_s"]
    for request_mode, report in results.items():
        system = report["system"]
        robots = report["robots"]
        sent = system["bytes_sent_per_robot_per_s"]
        rows.append(
            (
                request_mode,
                f"{100 * system['starvation']:.1f}%",
                f"{system['throughput_actions_per_s']:.1f}",
                f"{np.mean([r['requests_per_s'] for r in robots]):.1f}",
                f"{sent / 1e3:.0f}",
                f"{sent / directed_bytes:.2f}",
                f"{system['mean_batch_size']:.2f}",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=12.0, help="seconds per real run")
    parser.add_argument("--threshold", type=float, default=0.02, help="starvation allowed")
    args = parser.parse_args()

    rows = []
    sustained = {}
    for mode in SERVER_MODES:
        predicted = simulated_capacity(mode, args.threshold, duration_s=30.0)
        print(f"{mode.label}: the simulator predicts {predicted} robots", flush=True)
        n, reports = real_capacity(mode, predicted, args.threshold, args.duration)
        sustained[mode.label] = n
        at_n = reports.get(n)
        over = reports[n + 1]
        rows.append(
            (
                mode.label,
                str(mode.max_batch_size),
                mode.make_scheduler().name,
                str(predicted),
                str(n),
                "-" if at_n is None else f"{100 * at_n['system']['starvation']:.1f}%",
                "-" if at_n is None else f"{at_n['system']['mean_batch_size']:.2f}",
                f"{100 * over['system']['starvation']:.1f}%",
            )
        )
    baseline, armory = (sustained[m.label] for m in SERVER_MODES)
    headers = (
        "server",
        "max batch",
        "scheduler",
        "sim predicts",
        "sustained",
        "starved there",
        "mean batch",
        "starved at +1",
    )
    print(
        f"\nRobots sustained with at most {100 * args.threshold:g}% starvation "
        f"(20 Hz, 10-action chunks, threshold clients, 50 ms + 10 ms/robot; "
        f"{args.duration:g} s per run)\n"
    )
    print(format_table(headers, rows))
    ratio = armory / baseline if baseline else float("inf")
    print(f"\nArmory / one at a time: {armory} / {baseline} = {ratio:.2f}x")

    print(
        f"\nRequest modes on configs/fleets/mixed-rate-gpu.yaml against Armory "
        f"({args.duration:g} s each; 'bytes / directed' is each mode's bytes over directed's)\n"
    )
    mode_headers = (
        "mode",
        "starved",
        "actions/s",
        "requests/s per robot",
        "KB/s per robot",
        "bytes / directed",
        "mean batch",
    )
    print(format_table(mode_headers, mode_comparison(args.duration)))


if __name__ == "__main__":
    main()
