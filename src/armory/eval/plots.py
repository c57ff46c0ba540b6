"""PNG plots of an evaluation: success per variation axis, and each robot's queue.

Drawn with matplotlib's ``Figure`` (no global pyplot state, no display needed) after
the run, from the episode records alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from armory.eval.results import EpisodeResult, wilson_interval

MAX_BINS = 4
"""Value bins per axis (fewer when there are fewer episodes)."""
_COLUMNS = 4


def axis_values(episodes: Sequence[EpisodeResult]) -> dict[str, list[tuple[float, bool]]]:
    """Per variation axis, (value, success) of every episode that set it."""
    values: dict[str, list[tuple[float, bool]]] = {}
    for result in episodes:
        for name, value in result.scenario.get("values", {}).items():
            values.setdefault(name, []).append((float(value["value"]), result.success))
    return dict(sorted(values.items()))


def plot_success_by_axis(episodes: Sequence[EpisodeResult], path: Path) -> Path | None:
    """Success rate (95% Wilson bars) over equal-count bins of each axis's values; None
    when no episode varied anything."""
    values = axis_values(episodes)
    if not values:
        return None
    rows = -(-len(values) // _COLUMNS)
    fig = Figure(figsize=(3.2 * min(len(values), _COLUMNS), 2.6 * rows), layout="constrained")
    for i, (name, pairs) in enumerate(values.items()):
        ax = fig.add_subplot(rows, min(len(values), _COLUMNS), i + 1)
        pairs.sort()
        bins = np.array_split(np.arange(len(pairs)), min(MAX_BINS, len(pairs)))
        centers, rates, errors = [], [], [[], []]
        for members in bins:
            chosen = [pairs[j] for j in members]
            rate = wilson_interval(sum(ok for _, ok in chosen), len(chosen))
            centers.append(float(np.mean([v for v, _ in chosen])))
            rates.append(rate.rate)
            errors[0].append(rate.rate - rate.low)
            errors[1].append(rate.high - rate.rate)
        ax.errorbar(centers, rates, yerr=errors, marker="o", capsize=3)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("success")
    fig.savefig(path, dpi=100)
    return path


def plot_queues(episodes: Sequence[EpisodeResult], path: Path, control_hz: float) -> Path | None:
    """Actions left in each robot's queue over its first episode; None without traces."""
    first: dict[str, EpisodeResult] = {}
    for result in sorted(episodes, key=lambda r: r.episode):
        if result.queue_trace:
            first.setdefault(result.robot, result)
    if not first:
        return None
    fig = Figure(figsize=(8, 1.4 + 0.5 * len(first)), layout="constrained")
    ax = fig.add_subplot()
    for robot, result in sorted(first.items()):
        ticks = np.arange(len(result.queue_trace)) / control_hz
        ax.step(
            ticks, result.queue_trace, where="post", label=f"{robot} (episode {result.episode})"
        )
    ax.set_xlabel("seconds of robot time")
    ax.set_ylabel("actions left")
    ax.legend(fontsize=7, loc="upper right")
    fig.savefig(path, dpi=100)
    return path
