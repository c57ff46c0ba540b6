"""Soak: hundreds of robots for minutes against one server, in several client processes.

The fleet is configs/fleets/scale-1000.yaml's mix (7:2:1 robots at 10, 20 and 30 Hz;
horizon 50, minimum execution horizon 40; threshold requests; a linear profile of
0.05 s + 0.002 s per robot, max batch 64) at ``--robots`` robots, split across
``--processes`` ``armory fleet`` child processes (each its own robots, names prefixed
by the process) so the client side is not the bottleneck. The server (mock policy,
the real engine and openpi door) runs in this process on an ephemeral port; every
``--sample-s`` seconds the benchmark records its RSS and whether its event loop
answers within 5 s. At the end:
client request errors (a timeout, a lost connection or an error reply), server
errors, requests the server took but never answered, starvation, the server-added
time per request (p50, p99), and the RSS over time (first sample after the start-up
minute, last, largest).

    python benchmarks/soak.py [--robots 300] [--duration 600] [--processes 4] [--image-size 224]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _loopback import write_fleet

from armory.engine.server_engine import EngineStats
from armory.fleet.loopback import mock_policy_for, server_config_for
from armory.fleet_spec import FleetSpec, load_fleet
from armory.serve import ArmoryServer, ServerThread

BASE_FLEET = "configs/fleets/scale-1000.yaml"


def split_fleet(base: FleetSpec, num_robots: int, num_processes: int) -> list[FleetSpec]:
    """``base``'s mix at ``num_robots`` robots, as one fleet per client process."""
    total = sum(group.count for group in base.robots)
    fleets = []
    for k in range(num_processes):
        share = num_robots // num_processes + (1 if k < num_robots % num_processes else 0)
        groups = []
        for group in base.robots:
            count = round(share * group.count / total)
            if count:
                groups.append(dataclasses.replace(group, name=f"p{k}-{group.name}", count=count))
        fleets.append(dataclasses.replace(base, name=f"{base.name}-p{k}", robots=tuple(groups)))
    return fleets


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robots", type=int, default=300)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--scheduler", default="just-in-time")
    args = parser.parse_args()
    base = load_fleet(BASE_FLEET)
    fleets = split_fleet(base, args.robots, args.processes)
    policy = dataclasses.replace(
        mock_policy_for(base), image_shape=(args.image_size, args.image_size, 3)
    )
    config = server_config_for(base, scheduler=args.scheduler)
    server = ArmoryServer(policy.make(), config, host="127.0.0.1", port=0)
    samples: list[tuple[float, float]] = []  # (s, RSS MB)
    num_stalled_samples = 0
    with ServerThread(server) as thread, tempfile.TemporaryDirectory() as tmp:
        children = []
        for fleet in fleets:
            out = Path(tmp) / f"{fleet.name}.json"
            command = [
                sys.executable, "-m", "armory.cli", "fleet",
                "--fleet", str(write_fleet(fleet, Path(tmp))),
                "--port", str(thread.port),
                "--duration", str(args.duration),
                "--json", str(out),
                "--no-bound",
            ]  # fmt: skip
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            children.append((subprocess.Popen(command, **quiet), out))
        started = time.monotonic()
        while any(child.poll() is None for child, _ in children):
            samples.append((time.monotonic() - started, rss_mb()))
            try:
                thread.stats()  # answered from the event loop: is it free?
            except TimeoutError:
                num_stalled_samples += 1
            time.sleep(args.sample_s)
        stats = _stats_when_free(thread)
        reports = [json.loads(out.read_text()) for child, out in children if child.returncode == 0]
    failed = sum(child.returncode != 0 for child, _ in children)
    client_errors = sum(r["timing"]["num_request_errors"] for r in reports)
    starvation = sum(robot["starvation"] for r in reports for robot in r["robots"]) / max(
        sum(len(r["robots"]) for r in reports), 1
    )
    settled = [s for s in samples if s[0] >= 60.0] or samples
    print(
        f"soak: {args.robots} robots in {args.processes} processes, {args.duration:g} s, "
        f"{args.image_size}x{args.image_size}x3 images, {args.scheduler}"
    )
    print(f"samples with the loop busy > 5 s: {num_stalled_samples} of {len(samples)}")
    print(f"mean decision ms:                {stats.decision_ms_mean:.2f}")
    print(f"mean decision CPU ms:            {stats.decision_cpu_ms_mean:.2f}")
    print(f"scheduler faults:                {stats.num_scheduler_faults}")
    print(f"client processes failed:         {failed}")
    print(f"client request errors:           {client_errors:.0f}")
    print(f"server requests / replies:       {stats.num_requests} / {stats.num_replies}")
    print(f"server errors:                   {stats.num_errors}")
    unanswered = stats.num_requests - stats.num_replies - stats.num_errors
    print(f"unanswered at the end (left):    {unanswered}")
    print(f"mean starvation:                 {100 * starvation:.2f}%")
    p50, p99 = stats.overhead_ms_p50 or 0.0, stats.overhead_ms_p99 or 0.0
    print(f"server-added ms p50 / p99:       {p50:.2f} / {p99:.2f}")
    print(f"mean batch size:                 {stats.mean_batch_size:.1f}")
    print(
        f"RSS MB after 60 s / last / max:  {settled[0][1]:.0f} / {settled[-1][1]:.0f} / "
        f"{max(s[1] for s in samples):.0f}"
    )
    every = samples[:: max(len(samples) // 12, 1)]
    print("RSS over time (s: MB):", ", ".join(f"{s[0]:.0f}: {s[1]:.0f}" for s in every))


def _stats_when_free(thread: ServerThread) -> EngineStats:
    """The server's counters, waiting while its event loop is busy."""
    while True:
        try:
            return thread.stats()
        except TimeoutError:
            continue


if __name__ == "__main__":
    main()
