"""Robots held at zero starvation on K GPUs, by placement policy.

Fleets come from :mod:`armory.sim.fleet_family` (``mixed``; seeds below 1000 to tune,
1000 and above to report). Each fleet is scaled to ``n`` robots keeping its robot
types' shares; a fleet *holds* ``n`` on K GPUs when its starvation over ``--duration``
seconds of virtual time is at most ``--zero`` (0.1% of ticks by default: zero to the
table's precision). Per fleet:

- ``n1``: the most robots one GPU holds (doubling, then bisection), its starvation
  pooled over ``--n1-draws`` simulations of their own seeds (by default as many as
  the largest K: a run on K GPUs pools its K replicas' simulations, and one GPU's
  count taken from a single draw would set the bar by that draw's luck);
- per K and placement: the most robots K GPUs hold, as a fraction of ``K n1`` (1.2,
  1.15, ... tried from the top, the first that holds counts), its starvation pooled
  over ``--held-draws`` simulations (by default enough that the K replicas' simulations
  number at least one GPU's draws: both counts rest on as many), and the starved ticks
  at ``K n1`` robots (every GPU carries what one GPU holds) and at ``1.1 K n1``,
  summed over ``--repeats`` simulations of their own seeds (arrival order, links);

then the summary: the fleets where each placement holds at least ``0.95 K n1``
(SCALE), and the mixed fleets (more than one robot type) where fluid starves fewer
ticks than both random and round-robin (fleets where all starve none counted apart);
with ``--repeats`` above one, the same judged draw by draw, where the paired differences'
one-sided 95% interval tells (:func:`paired_verdict`: fewer than both, more than either,
or within the draws' noise); and each placement's starved ticks summed over the mixed
fleets. Fleets where one
GPU holds fewer than 2 robots or more than ``--max-n1`` are skipped (listed).

    python benchmarks/placement.py [--count 12] [--first-seed 1000] [--seeds S ...] [--duration 10]
        [--gpus 1 2 4 8] [--workers 2] [--repeats 1] [--n1-draws 8] [--held-draws 1]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.stats import t as student_t

from armory.fleet_spec import FleetSpec
from armory.scheduling.config import SchedulerConfig
from armory.sim.fleet_family import generate_fleet
from armory.sim.multi_gpu import simulate_gpus
from armory.sim.simulator import SimConfig

PLACEMENTS = ("random", "round-robin", "least-robots", "fluid")
SCALE_GOAL = 0.95


def scaled(fleet: FleetSpec, num_robots: int) -> FleetSpec:
    """``fleet`` with ``num_robots`` robots, its groups' shares kept (largest remainder)."""
    counts = np.array([g.count for g in fleet.robots], dtype=np.float64)
    exact = counts / counts.sum() * num_robots
    whole = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - whole), kind="stable")[: num_robots - whole.sum()]:
        whole[i] += 1
    groups = tuple(
        dataclasses.replace(g, count=int(n)) for g, n in zip(fleet.robots, whole, strict=True) if n
    )
    return dataclasses.replace(fleet, robots=groups)


def _run(fleet: FleetSpec, n: int, gpus: int, placement: str, seed: int, duration_s: float):
    return simulate_gpus(
        scaled(fleet, n),
        SchedulerConfig(),
        SimConfig(duration_s=duration_s, seed=seed),
        num_gpus=gpus,
        placement=placement,
    )


