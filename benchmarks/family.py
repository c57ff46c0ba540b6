"""Every scheduler on a generated fleet family, side by side, with the default's goals.

Fleets come from :mod:`armory.sim.fleet_family` (``--family mixed``, ``--count`` fleets
from ``--first-seed``). Seeds below 1000 are the training seeds (tune on them), 1000
and above the test seeds (report on them). Each fleet runs once per scheduler for
``--duration`` seconds of virtual time (simulation seed = fleet seed). Per fleet the
table prints the load, the starvation bound, every scheduler's starvation and
weighted throughput, and the default's ratio to the best other scheduler; then the
summary counts of the goals:

- THR99: the default's weighted throughput >= 0.99x the best other scheduler's (on
  every fleet); THR100: >= 1.0x (on at least 95%);
- STARV: on equal-weight fleets, starvation <= the best other's + 0.5 pp (every
  fleet); BOUND: within 3 pp of the bound (at least 90%);
- ZERO: zero starvation wherever the bound stays 0 with every rate raised 10%;
- DIRECTED: on directed fleets, the default's starvation within 1 pp of the same
  fleet in every-tick mode, with at most 1.5 observations sent per chunk.

Results of the other schedulers do not change when the default does: ``--cache FILE``
keeps them (keyed by fleet, scheduler, duration, margin and draw) so that a rerun
simulates only the default.

One simulation is one draw of the fleet's link delays, forward-pass jitter and start
phases, and fleet by fleet two schedulers a few tenths of a point apart may trade
places from one draw to the next. ``--repeats R`` runs every fleet and scheduler R
times (draw r with simulation seed ``fleet seed + r * 1,000,000``; draw 0 is the single
run) and judges the goals on the means over the draws (so ZERO asks for no starved
tick in any draw).

The family's threshold clients all ask 50 ms beyond their round trip (and directed
robots get 50 ms of lead margin); ``--threshold-margin S`` gives every fleet another
margin, so that a change can be judged on clients that ask earlier or later.
``--request-mode MODE`` runs every fleet in that mode instead of its own, e.g.
``chunk-fraction`` for fleets of LeRobot-like clients (``--chunk-size-threshold``,
default each fleet's 0.5); ``--played-out`` makes every robot ask only once its chunk is
played out (``--request-mode threshold --played-out``: openpi's runtime, which asks when
its chunk is done and waits for the reply).

``--set NAME=VALUE`` (repeatable) runs the default with one of its numeric constants
changed (:data:`SCHEDULER_CONSTANTS`, :data:`PROGRAM_CONSTANTS`); family_ablation.py
``--constants`` sweeps them.

``--explain`` also holds every decision of the default against its base rule alone on
the same snapshot and prints, summed over the fleets of each request mode, what each
rule changed (docs/scheduling.md, "What each rule changed"); the results are the same.

    python benchmarks/family.py [--count 200] [--first-seed 1000] [--duration 30]
        [--workers 2] [--cache /tmp/family-cache.json] [--threshold-margin 0.2]
        [--request-mode chunk-fraction] [--chunk-size-threshold 0.5] [--played-out]
        [--repeats 3] [--json out.json] [--explain] [--set margin_s=0.008]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from armory.fleet_spec import REQUEST_MODES, FleetSpec
from armory.scheduling import fluid_mix, just_in_time
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.just_in_time import BASE_RULE
from armory.scheduling.registry import make_scheduler, scheduler_names
from armory.scheduling.rule_changes import RuleChanges, summed
from armory.sim.bound import fleet_bound
from armory.sim.fleet_family import generate_fleet
from armory.sim.simulator import SimConfig, simulate
from armory.sim.table import format_rule_changes

OURS = SchedulerConfig().name
EVERY_TICK = "every-tick"
"""Suffix of the default's run of a directed fleet switched to every-tick requests."""
THROUGHPUT_TOLERANCE = 1e-4
"""Relative: equal weighted throughputs differ in the last digits of the float sums."""
DRAW_SEED_STRIDE = 1_000_000
"""Draw r of a fleet simulates with seed ``fleet seed + r * DRAW_SEED_STRIDE``."""
_MEANS = (
    "starvation",
    "weighted_throughput",
    "obs_per_chunk",
    "mean_age_s",
    "mean_decision_us",
    "mean_decision_cpu_us",
    "num_decisions",
)
"""Results averaged over a fleet's draws."""
_AT_LEAST_0 = (0.0, False, math.inf)
_ABOVE_0 = (0.0, True, math.inf)
_ABOVE_1 = (1.0, True, math.inf)
SCHEDULER_CONSTANTS: dict[str, tuple[float, bool, float]] = {
    "margin_s": _AT_LEAST_0,
    "margin_ticks": _AT_LEAST_0,
    "overload_actions": _AT_LEAST_0,
}
"""The default's numeric options (:class:`JustInTimeScheduler` attributes) ``--set`` takes,
each with the values it may take: (lowest, lowest excluded, highest)."""
PROGRAM_CONSTANTS: dict[str, tuple[float, bool, float]] = {
    "MIX_SHARE": (0.0, False, 1.0),
    "LINK_STEP_S": _ABOVE_0,
    "LINK_STEP_RATIO": _ABOVE_1,
    "LINK_GAP_S": _AT_LEAST_0,
    "LINK_GAP_RATIO": _AT_LEAST_0,
    "KEPT_STEP_RATIO": _ABOVE_1,
    "TABLE_STEP": _ABOVE_0,
    "GPU_COST": _AT_LEAST_0,
    "EVENNESS": _AT_LEAST_0,
    "IN_FULL_TOLERANCE": (0.0, False, 0.5),
}
"""The fluid program's constants (:mod:`armory.scheduling.fluid_mix`) ``--set`` takes, as
above: steps above zero, step ratios above one (the classes are taken on their logs)."""


