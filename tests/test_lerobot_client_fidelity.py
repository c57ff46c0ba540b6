"""Armory's robot side against LeRobot 0.6.1's own classes, number by number.

``lerobot_client/reference_merges.py`` runs under LeRobot's interpreter
($ARMORY_LEROBOT_PYTHON; skipped without it) on chunks this test draws:

- ACT's ``ACTTemporalEnsembler`` against the ``temporal_ensemble`` rule configured
  through ``RuntimeConfig.merge_options``, on chunks longer than 100 rows;
- RTC's ``ActionQueue`` against the ``rtc`` rule with ``ActionQueue.freeze``, on
  chunks that disagree, each reply landing after its frozen actions were played;
- RTC's ``get_prefix_weights`` against ``armory.policies.rtc_guidance.prefix_weights``
  for every schedule and edge;

and ``lerobot_client/send_rule.py``: ``RobotClient``'s rule for sending an observation
against the ``chunk-fraction`` request mode.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from armory_client import ActionQueue, ChunkFraction, RuntimeConfig, SendState, make_merge_rule

from armory.policies.rtc_guidance import RTC_SCHEDULES, prefix_weights

SCRIPT = Path(__file__).resolve().parent / "lerobot_client" / "reference_merges.py"
LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON")

pytestmark = pytest.mark.skipif(
    not LEROBOT_PYTHON,
    reason="ARMORY_LEROBOT_PYTHON is unset: build the env with scripts/lerobot-env.sh",
)

ENSEMBLE_ROWS = 120
"""ACT chunk length: past the 100 predictions per index Armory once kept."""
RTC_ROWS = 20
RTC_PLAN = [[2, 3], [5, 1], [7, 4], [3, 5], [8, 2], [1, 3]]
"""(actions played before asking, actions played while the policy runs) per request."""
WEIGHT_CASES = [
    [start, end, total, schedule]
    for schedule in RTC_SCHEDULES
    for start, end, total in [(2, 6, 10), (0, 10, 10), (3, 3, 8), (8, 4, 6), (1, 20, 4), (0, 0, 5)]
]


def draw_chunks(seed: int, num_chunks: int, rows: int, dim: int) -> np.ndarray:
    """Chunks that disagree with each other (independent standard normals)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((num_chunks, rows, dim)).astype(np.float32)


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    asked = {
        "ensemble": {"coeff": 0.01, "chunks": draw_chunks(1, 150, ENSEMBLE_ROWS, 2).tolist()},
        "rtc_queue": {
            "chunks": draw_chunks(2, len(RTC_PLAN) + 1, RTC_ROWS, 3).tolist(),
            "plan": RTC_PLAN,
        },
        "prefix_weights": WEIGHT_CASES,
    }
    out = subprocess.run(
        [str(LEROBOT_PYTHON), str(SCRIPT)],
        input=json.dumps(asked),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_temporal_ensemble_matches_act_on_long_chunks(reference: dict[str, Any]) -> None:
    """One 120-row chunk per tick, ensembled with decay 0.01 from the runtime's config:
    every action played equals ACT's ensembler's."""
    config = RuntimeConfig(
        robot_id="r",
        control_hz=30.0,
        max_execution_horizon=ENSEMBLE_ROWS,
        merge_rule="temporal_ensemble",
        merge_options={"decay": 0.01},
    )
    queue = ActionQueue(
        max_execution_horizon=config.max_execution_horizon,
        merge_rule=make_merge_rule(config.merge_rule, **config.merge_options),
    )
    played = []
    for t, chunk in enumerate(draw_chunks(1, 150, ENSEMBLE_ROWS, 2)):
        queue.apply(chunk, t)
        played.append(queue.pop())
    np.testing.assert_allclose(np.stack(played), reference["ensemble"], atol=2e-6)


def test_rtc_plays_what_lerobots_rtc_queue_plays(reference: dict[str, Any]) -> None:
    """Chunks that disagree, each landing after its frozen actions were played: Armory's
    rtc queue plays the same actions as LeRobot's RTC ActionQueue, the frozen ones
    included."""
    chunks = draw_chunks(2, len(RTC_PLAN) + 1, RTC_ROWS, 3)
    queue = ActionQueue(max_execution_horizon=RTC_ROWS, merge_rule="rtc")
    played: list[Any] = []

    def play(num_actions: int) -> None:
        for _ in range(num_actions):
            action = queue.pop()
            played.append(None if action is None else action.tolist())

    queue.apply(chunks[0], 0)
    for chunk, (gap, delay) in zip(chunks[1:], RTC_PLAN, strict=True):
        play(gap)
        start = queue.action_index
        queue.freeze(delay)
        play(delay)
        queue.apply(chunk, start)
    play(queue.actions_left)
    assert None not in played
    np.testing.assert_array_equal(np.array(played), np.array(reference["rtc_queue"]))


def test_prefix_weights_match_lerobots_rtc(reference: dict[str, Any]) -> None:
    """Every schedule, with delays inside, at and past the horizon, and horizons past the
    chunk, gives LeRobot's weights."""
    for case, expected in zip(WEIGHT_CASES, reference["prefix_weights"], strict=True):
        np.testing.assert_allclose(prefix_weights(*case), expected, atol=1e-7, err_msg=str(case))


SEND_RULE_SCRIPT = Path(__file__).resolve().parent / "lerobot_client" / "send_rule.py"


def test_chunk_fraction_sends_when_lerobots_robot_client_sends(tmp_path: Path) -> None:
    """Armory's chunk-fraction mode (the simulator's and Armory's client's model of a
    LeRobot robot) against ``RobotClient._ready_to_send_observation`` itself, for every
    queue length from empty to past a chunk, several chunk sizes and thresholds, and
    before the first chunk: the same answer in each case."""
    cases = [
        [queue_size, chunk_size, threshold]
        for chunk_size in (1, 4, 10, 25, 50)
        for threshold in (0.0, 0.2, 0.5, 0.7, 1.0)
        for queue_size in range(chunk_size + 3)
    ]
    first = [[0, -1, threshold] for threshold in (0.0, 0.5, 1.0)]
    out = subprocess.run(
        [str(LEROBOT_PYTHON), str(SEND_RULE_SCRIPT)],
        input=json.dumps(cases + first),
        capture_output=True,
        text=True,
        cwd=tmp_path,  # importing LeRobot's robot_client opens a log file under ./logs
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    upstream = json.loads(out.stdout)

    def armory_sends(queue_size: int, chunk_size: int, threshold: float) -> bool:
        started = chunk_size > 0
        state = SendState(
            action_index=100,
            actions_left=queue_size,
            chunk_start=90 if started else None,
            control_hz=30.0,
            min_execution_horizon=1,
            in_flight=True,
            round_trip_s=0.1,
            max_execution_horizon=chunk_size if started else None,
        )
        return ChunkFraction(chunk_size_threshold=threshold).should_send(state)

    ours = [armory_sends(*case) for case in cases + first]
    assert ours == upstream
    assert any(upstream) and not all(upstream)
