"""Scale: a thousand robots through the simulator, and the cost of one decision.

For every scheduler, simulates configs/fleets/scale-1000.yaml (1,000 robots) for
300 s of virtual time and prints the wall time of the whole run, the number of
scheduling decisions and their mean cost (the scheduler's own time per
decision, measured around ``schedule``, as wall time and as processor time: on a
shared machine the second is the steadier), next to the starvation it reached.

    python benchmarks/scale.py [--fleet FILE] [--duration 300] [--schedulers NAME ...]
"""

from __future__ import annotations

import argparse
import time

from armory.fleet_spec import load_fleet
from armory.scheduling.registry import make_scheduler, scheduler_names
from armory.sim.bound import fleet_bound
from armory.sim.simulator import SimConfig, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="configs/fleets/scale-1000.yaml")
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--schedulers", nargs="*", default=scheduler_names())
    args = parser.parse_args()
    fleet = load_fleet(args.fleet)
    print(
        f"{fleet.name}: {fleet.num_robots} robots, {args.duration:g} s virtual time, "
        f"bound {100 * fleet_bound(fleet):.1f}% starvation\n"
    )
    print(
        f"{'scheduler':20s} {'wall s':>8s} {'decisions':>10s} {'mean decision':>14s} "
        f"{'(CPU)':>11s} {'starvation':>11s} {'mean batch':>11s}"
    )
    for name in args.schedulers:
        started = time.perf_counter()
        report = simulate(fleet, make_scheduler(name), SimConfig(duration_s=args.duration))
        wall_s = time.perf_counter() - started
        print(
            f"{name:20s} {wall_s:8.1f} {report.timing['num_decisions']:10.0f} "
            f"{report.timing['mean_decision_us'] / 1000:11.3f} ms "
            f"{report.timing['mean_decision_cpu_us'] / 1000:8.3f} ms "
            f"{100 * report.system.starvation:10.1f}% {report.system.mean_batch_size:11.1f}"
        )


if __name__ == "__main__":
    main()