@dataclass(frozen=True)
class Clients:
    """A fleet's clients as run (each None: the fleet's own)."""

    mode: str | None = None
    """Request mode."""
    margin_s: float | None = None
    """Threshold margin (and directed lead margin)."""
    chunk_fraction: float | None = None
    """Chunk size threshold of chunk-fraction clients."""
    played_out: bool = False
    """Every robot asks only once its chunk is played out (min execution horizon = max)."""

    def key(self, duration_s: float) -> str:
        """The part of a cache key a run of ``duration_s`` with these clients adds."""
        margin = "" if self.margin_s is None else f"/margin {self.margin_s:g}"
        chunk = "" if self.chunk_fraction is None else f"/chunk fraction {self.chunk_fraction:g}"
        played_out = "/played out" if self.played_out else ""
        return f"{self.mode or ''}/{duration_s:g}{margin}{chunk}{played_out}"

    def on(self, fleet: FleetSpec) -> FleetSpec:
        """``fleet`` with these clients."""
        if self.mode is not None:
            fleet = dataclasses.replace(fleet, request_mode=self.mode)
        if self.margin_s is not None:
            # A threshold client's margin is part of its bound (what it holds when it asks).
            fleet = dataclasses.replace(fleet, threshold_margin_s=self.margin_s)
        if self.chunk_fraction is not None:
            fleet = dataclasses.replace(fleet, chunk_size_threshold=self.chunk_fraction)
        if self.played_out:
            groups = tuple(
                dataclasses.replace(g, min_execution_horizon=g.max_execution_horizon)
                for g in fleet.robots
            )
            fleet = dataclasses.replace(fleet, robots=groups)
        return fleet


Setting = tuple[str, float]
"""One ``--set``: a constant's name and its value."""


