"""Server-added time per request with metrics (Prometheus, dashboard, per-robot activity)
on and off.

The fleet of ``server_overhead.py`` (robots at 30 Hz in directed mode sending the
two-camera payload, as ``armory fleet`` in a child process; the mock policy at 20 ms +
2 ms per robot, max batch 32) is run against a server with ``--server.metrics`` on, then
off, alternately, ``--repeats`` times each. While metrics are on, this process scrapes
``/metrics`` every second and reads ``/stats`` twice a second (as an open dashboard does),
so the scrapes' own time on the event loop is paid too. The server-added time per request
(arrival to reply sent, less waiting and the forward pass: the engine's
``overhead_ms_p50``/``p99``) is compared; goal: the medians within 0.1 ms.

Beside it, the added per-request code timed alone: the activity update at each request and
at each reply, and one scrape of ``/metrics`` with 32 robots connected.

    python benchmarks/metrics_overhead.py [--duration 10] [--robots 8 32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from _loopback import mock_server, run_fleet_process
from server_overhead import median_us, overhead_fleet

from armory.fleet.loopback import server_config_for
from armory.observe.metrics import EngineReading, ServerMetrics
from armory.observe.robot_activity import RobotActivity
from armory.sim.table import format_table

GOAL_MS = 0.1
SCRAPE_PERIOD_S = 1.0
DASHBOARD_PERIOD_S = 0.5


@contextmanager
def scraping(port: int) -> Iterator[list[int]]:
    """Scrape /metrics every second and /stats twice a second until exit; yields the count
    of scrapes done."""
    stop = threading.Event()
    done = [0]

    def scrape() -> None:
        ticks = 0
        while not stop.wait(DASHBOARD_PERIOD_S):
            paths = ["/stats"] + (["/metrics"] if ticks % 2 else [])
            for path in paths:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    r.read()
                done[0] += 1
            ticks += 1

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(10)


def run_once(num_robots: int, duration_s: float, *, metrics: bool) -> tuple[float, float, int]:
    """One fleet run; the server's overhead p50 and p99 (ms) and the scrapes done."""
    fleet = overhead_fleet(num_robots)
    config = dataclasses.replace(server_config_for(fleet), metrics=metrics)
    with mock_server(fleet, config=config) as server:
        if metrics:
            with scraping(server.port) as scrapes:
                run_fleet_process(fleet, server.port, duration_s, "--no-bound")
            num_scrapes = scrapes[0]
        else:
            run_fleet_process(fleet, server.port, duration_s, "--no-bound")
            num_scrapes = 0
        stats = server.stats()
    return stats.overhead_ms_p50 or 0.0, stats.overhead_ms_p99 or 0.0, num_scrapes


def code_costs() -> list[tuple[str, float]]:
    """The added code timed alone (microseconds, median)."""
    activities = [
        RobotActivity(door="openpi", peer="p", name=f"robot-{i}", connected_s=0.0)
        for i in range(32)
    ]
    activity = activities[0]
    clock = iter(np.arange(1e9) * 0.033)

    def request() -> None:
        activity.request(
            float(next(clock)),
            name="robot-0",
            control_hz=30.0,
            weight=1.0,
            max_execution_horizon=10,
            report=(40, 3, True, 0),
        )

    for a in activities:
        a.request(
            0.0,
            name=a.name,
            control_hz=30.0,
            weight=1.0,
            max_execution_horizon=10,
            report=(0, 0, True, 0),
        )
        a.reply(0.03, 0.01)

    def engine_reading() -> EngineReading:
        return dataclasses.replace(reading, robots=[a.sample() for a in activities])

    reading = EngineReading(
        uptime_s=10.0,
        busy_s=9.0,
        batch_size_counts={b: 10 for b in range(1, 33)},  # every size has run
        decisions_by_rule={"on-time": 100, "fluid-share": 50},
        requests_by_door={"openpi": 1000},
        replies_by_door={"openpi": {"chunk": 1000}},
        errors_by_door={},
        num_worker_restarts=0,
        robots=[a.sample() for a in activities],
    )
    metrics = ServerMetrics(max_batch_size=32, max_robot_labels=32)
    for size in range(1, 33):
        metrics.batch_done(size, 0.02 + 0.002 * size)
    return [
        ("activity at request", median_us(request, repeats=2000)),
        ("activity at reply", median_us(lambda: activity.reply(0.03, 0.01), repeats=2000)),
        ("forward-pass histogram (per batch)", median_us(lambda: metrics.batch_done(8, 0.03))),
        ("/metrics reading, on the loop", median_us(engine_reading, repeats=200)),
        (
            "/metrics text, in a thread: 32 robots, 32 batch sizes",
            median_us(lambda: metrics.exposition(reading), repeats=100),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--robots", type=int, nargs="*", default=[8, 32])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    rows = []
    for num_robots in args.robots:
        on: list[tuple[float, float, int]] = []
        off: list[tuple[float, float, int]] = []
        for _ in range(args.repeats):  # alternate, so drift on a shared machine hits both
            on.append(run_once(num_robots, args.duration, metrics=True))
            off.append(run_once(num_robots, args.duration, metrics=False))
        on_p50 = float(np.median([r[0] for r in on]))
        off_p50 = float(np.median([r[0] for r in off]))
        on_p99 = float(np.median([r[1] for r in on]))
        off_p99 = float(np.median([r[1] for r in off]))
        rows.append(
            (
                str(num_robots),
                f"{off_p50:.3f}",
                f"{on_p50:.3f}",
                f"{on_p50 - off_p50:+.3f}",
                f"{off_p99:.3f}",
                f"{on_p99:.3f}",
                str(sum(r[2] for r in on)),
                "yes" if on_p50 - off_p50 <= GOAL_MS else "NO",
            )
        )
    print(
        f"Server-added time per request, metrics off and on (30 Hz robots, {args.duration:g} s "
        f"a run, median of {args.repeats} runs each)\n"
    )
    headers = (
        "robots",
        "off p50 ms",
        "on p50 ms",
        "p50 diff ms",
        "off p99 ms",
        "on p99 ms",
        "scrapes",
        "within 0.1 ms",
    )
    print(format_table(headers, rows))
    print("\nThe added code alone (median of many calls)\n")
    costs = [(name, f"{us:.2f}") for name, us in code_costs()]
    print(format_table(("step", "us"), costs))


if __name__ == "__main__":
    main()
