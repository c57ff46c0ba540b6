"""Task success against serving: SO-101 pick-and-place with the expert behind an emulated
pi0.5 forward pass, for fleets of N robots x schedulers x seeds (docs/evaluation.md).

Each cell is one ``armory eval`` run (an in-process server, N robot processes, one
episode per robot unless --episodes-per-robot says more) written to
``OUT/robots-N/SCHEDULER/seed-S/results.json``; a cell whose results.json exists is
read, not run again (--rerun to replace it). Then a markdown table (success in the
time limit with its Wilson interval pooled over seeds, success within shorter limits
derived from the same episodes, starvation, chunk latency in robot time, the ticks the
robots missed because the machine could not keep up) is printed
and ``OUT/success_vs_serving.png`` plots success and starvation against fleet size,
one line per scheduler.

    python benchmarks/eval_serving.py --robots 1 2 4 8 16 --seeds 3 --time-scale 0.5 \
        --out results/eval-serving
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from matplotlib.figure import Figure

from armory.engine.config import ServerConfig
from armory.eval.command import Eval
from armory.eval.results import wilson_interval
from armory.eval.so101 import So101PickConfig
from armory.policies.expert import ExpertPolicyConfig

SCHEDULERS = ("just-in-time", "lookahead-actions", "max-batch", "round-robin")
SHORTER_LIMITS_S = (12.0, 13.0)


def cell_dir(out: Path, robots: int, scheduler: str, seed: int) -> Path:
    return out / f"robots-{robots}" / scheduler / f"seed-{seed}"


def run_cell(args: argparse.Namespace, robots: int, scheduler: str, seed: int) -> Path | None:
    """The cell's results.json, run now unless it exists (or --rerun); None when it does
    not exist and --existing-only says not to run it."""
    where = cell_dir(args.out, robots, scheduler, seed)
    path = where / "results.json"
    if path.exists() and not args.rerun:
        return path
    if args.existing_only:
        return None
    Eval(
        env=So101PickConfig(),
        policy=ExpertPolicyConfig(latency_profile=args.latency_profile),
        robots=robots,
        episodes=robots * args.episodes_per_robot,
        episode_time_s=args.episode_time_s,
        seed=seed,
        out=where,
        time_scale=args.time_scale,
        serve=ServerConfig(scheduler=scheduler, max_batch_size=args.max_batch_size),
        progress=False,
    ).run()
    return path


def summarize(paths: list[Path], limit_s: float) -> dict[str, float | str]:
    """One table row's numbers, pooled over the cell's seeds."""
    episodes, runs = [], []
    for path in paths:
        body = json.loads(path.read_text())
        episodes += body["episodes"]
        runs.append(body)
    scale = runs[0]["run"]["time_scale"]
    rate = wilson_interval(sum(e["success"] for e in episodes), len(episodes))
    counted = sum(e["num_counted_ticks"] for e in episodes)
    latencies = [e["mean_chunk_latency_s"] for e in episodes if e["mean_chunk_latency_s"]]
    row: dict[str, float | str] = {
        "seeds": len(paths),
        "success": rate.rate,
        "text": f"{rate.num_successes}/{rate.num_episodes} ({rate.low:.0%} .. {rate.high:.0%})",
        "starvation": sum(e["num_starved_ticks"] for e in episodes) / counted if counted else 0,
        "latency_ms": 1000 * scale * sum(latencies) / len(latencies) if latencies else 0.0,
        "mean_s": sum(e["sim_time_s"] for e in episodes) / len(episodes),
        # Ticks the robots' loops skipped because the machine ran a full period late.
        "missed_ticks": sum(e.get("num_missed_ticks") or 0 for e in episodes),
    }
    for shorter in SHORTER_LIMITS_S:
        if shorter < limit_s:
            won = sum(e["success"] and e["sim_time_s"] <= shorter for e in episodes)
            row[f"in {shorter:g} s"] = f"{won}/{len(episodes)}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--episodes-per-robot", type=int, default=1)
    parser.add_argument("--episode-time-s", type=float, default=15.0)
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument("--latency-profile", default="l40s-pi05")
    parser.add_argument("--max-batch-size", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("results/eval-serving"))
    parser.add_argument("--rerun", action="store_true")
    parser.add_argument(
        "--existing-only", action="store_true", help="pool the seeds already run; run nothing"
    )
    args = parser.parse_args()
    rows = {}
    for robots in args.robots:
        for scheduler in args.schedulers:
            found = [run_cell(args, robots, scheduler, seed) for seed in range(args.seeds)]
            paths = [path for path in found if path is not None]
            if paths:
                rows[robots, scheduler] = summarize(paths, args.episode_time_s)
    shorter = [f"in {s:g} s" for s in SHORTER_LIMITS_S if s < args.episode_time_s]
    print(
        f"| robots | scheduler | seeds | success in {args.episode_time_s:g} s (95% Wilson) | "
        + " | ".join(shorter)
        + " | mean episode | starvation | chunk latency | missed ticks |"
    )
    print("|" + " --- |" * (8 + len(shorter)))
    for (robots, scheduler), row in rows.items():
        cells = [str(row[k]) for k in shorter]
        print(
            f"| {robots} | {scheduler} | {row['seeds']} | {row['text']} | "
            + " | ".join(cells)
            + f" | {row['mean_s']:.1f} s | {row['starvation']:.1%} | {row['latency_ms']:.0f} ms"
            + f" | {row['missed_ticks']} |"
        )
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    success_ax, starvation_ax = fig.subplots(1, 2)
    for scheduler in args.schedulers:
        xs = [r for r in args.robots if (r, scheduler) in rows]
        success_ax.plot(
            xs, [rows[r, scheduler]["success"] for r in xs], marker="o", label=scheduler
        )
        starvation_ax.plot(xs, [rows[r, scheduler]["starvation"] for r in xs], marker="o")
    success_ax.set(
        xlabel="robots", ylabel=f"success in {args.episode_time_s:g} s", ylim=(-0.05, 1.05)
    )
    starvation_ax.set(xlabel="robots", ylabel="starvation")
    success_ax.legend(fontsize=7)
    path = args.out / "success_vs_serving.png"
    fig.savefig(path, dpi=100)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
