"""How much of the gap to the starvation bound is the robots' tick phase?

The bound (docs/scheduling.md) charges a chunk that lands ``l`` seconds after its
observation ``floor(f l)`` ticks, as if every batch could start the instant each of
its robots' observations arrives. This script solves a tighter relaxation for one
simulator seed, whose start phases it takes from the simulator itself:

- a batch of size b starting at phase ``t`` (mod one tick) charges robot i the ticks
  it really passes: from its newest observation that can have arrived by ``t`` (its
  smallest uplink) to the chunk's landing (``t`` + latency(b) + its smallest
  downlink);
- the GPU runs one batch at a time: ``x[b, k, k2]`` batches per second of size b
  starting in phase bin k, followed by one starting in bin k2, cost latency(b) plus
  the least idle from the end of the first to the start of the second.

Phase bins are the intervals between every robot's breakpoints, so each robot's charge
is constant on a bin. The other constraints are the fluid's. Like the fluid, this is
a relaxation: no scheduler beats it, and it can still be far from what one reaches.
It needs every robot at the same control rate (the paper grid's 20 Hz). Beside it the
table shows the fluid with each chunk charged the ticks expected at a random phase
(``f l``, :func:`armory.sim.bound.expected_tick_starvation`): not a bound, but what a
scheduler whose batches ignore the robots' tick phases can expect.

    python benchmarks/phase_bound.py [--seeds 3] [FLEET ...]   (default: the paper grid)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from armory.fleet_spec import FleetSpec, load_fleet
from armory.scheduling.registry import make_scheduler
from armory.sim.bound import expected_tick_starvation, fleet_bound
from armory.sim.simulator import SimConfig, Simulator, simulate
from armory.sim.table import format_table


def _least_gap_s(
    end_lo: float, end_hi: float, start_lo: float, start_hi: float, tick: float
) -> float:
    """Least forward time from an end in [end_lo, end_hi) to a start in [start_lo,
    start_hi) + any whole number of ticks."""
    best = np.inf
    for shift in (-tick, 0.0, tick, 2 * tick):
        lo, hi = start_lo + shift, start_hi + shift
        if hi <= end_lo:
            continue
        best = min(best, max(0.0, lo - end_hi) if lo >= end_lo else 0.0)
    return float(best)


def phase_bound(fleet: FleetSpec, seed: int) -> float:
    """Least starvation (fraction of ticks) of the phase-aware relaxation for ``seed``."""
    specs = fleet.robot_specs()
    f = np.array([s.control_hz for s in specs])
    if not np.all(f == f[0]):
        raise ValueError(f"{fleet.name}: robots at different rates; one rate is needed")
    tick = 1.0 / f[0]
    horizon = np.array([s.max_execution_horizon for s in specs], dtype=np.float64)
    up = np.array([s.uplink.min_s for s in specs])
    down = np.array([s.downlink.min_s for s in specs])
    phase = np.array(
        [r.phase_s for r in Simulator(fleet, make_scheduler("random"), SimConfig(seed=seed)).robots]
    )
    sizes = fleet.max_batch_size
    latency = fleet.profile().table(sizes)[1:]
    n = len(specs)

    points = {0.0}
    for i in range(n):
        points.add(round((phase[i] + up[i]) % tick, 12))
        for b in range(sizes):
            points.add(round((phase[i] - latency[b] - down[i]) % tick, 12))
    lo = np.array(sorted(points))
    hi = np.append(lo[1:], tick)
    keep = hi - lo > 1e-12
    lo, hi = lo[keep], hi[keep]
    bins = lo.size
    mid = (lo + hi) / 2
    # Ticks robot i passes, batch size b, start bin k: (n, sizes, bins).
    landing = mid[None, None, :] + latency[None, :, None] + down[:, None, None]
    newest = mid[None, None, :] - up[:, None, None]
    ticks = np.floor(f[0] * (landing - phase[:, None, None]) + 1e-9) - np.floor(
        f[0] * (newest - phase[:, None, None]) + 1e-9
    )
    idle = np.empty((sizes, bins, bins))
    for b in range(sizes):
        ends = (lo + latency[b]) % tick
        for k in range(bins):
            for k2 in range(bins):
                idle[b, k, k2] = _least_gap_s(
                    ends[k], ends[k] + hi[k] - lo[k], lo[k2], hi[k2], tick
                )

    # Variables: a_i (n), r[i, b, k] (n * sizes * bins), x[b, k, k2] (sizes * bins * bins).
    num_r = n * sizes * bins
    r_col = n + np.arange(num_r).reshape(n, sizes, bins)
    x_col = n + num_r + np.arange(sizes * bins * bins).reshape(sizes, bins, bins)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    rhs: list[float] = []

    def row(columns: np.ndarray, values: np.ndarray, bound: float) -> None:
        rows.append(np.full(columns.size, len(rhs)))
        cols.append(columns)
        vals.append(values)
        rhs.append(bound)

    for i in range(n):
        per_robot = r_col[i].ravel()
        row(np.append(i, per_robot), np.append(1.0, np.full(per_robot.size, -horizon[i])), 0.0)
        row(np.append(i, per_robot), np.append(2.0, -(horizon[i] - ticks[i]).ravel()), f[i])
    for b in range(sizes):
        for k in range(bins):
            batches = x_col[b, k, :]
            row(
                np.concatenate([r_col[:, b, k], batches]),
                np.concatenate([np.ones(n), np.full(bins, -(b + 1.0))]),
                0.0,
            )
            for i in range(n):
                row(np.append(r_col[i, b, k], batches), np.append(1.0, -np.ones(bins)), 0.0)
    row(x_col.ravel(), (latency[:, None, None] + idle).ravel(), 1.0)
    num_vars = n + num_r + sizes * bins * bins
    a_ub = sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(len(rhs), num_vars),
    )
    # As many batches start in each bin as follow one into it.
    eq_rows, eq_cols, eq_vals = [], [], []
    for k in range(bins):
        out, into = x_col[:, k, :].ravel(), x_col[:, :, k].ravel()
        eq_rows.append(np.full(out.size + into.size, k))
        eq_cols.append(np.concatenate([out, into]))
        eq_vals.append(np.concatenate([np.ones(out.size), -np.ones(into.size)]))
    a_eq = sparse.csr_array(
        (np.concatenate(eq_vals), (np.concatenate(eq_rows), np.concatenate(eq_cols))),
        shape=(bins, num_vars),
    )
    cost = np.zeros(num_vars)
    cost[:n] = -1.0
    bounds = np.zeros((num_vars, 2))
    bounds[:, 1] = np.inf
    bounds[:n, 1] = f
    result = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.array(rhs),
        A_eq=a_eq,
        b_eq=np.zeros(bins),
        bounds=bounds,
        method="highs",
    )
    if not result.success:
        raise RuntimeError(f"{fleet.name}: phase LP failed: {result.message}")
    return max(0.0, 1.0 - float(result.x[:n].sum()) / float(f.sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fleets", nargs="*", type=Path)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=60.0, help="just-in-time's run, s")
    args = parser.parse_args()
    paths = args.fleets or sorted(Path("configs/fleets/paper").glob("*.yaml"))
    rows = []
    for path in paths:
        fleet = load_fleet(path)
        seeds = range(args.seeds)
        phased = np.mean([phase_bound(fleet, s) for s in seeds])
        config = [SimConfig(duration_s=args.duration, seed=s) for s in seeds]
        ours = np.mean(
            [simulate(fleet, make_scheduler("just-in-time"), c).system.starvation for c in config]
        )
        bound = fleet_bound(fleet)
        rows.append(
            (
                fleet.name,
                f"{100 * bound:.1f}",
                f"{100 * phased:.1f}",
                f"{100 * expected_tick_starvation(fleet):.1f}",
                f"{100 * ours:.1f}",
                f"{100 * (ours - phased):+.1f}",
            )
        )
        print(f"{fleet.name}: done", flush=True)
    print(
        f"\nStarvation %, mean of seeds 0-{args.seeds - 1}: the bound, the phase-aware "
        "relaxation, the fluid charged the ticks expected at a random phase (not a bound), "
        "just-in-time, and just-in-time's distance to the relaxation\n"
    )
    header = ("fleet", "bound", "phase bound", "expected ticks", "just-in-time", "gap pp")
    print(format_table(header, rows))


if __name__ == "__main__":
    main()