def parse_setting(text: str) -> Setting:
    """``NAME=VALUE`` (``--set``) as a pair; raises ValueError naming what is wrong."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"--set takes NAME=VALUE, got {text!r}")
    ranges = SCHEDULER_CONSTANTS | PROGRAM_CONSTANTS
    if name not in ranges:
        raise ValueError(f"--set cannot change {name!r}; it changes {', '.join(ranges)}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"--set {name} takes a number, got {value!r}") from None
    low, low_excluded, high = ranges[name]
    above = number > low if low_excluded else number >= low
    if not (math.isfinite(number) and above and number <= high):
        bounds = f"{'>' if low_excluded else '>='} {low:g}"
        if math.isfinite(high):
            bounds += f" and <= {high:g}"
        raise ValueError(f"--set {name} must be a finite number {bounds}, got {value!r}")
    return name, number


def apply_program_constants(settings: tuple[Setting, ...]) -> None:
    """Set the fluid program's constants in this process (a worker runs one setting for
    its life: the program's memo is keyed by the snapshot, not by them)."""
    for name, value in settings:
        if name in PROGRAM_CONSTANTS:
            setattr(fluid_mix, name, value)
            if name == "IN_FULL_TOLERANCE":
                just_in_time._IN_FULL = 1.0 - value


def _run(
    job: tuple[str, int, str, float, Clients, tuple[str, ...], bool, int, tuple[Setting, ...]],
) -> dict:
    family, seed, name, duration_s, clients, disabled_rules, explain, draw, settings = job
    fleet = clients.on(generate_fleet(family, seed).fleet)
    sim_seed = seed + draw * DRAW_SEED_STRIDE
    scheduler = make_scheduler(
        SchedulerConfig(name=name, seed=sim_seed, disabled_rules=disabled_rules)
    )
    if name == OURS:
        apply_program_constants(settings)
        for constant, value in settings:
            if constant in SCHEDULER_CONSTANTS:
                setattr(scheduler, constant, value)
    report = simulate(
        fleet, scheduler, SimConfig(duration_s=duration_s, seed=sim_seed, explain=explain)
    )
    sent = sum(r.requests_per_s for r in report.robots) * duration_s
    chunks = sum(r.inferences for r in report.robots)
    return {
        "starvation": report.system.starvation,
        "weighted_throughput": report.system.weighted_throughput,
        "obs_per_chunk": sent / chunks if chunks else float("inf"),
        "mean_age_s": report.system.mean_age_s,
        "mean_decision_us": report.timing.get("mean_decision_us", 0.0),
        "mean_decision_cpu_us": report.timing.get("mean_decision_cpu_us", 0.0),
        "num_decisions": report.timing.get("num_decisions", 0.0),
        "rule_changes": {r: dataclasses.asdict(c) for r, c in report.rule_changes.items()},
    }


def _mean_of_draws(draws: list[dict]) -> dict:
    """One fleet and scheduler's results averaged over its draws (rule changes summed)."""
    if len(draws) == 1:
        return draws[0]
    # (results cached before decisions were counted lack their count)
    mean = {k: float(np.mean([d.get(k, np.nan) for d in draws])) for k in _MEANS}
    changes = summed(
        [{r: RuleChanges.from_json(c) for r, c in d["rule_changes"].items()} for d in draws]
    )
    mean["rule_changes"] = {r: dataclasses.asdict(c) for r, c in changes.items()}
    mean["starvation_draws"] = [d["starvation"] for d in draws]
    return mean


def _ratio(schedulers: dict[str, dict]) -> float:
    """The default's weighted throughput over the best other scheduler's."""
    best = max(v["weighted_throughput"] for k, v in schedulers.items() if k != OURS)
    return schedulers[OURS]["weighted_throughput"] / best if best > 0 else 1.0


def _bounds(job: tuple[str, int, Clients]) -> tuple[float, bool]:
    family, seed, clients = job
    fleet = clients.on(generate_fleet(family, seed).fleet)
    bound = fleet_bound(fleet)
    return bound, bound == 0.0 and fleet_bound(fleet.with_rates_scaled(1.1)) == 0.0


