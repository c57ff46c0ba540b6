"""What an evaluation measured: one record per episode, the aggregate, and its table."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

WILSON_Z = 1.959963984540054
"""Two-sided 95% normal quantile of the Wilson score interval."""


@dataclass(frozen=True)
class EpisodeResult:
    """One episode of one robot, as that robot measured it."""

    episode: int
    """Index of the episode in the run (0 .. episodes - 1)."""
    robot: str
    """The robot (process) that ran it."""
    scene_seed: int
    """Seed of the environment's own scene (e.g. block and goal placement)."""
    success: bool
    num_steps: int
    """Environment steps taken (control ticks with an action)."""
    sim_time_s: float
    """num_steps / the environment's control rate."""
    reward: float
    """Sum of the environment's rewards."""
    terminated: bool
    """The environment ended the episode (success or failure) before the time limit."""
    scenario: dict[str, Any]
    """The variation seed, episode and every axis value (``clamped``, ``not_applied``)."""
    ticket: dict[str, Any] | None
    """The action-noise ticket served in the episode's replies (None: no fixed noise)."""
    starvation: float
    """Starved ticks / counted ticks of this robot in the episode."""
    num_starved_ticks: int
    num_counted_ticks: int
    mean_chunk_latency_s: float | None
    """Mean round trip from sending an observation to holding its chunk."""
    mean_observation_age_s: float | None
    """Mean age, in simulated seconds, of the observation behind each executed action."""
    num_requests: int
    num_request_errors: int
    num_missed_ticks: int
    """Tick slots the robot's loop skipped because it ran a full period late (a machine
    too loaded for the time scale: lower --time-scale)."""
    wall_s: float
    """Wall-clock seconds the episode took."""
    queue_trace: list[int] = field(default_factory=list)
    """Actions left in the robot's queue after each tick of the episode."""


@dataclass(frozen=True)
class SuccessRate:
    """Successes out of episodes, with a 95% Wilson score interval."""

    num_successes: int
    num_episodes: int
    rate: float
    low: float
    high: float


@dataclass(frozen=True)
class RobotSummary:
    """One robot over all its episodes."""

    robot: str
    num_episodes: int
    success_rate: float
    starvation: float
    """Starved ticks / counted ticks over all its episodes."""
    mean_chunk_latency_s: float | None
    mean_observation_age_s: float | None


@dataclass(frozen=True)
class EvalSummary:
    """The whole run, aggregated."""

    success: SuccessRate
    mean_steps: float
    mean_sim_time_s: float
    mean_reward: float
    starvation: float
    """Starved ticks / counted ticks over every robot and episode."""
    mean_chunk_latency_s: float | None
    mean_observation_age_s: float | None
    num_missed_ticks: int = 0
    """Tick slots skipped over all robots and episodes (0 when the machine kept up)."""
    robots: list[RobotSummary] = field(default_factory=list)


def wilson_interval(num_successes: int, num_trials: int, z: float = WILSON_Z) -> SuccessRate:
    """The success rate and its Wilson score interval (0..1 for no trials)."""
    if num_trials < 0 or not 0 <= num_successes <= max(num_trials, 0):
        raise ValueError(f"need 0 <= successes <= trials, got {num_successes}/{num_trials}")
    if num_trials == 0:
        return SuccessRate(0, 0, 0.0, 0.0, 1.0)
    p = num_successes / num_trials
    denom = 1 + z * z / num_trials
    center = (p + z * z / (2 * num_trials)) / denom
    half = z * math.sqrt(p * (1 - p) / num_trials + z * z / (4 * num_trials**2)) / denom
    # The bounds contain p exactly (rounding put 1.0 above the high bound of n/n).
    low, high = min(p, max(0.0, center - half)), max(p, min(1.0, center + half))
    return SuccessRate(num_successes, num_trials, p, low, high)


def summarize(episodes: Sequence[EpisodeResult]) -> EvalSummary:
    """Aggregate ``episodes`` (any order)."""
    by_robot: dict[str, list[EpisodeResult]] = {}
    for result in episodes:
        by_robot.setdefault(result.robot, []).append(result)
    robots = [
        RobotSummary(
            robot=robot,
            num_episodes=len(mine),
            success_rate=sum(r.success for r in mine) / len(mine),
            starvation=_starvation(mine),
            mean_chunk_latency_s=_mean([r.mean_chunk_latency_s for r in mine]),
            mean_observation_age_s=_mean([r.mean_observation_age_s for r in mine]),
        )
        for robot, mine in sorted(by_robot.items())
    ]
    count = max(len(episodes), 1)
    return EvalSummary(
        success=wilson_interval(sum(r.success for r in episodes), len(episodes)),
        mean_steps=sum(r.num_steps for r in episodes) / count,
        mean_sim_time_s=sum(r.sim_time_s for r in episodes) / count,
        mean_reward=sum(r.reward for r in episodes) / count,
        starvation=_starvation(episodes),
        mean_chunk_latency_s=_mean([r.mean_chunk_latency_s for r in episodes]),
        mean_observation_age_s=_mean([r.mean_observation_age_s for r in episodes]),
        num_missed_ticks=sum(r.num_missed_ticks for r in episodes),
        robots=robots,
    )


def format_table(summary: EvalSummary, run: Mapping[str, Any]) -> str:
    """The results table printed at the end of a run."""
    s = summary.success
    lines = [
        f"env {run.get('env')}  policy {run.get('policy')}  scheduler {run.get('scheduler')}  "
        f"robots {run.get('robots')}  time scale {run.get('time_scale')}",
        f"success {s.num_successes}/{s.num_episodes} = {s.rate:.1%}  "
        f"(95% Wilson {s.low:.1%} .. {s.high:.1%})",
        f"mean episode {summary.mean_steps:.1f} steps ({summary.mean_sim_time_s:.1f} s), "
        f"mean reward {summary.mean_reward:.3f}, starvation {summary.starvation:.1%}, "
        f"chunk latency {_ms(summary.mean_chunk_latency_s)}, "
        f"observation age {_ms(summary.mean_observation_age_s)}, "
        f"missed ticks {summary.num_missed_ticks}",
        "",
        f"{'robot':<10} {'episodes':>8} {'success':>8} {'starved':>8} {'latency':>9} "
        f"{'obs age':>9}",
    ]
    for r in summary.robots:
        lines.append(
            f"{r.robot:<10} {r.num_episodes:>8} {r.success_rate:>8.0%} {r.starvation:>8.1%} "
            f"{_ms(r.mean_chunk_latency_s):>9} {_ms(r.mean_observation_age_s):>9}"
        )
    return "\n".join(lines)


def _starvation(episodes: Sequence[EpisodeResult]) -> float:
    counted = sum(r.num_counted_ticks for r in episodes)
    return sum(r.num_starved_ticks for r in episodes) / counted if counted else 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def progress_fields(episodes: Sequence[EpisodeResult]) -> dict[str, str]:
    """The progress bar's fields for the episodes done so far: success rate and the
    robots' starvation (starved ticks / counted ticks)."""
    succeeded = sum(e.success for e in episodes)
    return {
        "success": f"{succeeded}/{len(episodes)}",
        "starved": f"{_starvation(episodes):.1%}",
    }
