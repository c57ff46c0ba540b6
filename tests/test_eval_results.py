"""Evaluation results: the Wilson interval and the aggregate over episodes and robots."""

from __future__ import annotations

import dataclasses

import pytest

from armory.eval.results import (
    EpisodeResult,
    format_table,
    progress_fields,
    summarize,
    wilson_interval,
)


def _episode(episode: int, robot: str, success: bool, starved: int) -> EpisodeResult:
    return EpisodeResult(
        episode=episode,
        robot=robot,
        scene_seed=episode,
        success=success,
        num_steps=50,
        sim_time_s=5.0,
        reward=float(success),
        terminated=success,
        scenario={},
        ticket=None,
        starvation=starved / 50,
        num_starved_ticks=starved,
        num_counted_ticks=50,
        mean_chunk_latency_s=0.1,
        mean_observation_age_s=0.2,
        num_requests=5,
        num_request_errors=0,
        num_missed_ticks=0,
        wall_s=5.0,
    )


def test_wilson_interval_matches_known_values() -> None:
    """9/10 gives the textbook 95% Wilson interval; 0/n and n/n stay inside [0, 1]."""
    rate = wilson_interval(9, 10)
    assert rate.rate == 0.9
    assert rate.low == pytest.approx(0.5958, abs=1e-4)
    assert rate.high == pytest.approx(0.9821, abs=1e-4)
    assert wilson_interval(0, 5).low == 0.0
    assert wilson_interval(5, 5).high == pytest.approx(1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_wilson_interval_contains_the_rate_exactly() -> None:
    """All successes give a high bound of exactly 1 (13/13 rounded to 1 - 1e-16 once, and
    the success plot's error bars refused the negative length)."""
    for trials in range(1, 60):
        for successes in (0, trials // 2, trials):
            rate = wilson_interval(successes, trials)
            assert rate.low <= rate.rate <= rate.high


def test_summary_counts_successes_and_pools_starvation_per_robot() -> None:
    """Success over all episodes; starvation is starved ticks over counted ticks, per robot
    and for the run."""
    episodes = [
        _episode(0, "robot-0", True, 0),
        _episode(1, "robot-1", False, 10),
        _episode(2, "robot-0", True, 5),
    ]
    summary = summarize(episodes)
    assert (summary.success.num_successes, summary.success.num_episodes) == (2, 3)
    assert summary.starvation == pytest.approx(15 / 150)
    robots = {r.robot: r for r in summary.robots}
    assert robots["robot-0"].starvation == pytest.approx(5 / 100)
    assert robots["robot-1"].success_rate == 0.0
    table = format_table(summary, {"env": "so101-pick", "robots": 2})
    assert "2/3" in table and "robot-1" in table
    assert dataclasses.asdict(summary)["success"]["num_episodes"] == 3


def test_progress_fields_count_successes_and_pool_starvation() -> None:
    """The eval progress bar: successes so far and starved ticks over counted ticks."""
    episodes = [_episode(0, "arm", True, 5), _episode(1, "arm", False, 15)]
    assert progress_fields(episodes) == {"success": "1/2", "starved": "20.0%"}
