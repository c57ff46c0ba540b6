"""Every scheduler on the paper's fleet grid, side by side.

For each fleet in configs/fleets/paper/ (or --fleets), runs every scheduler for
--seeds seeds and prints, per fleet: the starvation bound, each scheduler's
starvation and weighted throughput (means over seeds), the default scheduler's
weighted throughput as a ratio to lookahead-actions and to the best other
scheduler, and the goals:

- THR: the default has weighted throughput >= every other scheduler's;
- BOUND: its starvation is within 3 percentage points of the bound;
- ZERO: on fleets whose bound stays 0 with every rate raised 10%, it starves 0.

The column ``feasible`` says whether THR and BOUND can hold together at all: the
fluid LP gives the most weighted throughput any schedule could have while
starving at most bound + 3 pp; where that is below what another scheduler
measured, no scheduler can meet both goals on that fleet.

    python benchmarks/schedulers.py [--seeds 3] [--first-seed 0] [--duration 60] [--workers 2]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from armory.fleet_spec import FleetSpec, load_fleet
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler, scheduler_names
from armory.sim.bound import fleet_bound, robot_classes
from armory.sim.simulator import SimConfig, simulate

OURS = SchedulerConfig().name
REFERENCE = "lookahead-actions"
BOUND_TOLERANCE = 0.03
THROUGHPUT_TOLERANCE = 1e-4
"""Relative: equal weighted throughputs differ in the last digits of the float sums."""


def _run(args: tuple[str, str, int, float]) -> tuple[str, str, int, float, float]:
    path, name, seed, duration_s = args
    fleet = load_fleet(path)
    report = simulate(
        fleet,
        make_scheduler(SchedulerConfig(name=name, seed=seed)),
        SimConfig(duration_s=duration_s, seed=seed),
    )
    return path, name, seed, report.system.starvation, report.system.weighted_throughput


def best_weighted_throughput_within(fleet: FleetSpec, starvation: float) -> float:
    """Most weighted actions per second the fluid LP allows at this much starvation."""
    classes = robot_classes(fleet.robot_specs())
    demand = float(classes.count @ classes.control_hz)
    solution = classes.solve(
        fleet.profile().table(fleet.max_batch_size)[1:],
        weight=classes.weight,
        min_total_actions_per_s=(1.0 - starvation) * demand * (1 - 1e-9),
    )
    return float((classes.count * classes.weight) @ solution.actions_per_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", nargs="*", default=["configs/fleets/paper"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run from this one on")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    paths: list[str] = []
    for item in args.fleets:
        p = Path(item)
        paths += [str(x) for x in sorted(p.glob("*.yaml"))] if p.is_dir() else [str(p)]
    names = scheduler_names()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(p, n, s, args.duration) for p in paths for n in names for s in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(_run, jobs, chunksize=4))
    elapsed = time.perf_counter() - started

    cells: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for path, name, _, starvation, weighted in results:
        cells.setdefault(path, {}).setdefault(name, []).append((starvation, weighted))

    short = {
        n: n.replace("lookahead-actions", "lookahead").replace("greedy-deadline", "greedy")
        for n in names
    }
    header = f"{'fleet':34s} {'bound':>6s} " + " ".join(f"{short[n]:>17s}" for n in names)
    header += f" {'/lookahead':>10s} {'/best':>6s}  goals"
    print(
        f"starvation % / weighted actions per s, mean of seeds {seeds.start}-{seeds.stop - 1}, "
        f"{args.duration:g} s virtual time each\n"
    )
    print(header)
    summary: dict[str, int] = {
        "THR": 0,
        "BOUND": 0,
        "ZERO": 0,
        "cells": 0,
        "zero_cells": 0,
        "infeasible": 0,
    }
    rows = []
    for path in paths:
        fleet = load_fleet(path)
        bound = fleet_bound(fleet)
        zero_required = bound == 0.0 and fleet_bound(fleet.with_rates_scaled(1.1)) == 0.0
        mean = {n: tuple(np.mean(cells[path][n], axis=0)) for n in names}
        ours_starv, ours_thr = mean[OURS]
        others = [mean[n][1] for n in names if n != OURS]
        best_other = max(others)
        thr_ok = ours_thr >= best_other * (1 - THROUGHPUT_TOLERANCE)
        bound_ok = ours_starv <= bound + BOUND_TOLERANCE
        zero_ok = (not zero_required) or ours_starv == 0.0
        feasible = best_weighted_throughput_within(fleet, bound + BOUND_TOLERANCE) >= best_other
        summary["cells"] += 1
        summary["THR"] += int(thr_ok)
        summary["BOUND"] += int(bound_ok)
        summary["zero_cells"] += int(zero_required)
        summary["ZERO"] += int(zero_required and zero_ok)
        summary["infeasible"] += int(not feasible)
        goals = " ".join(
            [
                "THR" if thr_ok else "thr-miss",
                "BOUND" if bound_ok else "bound-miss",
                *(["ZERO" if zero_ok else "zero-miss"] if zero_required else []),
                *([] if feasible else ["(infeasible)"]),
            ]
        )
        line = f"{fleet.name:34s} {100 * bound:6.1f} " + " ".join(
            f"{100 * mean[n][0]:6.1f}/{mean[n][1]:6.1f}    " for n in names
        )
        line += f" {ours_thr / mean[REFERENCE][1]:10.3f} {ours_thr / best_other:6.3f}  {goals}"
        print(line)
        rows.append(
            {
                "fleet": fleet.name,
                "bound_starvation": bound,
                "zero_required": bool(zero_required),
                "feasible": bool(feasible),
                "schedulers": {
                    n: {"starvation": mean[n][0], "weighted_throughput": mean[n][1]} for n in names
                },
            }
        )
    print(
        f"\n{OURS}: weighted throughput >= every other scheduler in {summary['THR']}/"
        f"{summary['cells']} fleets; within 3 pp of the bound in {summary['BOUND']}/"
        f"{summary['cells']}; zero starvation in {summary['ZERO']}/{summary['zero_cells']} "
        f"fleets that require it; both THR and BOUND impossible for any scheduler in "
        f"{summary['infeasible']} fleets. ({elapsed:.0f} s wall)"
    )
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "fleets": rows}, indent=1))


if __name__ == "__main__":
    main()
