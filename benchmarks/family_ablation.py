"""The default scheduler's rules, each switched off, on the generated fleet family.

Runs ``benchmarks/family.py`` once with every rule on and once per rule of
``just-in-time`` turned off (``--disabled-rules``), on the same fleets (test seeds by
default) and the same cached results of the other schedulers, and prints a line per
run: the goal counts of family.py, the mean starvation and mean weighted throughput
of the default as a ratio to the best other scheduler, and the mean observation age
behind each executed action. A rule earns its lines when switching it off loses
something here.

``--repeats R`` judges every run on the means of R draws per fleet (family.py's).

    python benchmarks/family_ablation.py [--count 200] [--first-seed 1000]
        [--duration 20] [--workers 2] [--cache /tmp/family-cache.json] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from armory.scheduling.just_in_time import BASE_RULE, RULES

FAMILY = Path(__file__).with_name("family.py")
GOALS = ("THR99", "THR100", "STARV", "BOUND", "ZERO", "DIRECTED")
OF = {"THR99": "fleets", "THR100": "fleets", "STARV": "equal", "BOUND": "equal"}
OF |= {"ZERO": "zero_fleets", "DIRECTED": "directed"}


def run(args: argparse.Namespace, disabled: str | None, out: Path) -> dict:
    """One family.py run; its JSON summary."""
    command = [
        sys.executable,
        str(FAMILY),
        "--count",
        str(args.count),
        "--first-seed",
        str(args.first_seed),
        "--duration",
        str(args.duration),
        "--workers",
        str(args.workers),
        "--repeats",
        str(args.repeats),
        "--json",
        str(out),
    ]
    if args.cache is not None:
        command += ["--cache", str(args.cache)]
    if disabled is not None:
        command += ["--disabled-rules", disabled]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def summary_line(label: str, result: dict) -> str:
    counts = result["counts"]
    starvation, ratios, ages = [], [], []
    for fleet in result["fleets"]:
        schedulers = fleet["schedulers"]
        ours = schedulers["just-in-time"]
        best = max(v["weighted_throughput"] for k, v in schedulers.items() if k != "just-in-time")
        starvation.append(ours["starvation"])
        ratios.append(ours["weighted_throughput"] / best if best else 1.0)
        ages.append(ours.get("mean_age_s", float("nan")))
    goals = " ".join(f"{counts[g]:>4d}/{counts[OF[g]]:<4d}" for g in GOALS)
    return (
        f"{label:20s} {goals} {100 * np.mean(starvation):7.2f} {np.mean(ratios):7.4f} "
        f"{1e3 * np.nanmean(ages):7.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument(
        "--repeats", type=int, default=1, help="draws per fleet (family.py --repeats)"
    )
    args = parser.parse_args()
    print(
        f"{'rule off':20s} "
        + " ".join(f"{g:>9s}" for g in GOALS)
        + f" {'starv %':>7s} {'/best':>7s} {'age ms':>7s}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for rule in [None, *(r for r in RULES if r != BASE_RULE)]:
            result = run(args, rule, Path(folder) / f"{rule or 'none'}.json")
            print(summary_line(rule or "(none: all on)", result), flush=True)


if __name__ == "__main__":
    main()