def _most_held(ok, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with ok(n), by bisection (lo - 1 when none)."""
    if not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


REPEAT_SEED_STEP = 100_000
"""Draw r (of one GPU's count, of a comparison) simulates with seed
``fleet seed + r * REPEAT_SEED_STEP``."""


def _one_gpu(job: tuple[int, float, float, int, int]) -> tuple[int, int]:
    seed, duration_s, zero, max_n1, draws = job
    fleet = generate_fleet("mixed", seed).fleet

    def ok(n: int) -> bool:
        # Pooled over ``draws`` simulations of their own seeds, as a run on K GPUs pools
        # its K replicas' simulations: one lucky draw does not set the bar.
        seeds = [seed + r * REPEAT_SEED_STEP for r in range(draws)]
        runs = [_run(fleet, n, 1, "fluid", s, duration_s) for s in seeds]
        return float(np.mean([r.report.system.starvation for r in runs])) <= zero

    n = fleet.num_robots
    if ok(n):
        while n < max_n1 and ok(min(2 * n, max_n1 + 1)):
            n = min(2 * n, max_n1 + 1)
        return seed, _most_held(ok, n, min(2 * n, max_n1 + 1))
    return seed, _most_held(ok, 1, n - 1) if n > 1 else 0


GRID = tuple(round(1.2 - 0.05 * i, 2) for i in range(15))
"""Fractions of ``K n1`` tried, from the top, until K GPUs hold that many robots."""
EDGE = (1.0, 1.1)
"""Fractions of ``K n1`` at which starved ticks are compared."""


def _k_gpus(job: tuple[int, int, int, str, float, float, int, int]) -> dict:
    seed, n1, gpus, placement, duration_s, zero, repeats, pooled = job
    fleet = generate_fleet("mixed", seed).fleet
    runs = {}

    def run(fraction: float, repeat: int = 0):
        if (fraction, repeat) not in runs:
            n = max(1, round(fraction * gpus * n1))
            sim_seed = seed + repeat * REPEAT_SEED_STEP
            runs[fraction, repeat] = _run(fleet, n, gpus, placement, sim_seed, duration_s)
        return runs[fraction, repeat]

    def holds(fraction: float) -> bool:
        # Pooled over ``pooled`` simulations, as one GPU's count pools its own.
        draws = [run(fraction, r).report.system.starvation for r in range(pooled)]
        return float(np.mean(draws)) <= zero

    held = next((f for f in GRID if holds(f)), 0.0)
    draws = {str(f): [run(f, r).num_starved_ticks for r in range(repeats)] for f in EDGE}
    return {
        "seed": seed,
        "gpus": gpus,
        "placement": placement,
        "held_fraction": held,
        "held": round(held * gpus * n1),
        "starved_ticks": {f: sum(ticks) for f, ticks in draws.items()},
        "starved_ticks_draws": draws,
    }


def paired_verdict(fluid: list[int], base: list[int]) -> int:
    """-1 where fluid starves fewer ticks than ``base`` beyond the draws' noise, +1 where
    it starves more, 0 where the draws cannot tell: the mean of the paired differences
    (draw r of both runs simulates the same seed: arrival order and link draws) against
    its one-sided 95% interval. A single draw, or paired differences all equal (no spread
    to judge by), decide by the sign alone."""
    diff = np.asarray(fluid, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    mean = float(diff.mean())
    if diff.size < 2 or not diff.std() > 0:
        return int(np.sign(mean))
    quantile = float(student_t.ppf(0.95, diff.size - 1))
    half = quantile * float(diff.std(ddof=1)) / math.sqrt(diff.size)
    return -1 if mean + half < 0 else 1 if mean - half > 0 else 0


def n1_draws(args: argparse.Namespace) -> int:
    """Simulations pooled for one GPU's count."""
    return args.n1_draws or max(args.gpus)


def held_draws(args: argparse.Namespace, gpus: int) -> int:
    """Simulations pooled for the count of ``gpus`` GPUs: ``--held-draws``, or as many as
    make ``gpus`` replicas' simulations at least one GPU's draws (one draw at the largest
    K by default), so that both counts rest on as many simulations of a GPU."""
    return args.held_draws or math.ceil(n1_draws(args) / gpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=None, help="these seeds instead of a range"
    )
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--gpus", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--zero", type=float, default=1e-3)
    parser.add_argument("--max-n1", type=int, default=48)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="simulations (arrival orders, link draws) summed for the starved-tick comparison",
    )
    parser.add_argument(
        "--n1-draws",
        type=int,
        default=0,
        help="simulations pooled for one GPU's count (default: the largest K, as many as "
        "a run on K GPUs pools)",
    )
    parser.add_argument(
        "--held-draws",
        type=int,
        default=0,
        help="simulations pooled for K GPUs' count (default: enough that K times this "
        "many replica simulations are at least one GPU's --n1-draws)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    start = time.perf_counter()
    seeds = args.seeds or range(args.first_seed, args.first_seed + args.count)
    with ProcessPoolExecutor(args.workers) as pool:
        jobs = [(s, args.duration, args.zero, args.max_n1, n1_draws(args)) for s in seeds]
        n1 = dict(pool.map(_one_gpu, jobs))
        kept = [s for s in seeds if 2 <= n1[s] <= args.max_n1]
        skipped = [s for s in seeds if s not in kept]
        jobs = [
            (s, n1[s], k, p, args.duration, args.zero, args.repeats, held_draws(args, k))
            for s in kept
            for k in args.gpus
            for p in PLACEMENTS
        ]
        rows = list(pool.map(_k_gpus, jobs))
    by = {(r["seed"], r["gpus"], r["placement"]): r for r in rows}
    print(
        "robots held at zero starvation (starved ticks at K n1 / at 1.1 K n1, "
        f"summed over {args.repeats} simulation(s))"
    )
    print(
        f"{'fleet':>6} {'mode':>10} {'types':>5} {'n1':>4} {'K':>2}  "
        + "  ".join(f"{p:>20}" for p in PLACEMENTS)
    )
    for s in kept:
        fleet = generate_fleet("mixed", s).fleet
        for k in args.gpus:
            cells = []
            for p in PLACEMENTS:
                r = by[s, k, p]
                ticks = "/".join(str(r["starved_ticks"][str(f)]) for f in EDGE)
                cells.append(f"{r['held']} ({ticks})")
            print(
                f"{s:>6} {fleet.request_mode:>10} {len(fleet.robots):>5} {n1[s]:>4} {k:>2}  "
                + "  ".join(f"{c:>20}" for c in cells)
            )
    print(f"\nskipped (one GPU holds < 2 or > {args.max_n1}): {skipped}")
    summary: dict[str, object] = {}
    mixed = [s for s in kept if len(generate_fleet("mixed", s).fleet.robots) > 1]
    for k in args.gpus:
        print(f"K={k}:")
        for p in PLACEMENTS:
            fractions = [by[s, k, p]["held_fraction"] for s in kept]
            hits = sum(f >= SCALE_GOAL for f in fractions)
            summary[f"scale_{k}_{p}"] = (hits, len(kept), float(np.mean(fractions)))
            print(
                f"  {p:<12} SCALE {hits}/{len(kept)}  held {np.mean(fractions):.3f} K n1 (mean), "
                f"{min(fractions):.2f} (worst)"
            )
        for f in EDGE:
            fewer = tied = zero = 0
            for s in mixed:
                ticks = {p: by[s, k, p]["starved_ticks"][str(f)] for p in PLACEMENTS}
                base = min(ticks["random"], ticks["round-robin"])
                if ticks["fluid"] == base == 0:
                    zero += 1
                elif ticks["fluid"] < base:
                    fewer += 1
                elif ticks["fluid"] == base:
                    tied += 1
            summary[f"fewer_{k}_{f}"] = (fewer, tied, zero, len(mixed))
            print(
                f"  mixed fleets at {f} K n1: fluid starves fewer ticks than random and "
                f"round-robin on {fewer}/{len(mixed) - zero} (ties {tied}; all zero on {zero})"
            )
            if args.repeats > 1:
                verdicts = [
                    [
                        paired_verdict(
                            by[s, k, "fluid"]["starved_ticks_draws"][str(f)],
                            by[s, k, b]["starved_ticks_draws"][str(f)],
                        )
                        for b in ("random", "round-robin")
                    ]
                    for s in mixed
                ]
                better = sum(v == [-1, -1] for v in verdicts)
                worse = [s for s, v in zip(mixed, verdicts, strict=True) if 1 in v]
                # Cases where every placement starves none (counted apart above) are
                # neither: the paired line counts over the same cases as the raw one.
                summary[f"paired_{k}_{f}"] = (better, worse, zero, len(mixed))
                print(
                    f"    by the paired draws (one-sided 95%): fewer than both on {better}/"
                    f"{len(mixed) - zero}, more than either on {len(worse)} {worse}, the "
                    f"rest within the draws' noise (all zero on {zero})"
                )
            totals = {
                p: sum(by[s, k, p]["starved_ticks"][str(f)] for s in mixed) for p in PLACEMENTS
            }
            summary[f"total_{k}_{f}"] = totals
            print(
                f"  starved ticks summed over the mixed fleets at {f} K n1: "
                + ", ".join(f"{p} {n}" for p, n in totals.items())
            )
    print(f"\n{time.perf_counter() - start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"n1": n1, "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
