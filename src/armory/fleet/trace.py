"""A fleet run's trace for ``armory fleet --plot DIR``: each robot's queue depth sampled
over the run, and the server's batch sizes per second (from its ``/stats``); drawn as
PNGs after the run with matplotlib's ``Figure`` (no display needed)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from armory_client.runtime import RobotRuntime

SAMPLE_PERIOD_S = 0.05
"""Seconds between two samples of the robots' queues."""
STATS_PERIOD_S = 1.0
"""Seconds between two readings of the server's batch counts."""


@dataclass
class FleetTrace:
    """Samples taken during a run (seconds since the robots started)."""

    times_s: list[float] = field(default_factory=list)
    depths: dict[str, list[int]] = field(default_factory=dict)
    """Actions queued on each robot at each of ``times_s``."""
    stats_times_s: list[float] = field(default_factory=list)
    batch_counts: list[dict[int, int]] = field(default_factory=list)
    """The server's forward passes per size since the run started, at ``stats_times_s``."""

    async def record(
        self,
        runtimes: Sequence[RobotRuntime],
        clock: Callable[[], float],
        read_counts: Callable[[], Awaitable[dict[int, int] | None]],
    ) -> None:
        """Sample until cancelled."""
        started_s = clock()
        next_stats_s = started_s
        while True:
            now_s = clock()
            self.times_s.append(now_s - started_s)
            for runtime in runtimes:
                depth = runtime.queue.actions_left
                self.depths.setdefault(runtime.config.robot_id, []).append(depth)
            if now_s >= next_stats_s:
                counts = await read_counts()
                if counts is not None:
                    self.stats_times_s.append(clock() - started_s)
                    self.batch_counts.append(counts)
                next_stats_s = now_s + STATS_PERIOD_S
            await asyncio.sleep(SAMPLE_PERIOD_S)


def plot_fleet(trace: FleetTrace, histogram: Mapping[int, int], out_dir: Path) -> list[Path]:
    """``queue_depth.png`` (one panel per robot) and ``batch_sizes.png`` (the run's
    histogram and the mean batch size per second) in ``out_dir``; the paths written."""
    # Imported here: matplotlib takes about 0.3 s to load, and only --plot draws.
    from matplotlib.figure import Figure

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    robots = sorted(trace.depths)
    if robots:
        fig = Figure(figsize=(9, 1.2 + 1.1 * len(robots)), layout="constrained")
        axes = fig.subplots(len(robots), 1, sharex=True, squeeze=False)[:, 0]
        for ax, robot in zip(axes, robots, strict=True):
            depths = trace.depths[robot]
            ax.step(trace.times_s[: len(depths)], depths, where="post", linewidth=1)
            ax.fill_between(trace.times_s[: len(depths)], 0, depths, step="post", alpha=0.2)
            ax.set_ylabel(robot, rotation=0, ha="right", fontsize=8)
            ax.set_ylim(bottom=0)
        axes[-1].set_xlabel("seconds")
        fig.suptitle("actions queued on each robot")
        paths.append(out_dir / "queue_depth.png")
        fig.savefig(paths[-1], dpi=100)
    fig = Figure(figsize=(10, 3.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    sizes = sorted(histogram)
    left.bar(sizes, [histogram[b] for b in sizes])
    left.set_xlabel("batch size")
    left.set_ylabel("forward passes")
    left.set_title("batch sizes over the run")
    times, means = _mean_sizes(trace)
    right.plot(times, means, marker="o")
    right.set_xlabel("seconds")
    right.set_ylabel("mean batch size")
    right.set_title("per second")
    right.set_ylim(bottom=0)
    paths.append(out_dir / "batch_sizes.png")
    fig.savefig(paths[-1], dpi=100)
    return paths


def _mean_sizes(trace: FleetTrace) -> tuple[list[float], list[float]]:
    """Mean batch size between consecutive readings of the server's counts."""
    times, means = [], []
    pairs = zip(trace.batch_counts, trace.batch_counts[1:], strict=False)
    for i, (before, after) in enumerate(pairs):
        delta = {b: n - before.get(b, 0) for b, n in after.items()}
        passes = sum(delta.values())
        if passes:
            times.append(trace.stats_times_s[i + 1])
            means.append(sum(b * n for b, n in delta.items()) / passes)
    return times, means
