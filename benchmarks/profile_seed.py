"""What a server loses when its latency profile starts from another GPU's.

A server learns its GPU's forward-pass latency as it serves (the median of recent
batches of each size), starting from a profile it is given (``--server.latency-profile``,
the policy's declared points, else the ``l40s-pi05`` preset). Sizes it has not run yet
are estimated from that start and what it has measured (:mod:`armory.core.latency_profile`).
This benchmark runs fleets of the generated family (``--family``, ``--count`` fleets
from ``--first-seed``) once with the server seeded by the fleet's own GPU profile and
once per ``--seeds`` start: a preset, or ``size-1``, the GPU's own time at size 1 alone
(as a worker policy declares it, stretched in proportion to the batch); each for
``--duration`` seconds of virtual time (simulation seed = fleet seed). It prints per
scheduler the mean starvation and mean batch size from each start, and the fleets
where another start starves more than 1 pp beyond the fleet's own.

    python benchmarks/profile_seed.py [--count 200] [--first-seed 1000] [--duration 20]
        [--seeds l40s-pi05 l40s-pi05-paper size-1] [--schedulers just-in-time max-batch]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from armory.core.profile_file import ProfileFile, timing_from_samples, write_profile
from armory.scheduling.registry import make_scheduler
from armory.sim.fleet_family import generate_fleet
from armory.sim.simulator import SimConfig, simulate

OWN = "own"
"""The start from the fleet's own GPU profile."""
SIZE_1 = "size-1"
"""The start from the fleet's own GPU time at batch size 1 alone."""
WORSE_PP = 1.0
"""A preset start that starves more than this many points beyond the own start is listed."""


def _run(job: tuple[str, int, str, str, float]) -> tuple[int, str, str, float, float]:
    family, seed, scheduler, start, duration_s = job
    fleet = generate_fleet(family, seed).fleet
    with tempfile.TemporaryDirectory() as folder:
        server_profile = None if start == OWN else start
        if start == SIZE_1:
            seconds = fleet.profile().latency_s(1)
            timing = timing_from_samples(1, [seconds])
            one_point = ProfileFile(policy=fleet.name, device="simulated", batches=(timing,))
            server_profile = str(write_profile(Path(folder) / "size-1.json", one_point))
        config = SimConfig(duration_s=duration_s, seed=seed, server_latency_profile=server_profile)
        report = simulate(fleet, make_scheduler(scheduler), config)
    return seed, scheduler, start, report.system.starvation, report.system.mean_batch_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="mixed")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", nargs="+", default=["l40s-pi05", "l40s-pi05-paper", SIZE_1])
    parser.add_argument("--schedulers", nargs="+", default=["just-in-time", "max-batch"])
    args = parser.parse_args()
    starts = [OWN, *args.seeds]
    fleets = range(args.first_seed, args.first_seed + args.count)
    jobs = [
        (args.family, seed, scheduler, start, args.duration)
        for seed in fleets
        for scheduler in args.schedulers
        for start in starts
    ]
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(_run, jobs, chunksize=4))
    starvation = {(seed, name, start): s for seed, name, start, s, _ in results}
    batch = {(seed, name, start): b for seed, name, start, _, b in results}

    print(f"{args.count} {args.family} fleets from seed {args.first_seed}, {args.duration:g} s")
    header = f"{'scheduler':<14} {'server starts from':<20} {'mean starvation':>16} {'batch':>7}"
    print(header)
    print("-" * len(header))
    for name in args.schedulers:
        for start in starts:
            mean_starved = np.mean([starvation[seed, name, start] for seed in fleets])
            mean_batch = np.mean([batch[seed, name, start] for seed in fleets])
            label = {OWN: "the fleet's GPU", SIZE_1: "its GPU at size 1"}.get(start, start)
            print(f"{name:<14} {label:<20} {100 * mean_starved:>15.2f}% {mean_batch:>7.2f}")
    for name in args.schedulers:
        for start in args.seeds:
            worse = [
                (100 * (starvation[seed, name, start] - starvation[seed, name, OWN]), seed)
                for seed in fleets
                if starvation[seed, name, start] > starvation[seed, name, OWN] + WORSE_PP / 100
            ]
            worst = ", ".join(f"{seed} (+{pp:.1f} pp)" for pp, seed in sorted(worse)[::-1][:5])
            print(
                f"{name} from {start}: {len(worse)} of {args.count} fleets starve more than "
                f"{WORSE_PP:g} pp beyond the own start" + (f"; worst {worst}" if worse else "")
            )
    print(f"\n{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
