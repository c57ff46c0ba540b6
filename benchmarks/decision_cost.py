"""The cost of one just-in-time decision at 1, 8, 64 and 1,000 robots.

For each fleet the simulator runs a few seconds of virtual time and keeps the
snapshots the scheduler was asked about (up to ``--snapshots``, spread over the
run); each is then decided again ``--repeats`` times, and its cost is the fastest of
those in processor time (noise only ever adds time). The table prints the rules that
decided, the median and p99 over snapshots of ``schedule()``, the median of the batch
check, and the mirror's snapshot at that many robots: together what the request path
pays per decision.

Decided again, a snapshot finds the fluid program's robot classes in their memo. A
live server's link estimates wander robot by robot and move a class's link step now
and then (about a third of the decisions of the 1,000-robot soak), so the last row
decides the 1,000-robot snapshots with the classes found afresh each time.

    python benchmarks/decision_cost.py [--snapshots 300] [--repeats 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections import Counter
from collections.abc import Callable

import numpy as np

from armory.engine.queue_mirror import QueueMirror, QueueReport, RobotLimits
from armory.fleet_spec import FleetSpec, load_fleet
from armory.scheduling import fluid_mix
from armory.scheduling.just_in_time import JustInTimeScheduler
from armory.scheduling.snapshot import Batch, Snapshot, check_batch
from armory.sim.simulator import SimConfig, simulate
from armory.sim.table import format_table


def fleets() -> list[FleetSpec]:
    """One robot, eight (mixed-rate), 64 (live-100's four rates, 16 each), 1,000."""
    mixed = load_fleet("configs/fleets/mixed-rate.yaml")
    live = load_fleet("configs/fleets/live-100.yaml")
    return [
        dataclasses.replace(
            mixed, name="one-arm", robots=(dataclasses.replace(mixed.robots[0], count=1),)
        ),
        mixed,
        dataclasses.replace(
            live,
            name="live-64",
            robots=tuple(dataclasses.replace(g, count=16) for g in live.robots),
        ),
        load_fleet("configs/fleets/scale-1000.yaml"),
    ]


class _Recorder(JustInTimeScheduler):
    """Just-in-time that keeps the snapshots it decides on."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: list[Snapshot] = []

    def schedule(self, snapshot: Snapshot) -> Batch:
        self.snapshots.append(snapshot)
        return super().schedule(snapshot)


def fastest_s(call: Callable[[], object], repeats: int) -> float:
    """The fewest processor seconds ``call`` took in ``repeats`` calls."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        call()
        best = min(best, time.process_time() - started)
    return best


def mirror_of(num_robots: int) -> QueueMirror:
    """A mirror of ``num_robots`` robots, each holding an observation."""
    mirror = QueueMirror()
    for robot_id in range(num_robots):
        mirror.add(robot_id, RobotLimits(20.0, 1, 10, downlink_s=0.005), 0.0)
        mirror.observe(robot_id, QueueReport(5, robot_id % 5, 0), 0.01 * (robot_id % 7))
    return mirror


def recorded_snapshots(
    fleet: FleetSpec, *, num_snapshots: int, duration_s: float
) -> list[Snapshot]:
    """Up to ``num_snapshots`` snapshots just-in-time decided on while simulating ``fleet``,
    spread over the run."""
    recorder = _Recorder()
    simulate(fleet, recorder, SimConfig(duration_s=duration_s))
    picks = np.linspace(0, len(recorder.snapshots) - 1, min(num_snapshots, len(recorder.snapshots)))
    return [recorder.snapshots[i] for i in picks.astype(int)]


def measure(
    fleet: FleetSpec, kept: list[Snapshot], *, repeats: int, classes_afresh: bool = False
) -> list[str]:
    """One table row: the costs of deciding on ``fleet``'s snapshots ``kept``,
    microseconds; with ``classes_afresh`` the program's robot classes are not in their
    memo."""
    scheduler = JustInTimeScheduler()
    schedule_us, check_us = [], []
    for snapshot in kept:
        batch = scheduler.schedule(snapshot)

        def decide(s: Snapshot = snapshot) -> Batch:
            if classes_afresh:
                fluid_mix._classes.cache_clear()
            return scheduler.schedule(s)

        schedule_us.append(1e6 * fastest_s(decide, repeats))
        check_us.append(1e6 * fastest_s(lambda s=snapshot, b=batch: check_batch(s, b), repeats))
    mirror = mirror_of(fleet.num_robots)
    table_s = kept[0].latency_table_s
    snapshot_us = 1e6 * fastest_s(
        lambda: mirror.snapshot(1.0, table_s, fleet.max_batch_size), 5 * repeats
    )
    rules = Counter(scheduler.schedule(s).rule for s in kept)
    return [
        fleet.name + (" (classes afresh)" if classes_afresh else ""),
        str(fleet.num_robots),
        str(len(kept)),
        ", ".join(f"{rule} {count}" for rule, count in rules.most_common()),
        f"{np.percentile(schedule_us, 50):.1f}",
        f"{np.percentile(schedule_us, 99):.1f}",
        f"{np.percentile(check_us, 50):.1f}",
        f"{snapshot_us:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshots", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--duration", type=float, default=10.0, help="virtual seconds")
    args = parser.parse_args()
    recorded = [
        (fleet, recorded_snapshots(fleet, num_snapshots=args.snapshots, duration_s=args.duration))
        for fleet in fleets()
    ]
    rows = [measure(fleet, kept, repeats=args.repeats) for fleet, kept in recorded]
    # The largest fleet (the last) again, on the same snapshots, its classes found afresh.
    largest, largest_kept = recorded[-1]
    rows.append(measure(largest, largest_kept, repeats=args.repeats, classes_afresh=True))
    headers = [
        "fleet",
        "robots",
        "snapshots",
        "rules",
        "schedule p50 us",
        "p99 us",
        "check p50 us",
        "snapshot us",
    ]
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
