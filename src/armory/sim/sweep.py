"""Sweeps: many fleets x many schedulers x many seeds in virtual time, and their plots.

Every function here is pure apart from the writers, which touch only the paths
they are given. Runs come back in grid order (fleet, scheduler, seed) whatever
the number of worker processes, so a sweep's files are the same for a seed
whether it ran on one core or many.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import yaml
from matplotlib.figure import Figure

from armory.fleet_spec import FleetSpec, load_fleet
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import make_scheduler, scheduler_names
from armory.sim.bound import fleet_bound
from armory.sim.simulator import SimConfig, simulate

FLEET_SUFFIXES = (".yaml", ".yml", ".json")
CSV_COLUMNS = (
    "fleet",
    "num_robots",
    "scheduler",
    "seed",
    "starvation",
    "bound_starvation",
    "throughput",
    "weighted_throughput",
    "jain_service",
    "mean_batch_size",
)


@dataclass(frozen=True)
class SweepRun:
    """One simulation of a sweep: one row of results.csv."""

    fleet: str
    num_robots: int
    scheduler: str
    seed: int
    starvation: float
    """Fraction of the fleet's control ticks with an empty queue."""
    bound_starvation: float | None
    """The fleet's starvation bound; None when the sweep skipped it."""
    throughput: float
    """Actions executed per second, all robots together."""
    weighted_throughput: float
    jain_service: float
    """Fairness: Jain's index over per-robot service, 1 - starvation (see
    :class:`~armory.report.SystemMetrics`)."""
    mean_batch_size: float


@dataclass(frozen=True)
class SweepCell:
    """One (fleet, scheduler) pair: means over its seeds."""

    family: str
    """The fleet's name without its robot count (see :func:`fleet_family`)."""
    fleet: str
    num_robots: int
    scheduler: str
    num_seeds: int
    starvation: float
    starvation_std: float
    """Standard deviation over seeds (0 for one seed)."""
    weighted_throughput: float
    bound_starvation: float | None


@dataclass(frozen=True)
class _Task:
    fleet: FleetSpec
    scheduler: SchedulerConfig
    sim: SimConfig
    bound_starvation: float | None


# ---- inputs ------------------------------------------------------------


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sorts names as people do: numbers by value (``fleet-2`` before ``fleet-10``)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part
    )


def fleet_paths(paths: Iterable[Path]) -> list[Path]:
    """Fleet files named directly, then those directly inside each named directory (in
    :func:`natural_key` order of their names)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(
                (p for p in path.iterdir() if p.suffix in FLEET_SUFFIXES),
                key=lambda p: natural_key(p.name),
            )
            if not inside:
                raise ValueError(f"{path}: no fleet files ({', '.join(FLEET_SUFFIXES)}) inside")
            found.extend(inside)
        elif path.exists():
            found.append(path)
        else:
            raise ValueError(f"{path}: no such fleet file or directory")
    return found


def read_fleet(path: Path) -> FleetSpec:
    """:func:`~armory.fleet_spec.load_fleet`, every failure a ValueError naming the file."""
    try:
        return load_fleet(path)
    except (OSError, yaml.YAMLError, json.JSONDecodeError) as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"{path}: cannot read fleet file: {message}") from exc


def load_fleets(paths: Iterable[Path]) -> list[FleetSpec]:
    """Every fleet of :func:`fleet_paths`, in order; two fleets may not share a name."""
    fleets: list[FleetSpec] = []
    seen: dict[str, Path] = {}
    for path in fleet_paths(paths):
        fleet = read_fleet(path)
        if fleet.name in seen:
            raise ValueError(
                f"fleet name {fleet.name!r} appears in both {seen[fleet.name]} and {path}"
            )
        seen[fleet.name] = path
        fleets.append(fleet)
    return fleets


def fleet_family(name: str, num_robots: int) -> str:
    """The fleet's name without the dash-separated number that equals its robot count.

    ``l40s-pi05-half-fast-6-w3`` with 6 robots is family ``l40s-pi05-half-fast-w3``.
    The last such number goes; a name without one is its own family.
    """
    parts = name.split("-")
    count = str(num_robots)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == count:
            rest = parts[:i] + parts[i + 1 :]
            return "-".join(rest) if rest else name
    return name


# ---- running -----------------------------------------------------------


def _run_task(task: _Task) -> SweepRun:
    report = simulate(task.fleet, make_scheduler(task.scheduler), task.sim)
    s = report.system
    return SweepRun(
        fleet=task.fleet.name,
        num_robots=task.fleet.num_robots,
        scheduler=report.scheduler,
        seed=task.sim.seed,
        starvation=s.starvation,
        bound_starvation=task.bound_starvation,
        throughput=s.throughput_actions_per_s,
        weighted_throughput=s.weighted_throughput,
        jain_service=s.jain_service,
        mean_batch_size=s.mean_batch_size,
    )


def run_grid(
    fleets: Sequence[FleetSpec],
    schedulers: Sequence[SchedulerConfig],
    seeds: Sequence[int],
    *,
    duration_s: float,
    workers: int = 1,
    with_bound: bool = True,
    on_run: Callable[[SweepRun], None] | None = None,
) -> list[SweepRun]:
    """Simulate every fleet x scheduler x seed; runs in that nesting order.

    Each run gets a fresh scheduler whose ``seed`` is the run's seed; a scheduler
    configuration given twice runs once (its repeat would read as more seeds).
    ``on_run`` is called after each run (in grid order), e.g. to advance a progress bar.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    schedulers = list(dict.fromkeys(schedulers))
    for config in schedulers:
        make_scheduler(config)  # an unknown name fails before any run
    bounds = {fleet.name: fleet_bound(fleet) if with_bound else None for fleet in fleets}
    tasks = [
        _Task(
            fleet=fleet,
            scheduler=dataclasses.replace(config, seed=seed),
            sim=SimConfig(duration_s=duration_s, seed=seed),
            bound_starvation=bounds[fleet.name],
        )
        for fleet in fleets
        for config in schedulers
        for seed in seeds
    ]
    runs: list[SweepRun] = []
    if workers == 1 or len(tasks) <= 1:
        results: Iterable[SweepRun] = map(_run_task, tasks)
        for run in results:
            runs.append(run)
            if on_run:
                on_run(run)
        return runs
    # Spawned workers share no state with this process; map() yields in task order.
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        for run in pool.map(_run_task, tasks):
            runs.append(run)
            if on_run:
                on_run(run)
    return runs