def _print_directed_against_every_tick(
    rows: list[dict], bands: tuple[tuple[str, float, float], ...]
) -> None:
    """What directed mode costs the default against the same robots streaming every tick,
    by load: mean starvation each way, the gap (mean and median), the fleets within 1 pp,
    observations sent per chunk each way, and the best other scheduler's directed run."""
    directed = [r for r in rows if "every_tick" in r]
    if not directed:
        return
    print(
        f"\n{OURS}, directed fleets against the same robots streaming every tick (fleets, "
        "starvation directed / every-tick, gap mean (median) pp, within 1 pp, observations "
        "a chunk directed / every-tick, best other directed):"
    )
    for label, lo, hi in (*bands, ("all", 0.0, math.inf)):
        picked = [r for r in directed if lo <= r["load"] < hi]
        if not picked:
            continue
        ours = np.array([100 * r["schedulers"][OURS]["starvation"] for r in picked])
        tick = np.array([100 * r["every_tick"]["starvation"] for r in picked])
        best_other = [
            min(100 * v["starvation"] for n, v in r["schedulers"].items() if n != OURS)
            for r in picked
        ]
        obs = np.mean([r["schedulers"][OURS]["obs_per_chunk"] for r in picked])
        tick_obs = np.mean([r["every_tick"]["obs_per_chunk"] for r in picked])
        gap = ours - tick
        print(
            f"  {label:10s} {len(picked):3d}  {ours.mean():5.1f}% / {tick.mean():5.1f}%  "
            f"{gap.mean():4.1f} ({np.median(gap):4.1f})  {int(np.sum(gap <= 1.0)):3d}  "
            f"{obs:5.2f} / {tick_obs:5.1f}  {np.mean(best_other):5.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="mixed")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--schedulers", nargs="*", default=None, help="default: all")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument(
        "--disabled-rules", nargs="*", default=[], help="the default's rules to turn off"
    )
    parser.add_argument(
        "--threshold-margin",
        type=float,
        default=None,
        help="seconds every threshold client asks beyond its round trip, and directed "
        "robots' lead margin (default: each fleet's own)",
    )
    parser.add_argument(
        "--request-mode",
        choices=REQUEST_MODES,
        default=None,
        help="run every fleet in this request mode (default: each fleet's own)",
    )
    parser.add_argument(
        "--chunk-size-threshold",
        type=float,
        default=None,
        help="chunk-fraction clients' fraction of a chunk (default: each fleet's)",
    )
    parser.add_argument(
        "--played-out",
        action="store_true",
        help="every robot asks only once its chunk is played out (with --request-mode "
        "threshold: openpi's own runtime, which asks when its chunk is done and waits)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="draws per fleet and scheduler; the goals are judged on their means",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="run the default with one of its numeric constants changed (repeatable): "
        + ", ".join(SCHEDULER_CONSTANTS | PROGRAM_CONSTANTS),
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--explain", action="store_true", help="also print what each of the default's rules changed"
    )
    args = parser.parse_args()
    try:
        settings = tuple(parse_setting(text) for text in args.set)
    except ValueError as error:
        parser.error(str(error))

    names = args.schedulers or scheduler_names()
    if OURS not in names:
        names = [OURS, *names]
    seeds = list(range(args.first_seed, args.first_seed + args.count))
    cache: dict[str, dict] = {}
    if args.cache is not None and args.cache.exists():
        cache = json.loads(args.cache.read_text())

    margin_s = args.threshold_margin
    clients = Clients(args.request_mode, margin_s, args.chunk_size_threshold, args.played_out)

    def key(seed: int, name: str, run_clients: Clients, draw: int = 0) -> str:
        drawn = f"/draw {draw}" if draw else ""
        return f"{args.family}/{seed}/{name}/{run_clients.key(args.duration)}{drawn}"

    draws = range(args.repeats)

    def result(seed: int, name: str, run_clients: Clients) -> dict:
        return _mean_of_draws([cache[key(seed, name, run_clients, d)] for d in draws])

    fleets = {s: generate_fleet(args.family, s) for s in seeds}
    if clients != Clients(margin_s=margin_s):
        fleets = {s: dataclasses.replace(f, fleet=clients.on(f.fleet)) for s, f in fleets.items()}
    streaming = dataclasses.replace(clients, mode=EVERY_TICK)
    """The clients of a directed fleet's every-tick run."""
    off = tuple(args.disabled_rules)
    jobs = [
        (
            args.family,
            s,
            n,
            args.duration,
            clients,
            off if n == OURS else (),
            n == OURS and args.explain,
            d,
            settings,
        )
        for s in seeds
        for n in names
        for d in draws
    ]
    jobs += [
        (args.family, s, OURS, args.duration, streaming, off, False, d, settings)
        for s in seeds
        if fleets[s].fleet.request_mode == "directed"
        for d in draws
    ]
    todo = [j for j in jobs if j[2] == OURS or key(j[1], j[2], j[4], j[7]) not in cache]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        # Big fleets first, so that the pool does not end on one long run.
        todo.sort(key=lambda j: -fleets[j[1]].fleet.num_robots)
        for job, outcome in zip(todo, pool.map(_run, todo, chunksize=1), strict=True):
            cache[key(job[1], job[2], job[4], job[7])] = outcome
        bounds = dict(
            zip(seeds, pool.map(_bounds, [(args.family, s, clients) for s in seeds]), strict=True)
        )
    elapsed = time.perf_counter() - started
    if args.cache is not None:
        args.cache.write_text(json.dumps(cache))

    short = {
        n: n.replace("lookahead-actions", "lookahead").replace("greedy-deadline", "greedy")
        for n in names
    }
    print(
        f"{args.family} family, seeds {seeds[0]}-{seeds[-1]}, {args.duration:g} s virtual time"
        + ("" if args.request_mode is None else f", every fleet {args.request_mode}")
        + ("" if margin_s is None else f", every client's margin {margin_s:g} s")
        + (
            ""
            if args.chunk_size_threshold is None
            else f", chunk size threshold {args.chunk_size_threshold:g}"
        )
        + (", every robot asking once its chunk is played out" if args.played_out else "")
        + ("" if args.repeats == 1 else f", means of {args.repeats} draws")
        + "; starvation % / weighted actions per s\n"
    )
    print(
        f"{'fleet':12s} {'mode':>10s} {'n':>4s} {'load':>5s} {'bound':>6s} "
        + " ".join(f"{short[n]:>15s}" for n in names)
        + f" {'/best':>6s}  goals"
    )
    counts = {
        k: 0
        for k in (
            "fleets",
            "THR99",
            "THR100",
            "equal",
            "STARV",
            "BOUND",
            "zero_fleets",
            "ZERO",
            "directed",
            "DIRECTED",
        )
    }
    misses: dict[str, list[str]] = {k: [] for k in ("THR99", "STARV", "ZERO", "DIRECTED")}
    rows = []
    decision_us = []
    for s in seeds:
        fleet = fleets[s].fleet
        bound, zero_required = bounds[s]
        res = {n: result(s, n, clients) for n in names}
        ours = res[OURS]
        decision_us.append(
            (
                fleet.num_robots,
                ours["mean_decision_us"],
                ours["mean_decision_cpu_us"],
                ours.get("num_decisions", np.nan),
            )
        )
        others = [n for n in names if n != OURS]
        best_starv = min(res[n]["starvation"] for n in others)
        ratio = _ratio(res)
        equal = len({g.weight for g in fleet.robots}) == 1
        goals = []
        counts["fleets"] += 1
        if ratio >= 0.99 - THROUGHPUT_TOLERANCE:
            counts["THR99"] += 1
        else:
            misses["THR99"].append(fleet.name)
            goals.append("thr99-miss")
        if ratio >= 1.0 - THROUGHPUT_TOLERANCE:
            counts["THR100"] += 1
        if equal:
            counts["equal"] += 1
            if ours["starvation"] <= best_starv + 0.005:
                counts["STARV"] += 1
            else:
                misses["STARV"].append(fleet.name)
                goals.append("starv-miss")
            if ours["starvation"] <= bound + 0.03:
                counts["BOUND"] += 1
            else:
                goals.append("bound-miss")
        if zero_required:
            counts["zero_fleets"] += 1
            if ours["starvation"] == 0.0:
                counts["ZERO"] += 1
            else:
                misses["ZERO"].append(fleet.name)
                goals.append("zero-miss")
        tick = None
        if fleet.request_mode == "directed":
            counts["directed"] += 1
            tick = result(s, OURS, streaming)
            ok = ours["starvation"] <= tick["starvation"] + 0.01 and ours["obs_per_chunk"] <= 1.5
            counts["DIRECTED"] += int(ok)
            if not ok:
                misses["DIRECTED"].append(fleet.name)
                goals.append(
                    f"directed-miss({100 * tick['starvation']:.1f}%,{ours['obs_per_chunk']:.2f}obs)"
                )
        print(
            f"{fleet.name:12s} {fleet.request_mode:>10s} {fleet.num_robots:4d} "
            f"{fleets[s].load:5.2f} {100 * bound:6.1f} "
            + " ".join(
                f"{100 * res[n]['starvation']:5.1f}/{res[n]['weighted_throughput']:8.1f}"
                for n in names
            )
            + f" {ratio:6.3f}  {' '.join(goals)}"
        )
        rows.append(
            {
                "fleet": fleet.name,
                "seed": s,
                "load": fleets[s].load,
                "request_mode": fleet.request_mode,
                "num_robots": fleet.num_robots,
                "bound_starvation": bound,
                "zero_required": zero_required,
                "schedulers": res,
                **({} if tick is None else {"every_tick": tick}),
            }
        )
    n = counts["fleets"]
    print(
        f"\n{OURS} on {n} fleets: weighted throughput >= 0.99x the best other on "
        f"{counts['THR99']}/{n}, >= 1.0x on {counts['THR100']}/{n}; equal-weight fleets: "
        f"starvation <= best other + 0.5 pp on {counts['STARV']}/{counts['equal']}, within 3 pp "
        f"of the bound on {counts['BOUND']}/{counts['equal']}; zero starvation on "
        f"{counts['ZERO']}/{counts['zero_fleets']} fleets that require it; directed within 1 pp "
        f"of every-tick and <= 1.5 observations per chunk on "
        f"{counts['DIRECTED']}/{counts['directed']}. ({elapsed:.0f} s wall)"
    )
    print("\nby request mode and load (fleets, >= 0.99x the best other, mean ratio):")
    bands = (("load < 0.8", 0.0, 0.8), ("0.8-1.1", 0.8, 1.1), ("> 1.1", 1.1, math.inf))
    present = [m for m in REQUEST_MODES if any(r["request_mode"] == m for r in rows)]
    for mode in present:
        cells = []
        for label, lo, hi in bands:
            picked = [r for r in rows if r["request_mode"] == mode and lo <= r["load"] < hi]
            ratios = [_ratio(r["schedulers"]) for r in picked]
            ok = sum(x >= 0.99 - THROUGHPUT_TOLERANCE for x in ratios)
            mean = f"{np.mean(ratios):.3f}" if ratios else "  -  "
            cells.append(f"{label}: {len(picked):3d} {ok:3d} {mean}")
        print(f"  {mode:14s}  " + "   ".join(cells))
    _print_directed_against_every_tick(rows, bands)
    sizes = np.array(decision_us)
    for lo, hi in ((2, 16), (17, 64), (65, 256)):
        sel = (sizes[:, 0] >= lo) & (sizes[:, 0] <= hi)
        if sel.any():
            # Each fleet's mean, averaged over fleets (a fleet of few, costly decisions
            # weighs as much as one of many), and every decision of those fleets pooled.
            decided = sizes[sel, 3]
            pooled = (
                f", {np.sum(sizes[sel, 2] * decided) / np.sum(decided):.0f} us a decision pooled"
                if np.all(np.isfinite(decided)) and decided.sum() > 0
                else ""
            )
            print(
                f"mean decision, {lo}-{hi} robots: {sizes[sel, 1].mean():.0f} us "
                f"(max {sizes[sel, 1].max():.0f} us), processor time "
                f"{sizes[sel, 2].mean():.0f} us{pooled}"
            )
    if args.explain:
        for mode in (*present, None):
            picked = [r for r in rows if mode is None or r["request_mode"] == mode]
            changes = summed(
                [
                    {
                        r: RuleChanges.from_json(c)
                        for r, c in p["schedulers"][OURS]["rule_changes"].items()
                    }
                    for p in picked
                ]
            )
            print(
                f"\n{mode or 'all'} fleets ({len(picked)}): "
                + format_rule_changes(changes, base_rule=BASE_RULE)
            )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"counts": counts, "misses": misses, "repeats": args.repeats, "fleets": rows},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
