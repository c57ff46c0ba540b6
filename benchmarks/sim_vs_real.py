"""Simulator against reality: the same fleet file through ``armory simulate`` and ``armory fleet``.

For each fleet, the simulator runs it in virtual time (seeds 0..N-1, their mean),
then a mock server in this process computes as the fleet file says the GPU does
(its action horizon and latency profile, its max batch, the simulator's
directed-mode margin) and ``armory fleet`` runs the same robots as real clients
over loopback in a child process, with the file's link delays injected on the
client side, once per seed 0..R-1 (start phases and delays; a fresh server each
time; their mean, and the range of the runs' distances). Both report starvation
and throughput from the robots' own counts. Goal: within 2 percentage points of
starvation and 5% of throughput.

A fleet at the edge of its GPU's capacity can turn on a tenth of a millisecond of
forward pass; the last column therefore also simulates the fleet with the
latencies the real server learned (the worker's own time per forward pass) and
gives the real run's distance to that, in percentage points of starvation.

``--modes`` runs each fleet file once per request mode (the file's own by default).

The machine's CPU steal during the real runs (the share of time its virtual CPUs
waited for the host, from /proc/stat; "-" where there is none) is printed beside
each row: on a shared host the server's time around each forward pass, and with it
every-tick's starvation, grows with it.

    python benchmarks/sim_vs_real.py [--duration 20] [--seeds 3] [--real-runs 3] [--fleets FILE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
from _loopback import mock_server, run_fleet_process

from armory.fleet_spec import FleetSpec, load_fleet
from armory.scheduling.registry import make_scheduler
from armory.sim.table import format_table

GOAL_STARVATION_PP = 2.0
GOAL_THROUGHPUT = 0.05

DEFAULT_RUNS = [
    ("configs/fleets/mixed-rate-gpu.yaml", None),
    ("configs/fleets/mixed-rate.yaml", "directed"),
    ("configs/fleets/mixed-rate.yaml", "threshold"),
    ("configs/fleets/threshold-demo.yaml", None),
    ("configs/fleets/mixed-rate.yaml", "every-tick"),
]


def simulated(fleet: FleetSpec, duration_s: float, num_seeds: int) -> tuple[float, float]:
    """Mean starvation and throughput over seeds 0..num_seeds-1."""
    from armory.sim.simulator import SimConfig, simulate

    reports = [
        simulate(fleet, make_scheduler("just-in-time"), SimConfig(duration_s=duration_s, seed=s))
        for s in range(num_seeds)
    ]
    return (
        float(np.mean([r.system.starvation for r in reports])),
        float(np.mean([r.system.throughput_actions_per_s for r in reports])),
    )


def cpu_times() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs so far, from /proc/stat; None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    values = [int(v) for v in fields[1:9]]  # user .. steal
    return values[7], sum(values)


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> str:
    if before is None or after is None or after[1] == before[1]:
        return "-"
    return f"{100 * (after[0] - before[0]) / (after[1] - before[1]):.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, default=3, help="simulator seeds averaged")
    parser.add_argument(
        "--real-runs", type=int, default=3, help="fleet runner runs averaged (seeds 0..R-1)"
    )
    parser.add_argument("--fleets", nargs="*", help="fleet files (default: the set below)")
    parser.add_argument(
        "--modes", nargs="*", help="request modes to run each --fleets file in (default: its own)"
    )
    args = parser.parse_args()
    if args.real_runs < 1 or args.seeds < 1:
        parser.error("--seeds and --real-runs must be >= 1")
    modes = args.modes or [None]
    runs = [(p, m) for p in args.fleets for m in modes] if args.fleets else DEFAULT_RUNS

    rows = []
    for path, mode in runs:
        fleet = load_fleet(Path(path))
        if mode is not None:
            fleet = dataclasses.replace(fleet, request_mode=mode)
        sim_starved, sim_thr = simulated(fleet, args.duration, args.seeds)
        reals, learned_runs = [], []
        cpu_before = cpu_times()
        for seed in range(args.real_runs):
            with mock_server(fleet) as server:
                reals.append(
                    run_fleet_process(
                        fleet, server.port, args.duration, "--no-bound", "--seed", str(seed)
                    )
                )
                learned_runs.append(server.stats().latency_points_s)
        steal = steal_share(cpu_before, cpu_times())
        # The learned forward pass per batch size, averaged over the runs that ran it.
        learned = {
            b: float(np.mean([run[b] for run in learned_runs if b in run]))
            for b in sorted(set().union(*learned_runs))
        }
        learned_fleet = dataclasses.replace(fleet, latency_points=learned)
        learned_starved, _ = simulated(learned_fleet, args.duration, args.seeds)
        run_starved = [r["system"]["starvation"] for r in reals]
        real_starved = float(np.mean(run_starved))
        real_thr = float(np.mean([r["system"]["throughput_actions_per_s"] for r in reals]))
        trips_ms = [r["timing"].get("mean_round_trip_ms", np.nan) for r in reals]
        round_trip_ms = float(np.mean(trips_ms))
        gap_pp = 100 * (real_starved - sim_starved)
        runs_pp = [100 * (x - sim_starved) for x in run_starved]
        ratio = real_thr / sim_thr if sim_thr else float("nan")
        agree = abs(gap_pp) <= GOAL_STARVATION_PP and abs(ratio - 1) <= GOAL_THROUGHPUT
        rows.append(
            (
                fleet.name,
                fleet.request_mode,
                f"{100 * sim_starved:.1f}%",
                f"{100 * real_starved:.1f}%",
                f"{gap_pp:+.1f}",
                f"{min(runs_pp):+.1f}..{max(runs_pp):+.1f}",
                f"{sim_thr:.1f}",
                f"{real_thr:.1f}",
                f"{ratio:.3f}",
                f"{round_trip_ms:.0f}",
                "yes" if agree else "NO",
                f"{1e3 * learned.get(1, float('nan')):.2f}",
                f"{100 * (real_starved - learned_starved):+.1f}",
                steal,
            ),
        )
        print(f"{fleet.name} ({fleet.request_mode}): done", flush=True)
    headers = (
        "fleet",
        "mode",
        "sim starved",
        "real starved",
        "pp",
        "runs pp",
        "sim actions/s",
        "real actions/s",
        "real / sim",
        "real RTT ms",
        "agree",
        "learned b=1 ms",
        "pp vs sim @ learned",
        "CPU steal",
    )
    print(
        f"\nSimulator ({args.seeds} seeds, mean) against the fleet runner on loopback "
        f"({args.real_runs} runs, mean), {args.duration:g} s each; goal: within "
        f"{GOAL_STARVATION_PP:g} pp and {100 * GOAL_THROUGHPUT:g}%\n"
    )
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
