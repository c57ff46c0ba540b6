"""The default scheduler's rules, each switched off, on the generated fleet family.

Runs ``benchmarks/family.py`` once with every rule on and once per rule of
``just-in-time`` turned off (``--disabled-rules``), on the same fleets (test seeds by
default) and the same cached results of the other schedulers, and prints a line per
run: the goal counts of family.py, the mean starvation and mean weighted throughput
of the default as a ratio to the best other scheduler, and the mean observation age
behind each executed action. A rule earns its lines when switching it off loses
something here.

``--repeats R`` judges every run on the means of R draws per fleet (family.py's).

``--constants`` runs, instead of the rules, the default with each of its numeric
constants at a lower and a higher value (:data:`CONSTANT_SWEEP`: margins and steps
halved and doubled, step ratios at 1.1 and 1.5, the program's weights and tolerances
a tenth and ten times), one at a time (family.py ``--set``), so that a constant that
sits on an edge the family happens to favour shows (docs/scheduling.md, "What each
constant is worth").

    python benchmarks/family_ablation.py [--count 200] [--first-seed 1000]
        [--duration 20] [--workers 2] [--cache /tmp/family-cache.json] [--repeats 3]
        [--constants]
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
CONSTANT_SWEEP: dict[str, tuple[float, float]] = {
    "margin_s": (0.002, 0.008),
    "margin_ticks": (0.25, 1.0),
    "overload_actions": (2.0, 10.0),
    "MIX_SHARE": (0.02, 0.1),
    "LINK_STEP_S": (0.0025, 0.01),
    "LINK_STEP_RATIO": (1.1, 1.5),
    "LINK_GAP_S": (0.02, 0.08),
    "LINK_GAP_RATIO": (0.25, 1.0),
    "KEPT_STEP_RATIO": (1.1, 1.5),
    "TABLE_STEP": (0.0025, 0.01),
    "GPU_COST": (1e-4, 1e-2),
    "EVENNESS": (1e-4, 1e-2),
    "IN_FULL_TOLERANCE": (1e-4, 1e-2),
}
"""The default's numeric constants (family.py ``--set`` names) and the two values
``--constants`` runs each at (as shipped: 4 ms, 0.5 tick, 5 actions, 0.05, 5 ms, 1.25,
40 ms, 0.5, 1.25, 0.005, 1e-3, 1e-3, 1e-3)."""


def run(
    args: argparse.Namespace,
    disabled: str | None,
    out: Path,
    settings: tuple[str, ...] = (),
) -> dict:
    """One family.py run (``disabled``: a rule turned off; ``settings``: ``--set``
    values); its JSON summary."""
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
    for setting in settings:
        command += ["--set", setting]
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
        f"{label:26s} {goals} {100 * np.mean(starvation):7.2f} {np.mean(ratios):7.4f} "
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
    parser.add_argument(
        "--constants",
        action="store_true",
        help="sweep the default's numeric constants instead of turning its rules off",
    )
    args = parser.parse_args()
    print(
        f"{'constant' if args.constants else 'rule off':26s} "
        + " ".join(f"{g:>9s}" for g in GOALS)
        + f" {'starv %':>7s} {'/best':>7s} {'age ms':>7s}"
    )
    with tempfile.TemporaryDirectory() as folder:
        if args.constants:
            result = run(args, None, Path(folder) / "shipped.json")
            print(summary_line("(as shipped)", result), flush=True)
            for name, values in CONSTANT_SWEEP.items():
                for value in values:
                    setting = f"{name}={value:g}"
                    result = run(args, None, Path(folder) / f"{setting}.json", (setting,))
                    print(summary_line(setting, result), flush=True)
            return
        for rule in [None, *(r for r in RULES if r != BASE_RULE)]:
            result = run(args, rule, Path(folder) / f"{rule or 'none'}.json")
            print(summary_line(rule or "(none: all on)", result), flush=True)


if __name__ == "__main__":
    main()