def aggregate(runs: Sequence[SweepRun]) -> list[SweepCell]:
    """Means over seeds per (fleet, scheduler), in the order the pairs first appear."""
    groups: dict[tuple[str, str], list[SweepRun]] = {}
    for run in runs:
        groups.setdefault((run.fleet, run.scheduler), []).append(run)
    cells = []
    for (fleet, scheduler), group in groups.items():
        starvation = np.array([r.starvation for r in group])
        cells.append(
            SweepCell(
                family=fleet_family(fleet, group[0].num_robots),
                fleet=fleet,
                num_robots=group[0].num_robots,
                scheduler=scheduler,
                num_seeds=len(group),
                starvation=float(starvation.mean()),
                starvation_std=float(starvation.std()),
                weighted_throughput=float(np.mean([r.weighted_throughput for r in group])),
                bound_starvation=group[0].bound_starvation,
            )
        )
    return cells


# ---- outputs -----------------------------------------------------------


def write_csv(runs: Sequence[SweepRun], path: Path) -> None:
    """results.csv: one row per run, columns :data:`CSV_COLUMNS`; a skipped bound is empty."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for run in runs:
            row = dataclasses.asdict(run)
            writer.writerow({k: "" if row[k] is None else row[k] for k in CSV_COLUMNS})


def write_json(runs: Sequence[SweepRun], cells: Sequence[SweepCell], path: Path) -> None:
    """results.json: ``{"runs": [...], "cells": [...]}`` (cells are the means over seeds)."""
    data = {
        "runs": [dataclasses.asdict(r) for r in runs],
        "cells": [dataclasses.asdict(c) for c in cells],
    }
    path.write_text(json.dumps(data, indent=2) + "\n")


def _file_name(family: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", family) + ".png"


def scheduler_color(name: str) -> str:
    """The plot colour of a scheduler: fixed by its place in the registry, so a scheduler
    keeps its colour whatever the order or the company it is swept in."""
    names = scheduler_names()
    index = names.index(name) if name in names else len(names)
    return f"C{index % 10}"


def plot_family(cells: Sequence[SweepCell], path: Path) -> None:
    """Write :func:`family_figure` of one family's cells to ``path``."""
    family_figure(cells).savefig(path, dpi=100)


def family_figure(cells: Sequence[SweepCell]) -> Figure:
    """Starvation and weighted throughput against fleet size, one line per scheduler
    (coloured by :func:`scheduler_color`) and the bound where the sweep computed it."""
    family = cells[0].family
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    starved_ax, weighted_ax = fig.subplots(1, 2)
    schedulers = list(dict.fromkeys(c.scheduler for c in cells))
    for scheduler in schedulers:
        mine = sorted((c for c in cells if c.scheduler == scheduler), key=lambda c: c.num_robots)
        sizes = [c.num_robots for c in mine]
        style = dict(marker="o", label=scheduler, color=scheduler_color(scheduler))
        starved_ax.plot(sizes, [100 * c.starvation for c in mine], **style)
        weighted_ax.plot(sizes, [c.weighted_throughput for c in mine], **style)
    bound = sorted(
        {(c.num_robots, c.bound_starvation) for c in cells if c.bound_starvation is not None}
    )
    if bound:
        # The marker draws a one-fleet bound too, where a dashed line alone would not show.
        sizes, bounds = [n for n, _ in bound], [100 * b for _, b in bound]
        starved_ax.plot(sizes, bounds, "k--", marker="_", markersize=14, label="bound")
    starved_ax.set(xlabel="robots", ylabel="starvation (% of ticks)", title="starvation")
    weighted_ax.set(xlabel="robots", ylabel="weighted actions / s", title="weighted throughput")
    for ax in (starved_ax, weighted_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(family)
    return fig


def plot_families(cells: Sequence[SweepCell], out_dir: Path) -> list[Path]:
    """One ``<family>.png`` per fleet family under ``out_dir``; returns the paths."""
    families: dict[str, list[SweepCell]] = {}
    for cell in cells:
        families.setdefault(cell.family, []).append(cell)
    paths = []
    for family, mine in families.items():
        path = out_dir / _file_name(family)
        plot_family(mine, path)
        paths.append(path)
    return paths


def write_outputs(runs: Sequence[SweepRun], out_dir: Path) -> list[Path]:
    """results.csv, results.json and the family plots under ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cells = aggregate(runs)
    write_csv(runs, out_dir / "results.csv")
    write_json(runs, cells, out_dir / "results.json")
    plots = plot_families(cells, out_dir)
    return [out_dir / "results.csv", out_dir / "results.json", *plots]
