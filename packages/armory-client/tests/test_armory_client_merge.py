"""Chunk merge rules and real-time chunking: exact arrays, one action dimension.

Chunk values encode where they come from: a chunk tagged 1000 holds 1000 + i for
action index i, so each merged row shows which chunk (or blend) it holds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from armory_client import (
    MERGE_RULES,
    IndexedActions,
    QueueState,
    Rtc,
    TemporalEnsemble,
    make_merge_rule,
    merge_chunk,
    nonfinite_rows,
    rtc_delay_ticks,
    rtc_request,
)
from armory_client.merge import MergeResult, MergeRule

E = 4
"""max_execution_horizon of every test, unless one says otherwise."""

BLEND_WEIGHTS = {"weighted_average": 0.3, "latest_only": 0.0, "average": 0.5, "conservative": 0.7}
"""Weight of the old action in LeRobot's aggregations."""


def col(*values: float) -> np.ndarray:
    """A (len, 1) float32 column: one action per value."""
    return np.array(values, dtype=np.float32).reshape(-1, 1)


def make_state(
    action_index: int, values: list[float], newest_start: int | None = None, episode_id: int = 0
) -> QueueState:
    """A queue at `action_index` holding `values` for the indices from there on."""
    return QueueState(IndexedActions(action_index, col(*values)), newest_start, episode_id)


def make_chunk(start: int, tag: float, rows: int = 8) -> np.ndarray:
    """A chunk from index `start` whose row for index i holds tag + i."""
    return col(*(tag + i for i in range(start, start + rows)))


def land(
    rule: MergeRule | str,
    state: QueueState,
    start: int,
    tag: float,
    *,
    rows: int = 8,
    horizon: int = E,
    episode_id: int | None = None,
) -> MergeResult:
    """Merge make_chunk(start, tag, rows) into `state`."""
    rule = make_merge_rule(rule) if isinstance(rule, str) else rule
    return merge_chunk(
        rule,
        state,
        make_chunk(start, tag, rows),
        start,
        max_execution_horizon=horizon,
        episode_id=episode_id,
    )


def queue_of(result: MergeResult) -> tuple[int, list[float]]:
    """(first index, values) of the merged queue."""
    queued = result.state.queued
    return queued.first_index, [float(v) for v in queued.actions[:, 0]]


# ---- registry ----------------------------------------------------------------


def test_registry_names_and_error_lists_them() -> None:
    """Every rule is built by name; an unknown name lists them all; replace is the default."""
    assert list(MERGE_RULES) == [
        "replace",
        "weighted_average",
        "latest_only",
        "average",
        "conservative",
        "temporal_ensemble",
        "rtc",
    ]
    for name in MERGE_RULES:
        assert make_merge_rule(name).name == name
    assert make_merge_rule().name == "replace"
    with pytest.raises(ValueError, match=r"replace, weighted_average, .*, temporal_ensemble, rtc"):
        make_merge_rule("smooth")
    assert make_merge_rule("temporal_ensemble", decay=0.05).decay == 0.05  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"'replace'.*decay"):
        make_merge_rule("replace", decay=0.05)
    with pytest.raises(ValueError, match="decay"):
        make_merge_rule("temporal_ensemble", decay=-1.0)
    # Rules with memory: one object per robot.
    assert make_merge_rule("rtc") is not make_merge_rule("rtc")


# ---- what every rule shares -------------------------------------------------------


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_first_chunk_on_idle_robot_yields_horizon(name: str) -> None:
    """A chunk landing on an empty queue at its own index yields its first E rows."""
    result = land(name, QueueState(), 0, 1000)
    assert result.outcome == "applied"
    assert queue_of(result) == (0, [1000, 1001, 1002, 1003])
    assert result.state.newest_start == 0


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_late_chunk_drops_passed_rows(name: str) -> None:
    """Robot at 6 idle (starved); a chunk from 3 keeps indices 6 only (3 + E = 7)."""
    result = land(name, make_state(6, [], newest_start=2), 3, 1000)
    assert queue_of(result) == (6, [1006])


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_chunk_entirely_passed_empties_the_queue(name: str) -> None:
    """Every row of the chunk already passed: replace-from-s leaves nothing queued."""
    result = land(name, make_state(9, [], newest_start=2), 3, 1000)
    assert result.outcome == "applied"
    assert queue_of(result) == (9, [])
    assert result.state.newest_start == 3


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_horizon_cuts_rows(name: str) -> None:
    """Only rows below s + max_execution_horizon are queued."""
    assert queue_of(land(name, QueueState(), 0, 1000, horizon=2)) == (0, [1000, 1001])
    assert queue_of(land(name, QueueState(), 0, 1000, rows=3, horizon=6)) == (0, [1000, 1001, 1002])


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_start_past_queue_end_is_refused(name: str) -> None:
    """A chunk starting past the queue's end leaves a gap the robot could never pass."""
    with pytest.raises(ValueError, match=r"past the end of the queue \(7\)"):
        land(name, make_state(5, [50, 60], newest_start=5), 8, 1000)


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_bad_chunks_are_refused(name: str) -> None:
    """1-D, empty, non-numeric or wrongly sized chunks raise, naming the problem."""
    rule = make_merge_rule(name)
    state = make_state(0, [1, 2])
    for bad in [np.zeros(3), np.zeros((0, 1)), np.array([["a"]])]:
        with pytest.raises(ValueError, match="2-D numeric array"):
            merge_chunk(rule, state, bad, 0, max_execution_horizon=E)
    with pytest.raises(ValueError, match="3 values per action, the queue 1"):
        merge_chunk(rule, state, np.zeros((4, 3)), 0, max_execution_horizon=E)
    with pytest.raises(ValueError, match="start_index"):
        merge_chunk(rule, state, col(1), -1, max_execution_horizon=E)


@pytest.mark.parametrize("name", list(MERGE_RULES))
@pytest.mark.parametrize("bad_row", [1, 6])
@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_nonfinite_chunks_are_refused_whole(name: str, bad_row: int, bad_value: float) -> None:
    """A chunk with NaN or inf in any row, even one past the horizon (row 6, E = 4), is
    not merged and leaves the rule's memory as it was."""
    rule = make_merge_rule(name)
    state = land(rule, QueueState(), 0, 1000).state
    bad = make_chunk(1, 2000)
    bad[bad_row, 0] = bad_value
    assert nonfinite_rows(bad) == [bad_row]
    result = merge_chunk(rule, state.popped(1), bad, 1, max_execution_horizon=E)
    assert result.outcome == "non-finite"
    assert queue_of(result) == (1, [1001, 1002, 1003])
    # Nothing of the refused chunk is remembered: a later chunk merges as if it never came.
    after = land(rule, state.popped(1), 1, 3000)
    reference_rule = make_merge_rule(name)
    reference_state = land(reference_rule, QueueState(), 0, 1000).state
    reference = land(reference_rule, reference_state.popped(1), 1, 3000)
    assert queue_of(after) == queue_of(reference)


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_stale_episode_is_dropped(name: str) -> None:
    """A chunk computed in an earlier episode changes nothing."""
    state = make_state(0, [5, 6], newest_start=0, episode_id=1)
    result = land(name, state, 0, 1000, episode_id=0)
    assert result.outcome == "stale-episode" and result.state is state


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_chunk_from_future_episode_is_refused(name: str) -> None:
    """A chunk of an episode the queue has not started is a caller error."""
    with pytest.raises(ValueError, match=r"call QueueState\.new_episode"):
        land(name, make_state(0, [5]), 0, 1000, episode_id=1)


@pytest.mark.parametrize("name", list(MERGE_RULES))
def test_after_reset_first_chunk_lands_on_empty_queue(name: str) -> None:
    """After new_episode the queue is empty at 0 and a chunk from 0 is not 'out of order'
    (the previous episode reached 40), and nothing of the old episode is blended in."""
    rule = make_merge_rule(name)
    state = land(rule, QueueState(), 0, 1000).state
    for start in range(1, 41):
        state = land(rule, state.popped(1), start, 1000 + start).state
    assert state.newest_start == 40
    fresh = state.new_episode()
    assert (fresh.episode_id, fresh.action_index, len(fresh.queued), fresh.newest_start) == (
        1,
        0,
        0,
        None,
    )
    result = land(rule, fresh, 0, 5000)
    assert result.outcome == "applied"
    assert queue_of(result) == (0, [5000, 5001, 5002, 5003])


def test_popped_moves_the_index_with_the_queue() -> None:
    """popped(n) executes n queued actions; more than queued is an error."""
    state = make_state(3, [30, 40, 50], newest_start=3)
    assert queue_of(MergeResult(state.popped(2), "applied")) == (5, [50])
    assert state.popped(3).action_index == 6
    assert queue_of(MergeResult(state.popped(0), "applied")) == (3, [30, 40, 50])
    with pytest.raises(ValueError, match="cannot pop 4 actions: 3 queued"):
        state.popped(4)


def test_indexed_actions_between() -> None:
    """between(lo, hi) keeps the rows with index in [lo, hi), clamped to the rows held."""
    rows = IndexedActions(5, col(50, 60, 70))
    assert rows.end_index == 8 and rows.indices.tolist() == [5, 6, 7]
    assert rows.between(6, 100).actions[:, 0].tolist() == [60, 70]
    assert rows.between(6, 100).first_index == 6
    assert (rows.between(0, 5).first_index, len(rows.between(0, 5))) == (5, 0)
    assert (rows.between(9, 12).first_index, len(rows.between(9, 12))) == (8, 0)
    with pytest.raises(ValueError, match="2-D"):
        IndexedActions(0, np.zeros(3))
    with pytest.raises(ValueError, match="first_index"):
        IndexedActions(-1, col(1))


# ---- replace --------------------------------------------------------------------


def test_replace_late_chunk_yields_e_minus_d() -> None:
    """Queue from chunk 0 at index 2; a chunk from 1 replaces from 2 on: E - 1 rows."""
    result = land("replace", make_state(2, [2, 3], newest_start=0), 1, 1000)
    assert queue_of(result) == (2, [1002, 1003, 1004])


def test_replace_early_chunk_keeps_queue_before_start() -> None:
    """Robot at 5 with 5..8 queued; a chunk from 7 keeps 5, 6 and replaces from 7."""
    result = land("replace", make_state(5, [5, 6, 7, 8], newest_start=5), 7, 1000)
    assert queue_of(result) == (5, [5, 6, 1007, 1008, 1009, 1010])
    assert result.state.newest_start == 7


def test_replace_drops_out_of_order_chunk() -> None:
    """A chunk older than the newest merged is dropped; the same start replaces."""
    state = make_state(6, [6, 7, 8], newest_start=5)
    dropped = land("replace", state, 4, 1000)
    assert dropped.outcome == "dropped" and dropped.state is state
    assert queue_of(land("replace", state, 5, 1000)) == (6, [1006, 1007, 1008])


def test_replace_drops_queue_past_a_short_chunk() -> None:
    """A chunk shorter than the queue ends it: everything from s on is replaced."""
    result = land("replace", make_state(2, [2, 3, 4, 5], newest_start=2), 2, 1000, rows=2)
    assert queue_of(result) == (2, [1002, 1003])


# ---- LeRobot's aggregations --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("weighted_average", [707.4, 711.1, 1004]),  # 0.3 * old + 0.7 * new
        ("latest_only", [1002, 1003, 1004]),
        ("average", [511, 516.5, 1004]),  # 0.5 * old + 0.5 * new
        ("conservative", [314.6, 321.9, 1004]),  # 0.7 * old + 0.3 * new
    ],
)
def test_blend_overlap_then_append(name: str, expected: list[float]) -> None:
    """Queue 20, 30 at indices 2, 3; a chunk from 1 (1002, 1003, 1004 after the cut)
    blends indices 2 and 3 and appends index 4."""
    result = land(name, make_state(2, [20, 30], newest_start=0), 1, 1000)
    assert result.outcome == "applied"
    first, values = queue_of(result)
    assert first == 2
    np.testing.assert_allclose(values, expected, rtol=0, atol=1e-3)
    assert result.state.queued.actions.dtype == np.float32


@pytest.mark.parametrize("name", list(BLEND_WEIGHTS))
def test_blend_early_chunk_keeps_old_rows_before_start(name: str) -> None:
    """Robot at 5 with 10, 20, 30 queued (5..7); a chunk from 6 keeps index 5 and blends 6, 7."""
    w = BLEND_WEIGHTS[name]
    result = land(name, make_state(5, [10, 20, 30], newest_start=5), 6, 1000)
    first, values = queue_of(result)
    expected = [10, w * 20 + (1 - w) * 1006, w * 30 + (1 - w) * 1007, 1008, 1009]
    assert first == 5
    np.testing.assert_allclose(values, expected, rtol=0, atol=1e-3)


@pytest.mark.parametrize("name", list(BLEND_WEIGHTS))
def test_blend_drops_out_of_order_chunk(name: str) -> None:
    """An older chunk would take the larger weight as the 'new' side: it is dropped."""
    state = make_state(6, [6, 7, 8], newest_start=5)
    result = land(name, state, 4, 1000)
    assert result.outcome == "dropped" and result.state is state


@pytest.mark.parametrize("name", list(BLEND_WEIGHTS))
def test_blend_ends_queue_at_chunk_end(name: str) -> None:
    """Old actions past the new chunk's last row are dropped (as LeRobot does)."""
    w = BLEND_WEIGHTS[name]
    result = land(name, make_state(2, [10, 20, 30, 40], newest_start=2), 2, 1000, rows=2)
    np.testing.assert_allclose(
        queue_of(result)[1], [w * 10 + (1 - w) * 1002, w * 20 + (1 - w) * 1003], atol=1e-3
    )


def test_latest_only_is_replace() -> None:
    """latest_only gives replace's queue in every case: late, early, short, out of order."""
    cases = [
        (make_state(2, [2, 3], 0), 1, 8),
        (make_state(5, [5, 6, 7, 8], 5), 7, 8),
        (make_state(2, [2, 3, 4, 5], 2), 2, 2),
        (make_state(6, [6, 7, 8], 5), 4, 8),
    ]
    for state, start, rows in cases:
        a, b = (land(n, state, start, 1000, rows=rows) for n in ("latest_only", "replace"))
        assert (queue_of(a), a.outcome) == (queue_of(b), b.outcome)


# ---- temporal ensemble ------------------------------------------------------------


def test_temporal_ensemble_weights_oldest_most() -> None:
    """With m = ln 2 the weights are 1, 1/2, 1/4 (oldest first): exact averages."""
    rule = TemporalEnsemble(decay=math.log(2))
    a = land(rule, QueueState(), 0, 0).state  # 0, 1, 2, 3
    b = land(rule, a.popped(1), 1, 100).state  # 101..104 for 1..4
    first, values = queue_of(MergeResult(b, "applied"))
    assert first == 1
    np.testing.assert_allclose(
        values, [(1 + 50.5) / 1.5, (2 + 51) / 1.5, (3 + 51.5) / 1.5, 104], rtol=1e-6
    )
    c = land(rule, b.popped(1), 2, 200).state  # 202..205 for 2..5
    first, values = queue_of(MergeResult(c, "applied"))
    assert first == 2
    expected = [
        (2 + 102 / 2 + 202 / 4) / 1.75,
        (3 + 103 / 2 + 203 / 4) / 1.75,
        (104 + 204 / 2) / 1.5,
        205,
    ]
    np.testing.assert_allclose(values, expected, rtol=1e-6)


def test_temporal_ensemble_default_decay_is_act() -> None:
    """The default m = 0.01: index 1 holds (0.0 * 1 + 101 * e^-0.01) / (1 + e^-0.01)."""
    rule = make_merge_rule("temporal_ensemble")
    state = land(rule, QueueState(), 0, 0).state
    state = land(rule, state.popped(1), 1, 100).state
    w = math.exp(-0.01)
    assert state.queued.actions[0, 0] == pytest.approx((1 + 101 * w) / (1 + w), rel=1e-6)


def test_temporal_ensemble_keeps_every_prediction_of_long_chunks() -> None:
    """Chunks of 120 rows, one per tick, all played (E = 120): each queued index is the
    exp(-m i)-weighted average of every chunk covering it (up to 120), as ACT keeps;
    max_predictions, when given, keeps only the newest."""
    rows, decay = 120, 0.01
    rng = np.random.default_rng(3)
    chunks = rng.normal(size=(rows + 10, rows, 1)).astype(np.float32)
    for max_predictions in (None, 100):
        rule = TemporalEnsemble(decay=decay, max_predictions=max_predictions)
        state = QueueState()
        for t in range(len(chunks)):
            state = merge_chunk(rule, state, chunks[t], t, max_execution_horizon=rows).state
            if t < len(chunks) - 1:
                state = state.popped(1)
        t = len(chunks) - 1
        # The queued index t + j was predicted by the chunks from t + j - rows + 1 .. t.
        for j in (0, 5, rows - 1):
            index = t + j
            starts = range(max(0, index - rows + 1), t + 1)
            predictions = [float(chunks[s][index - s, 0]) for s in starts]
            if max_predictions is not None:
                predictions = predictions[-max_predictions:]
            weights = np.exp(-decay * np.arange(len(predictions)))
            expected = float(np.dot(weights, predictions) / weights.sum())
            assert state.queued.actions[j, 0] == pytest.approx(expected, abs=1e-6), (
                j,
                max_predictions,
            )
    with pytest.raises(ValueError, match="max_predictions"):
        TemporalEnsemble(max_predictions=0)


def test_temporal_ensemble_out_of_order_chunk_takes_its_place() -> None:
    """Chunks from 0, 2, then a late one from 1: the queue equals the in-order result,
    and neither grows nor shrinks."""
    in_order = TemporalEnsemble(decay=math.log(2))
    state = land(in_order, QueueState(), 0, 0).state
    state = land(in_order, state.popped(1), 1, 100).state
    expected = land(in_order, state.popped(1), 2, 200)

    shuffled = TemporalEnsemble(decay=math.log(2))
    state = land(shuffled, QueueState(), 0, 0).state
    state = land(shuffled, state.popped(2), 2, 200).state
    late = land(shuffled, state, 1, 100)
    assert late.outcome == "applied" and late.state.newest_start == 2
    assert queue_of(late) == queue_of(expected)
    # Its rows past the queue's end (none here: 1 + E = 5 < 6) never extend it.
    short = land(TemporalEnsemble(), make_state(5, [5, 6], newest_start=5), 3, 1000)
    assert queue_of(short)[0] == 5 and len(short.state.queued) == 2


def test_temporal_ensemble_same_start_replaces_its_prediction() -> None:
    """A second chunk from the same index replaces the first one's predictions."""
    rule = TemporalEnsemble(decay=math.log(2))
    state = land(rule, QueueState(), 0, 0).state
    state = land(rule, state.popped(1), 1, 100).state
    state = land(rule, state, 1, 300).state
    np.testing.assert_allclose(queue_of(MergeResult(state, "applied"))[1][0], (1 + 301 / 2) / 1.5)


def test_temporal_ensemble_history_is_bounded() -> None:
    """At most max_predictions per index (the oldest forgotten), queued indices only."""
    rule = TemporalEnsemble(decay=math.log(2), max_predictions=2)
    state = land(rule, QueueState(), 0, 0).state
    state = land(rule, state.popped(1), 1, 100).state
    state = land(rule, state.popped(1), 2, 200).state
    # Index 2 holds (102, 202) only: the prediction 2 from chunk 0 was forgotten.
    assert queue_of(MergeResult(state, "applied"))[1][0] == pytest.approx((102 + 101) / 1.5)
    assert sorted(rule._history) == [2, 3, 4, 5]
    assert all(len(p) <= 2 for p in rule._history.values())
    with pytest.raises(ValueError, match="max_predictions"):
        TemporalEnsemble(max_predictions=0)


# ---- real-time chunking ----------------------------------------------------------


def test_rtc_request_freezes_first_d_actions() -> None:
    """The prefix is the first d queued rows, the remainder the rest; copies, not views."""
    queued = IndexedActions(10, col(10, 11, 12, 13, 14))
    request = rtc_request(queued, 2)
    assert (request.action_index, request.delay) == (10, 2)
    assert request.prefix[:, 0].tolist() == [10, 11]
    assert request.remainder[:, 0].tolist() == [12, 13, 14]
    assert not np.shares_memory(request.prefix, queued.actions)
    wire = request.to_wire()
    assert list(wire) == ["rtc_prefix", "rtc_remainder", "rtc_delay"]
    assert wire["rtc_delay"] == 2 and isinstance(wire["rtc_delay"], int)
    # A queue shorter than d freezes what it has; d = 0 freezes nothing.
    assert rtc_request(queued, 9).delay == 5 and len(rtc_request(queued, 9).remainder) == 0
    assert rtc_request(queued, 0).prefix.shape == (0, 1)
    # Empty parts stay off the wire (an empty queue has no action width).
    assert list(rtc_request(queued, 0).to_wire()) == ["rtc_remainder", "rtc_delay"]
    assert list(rtc_request(IndexedActions.empty(3), 2).to_wire()) == ["rtc_delay"]
    with pytest.raises(ValueError, match="delay_ticks"):
        rtc_request(queued, -1)


def test_rtc_delay_ticks_rounds_up() -> None:
    """Ticks before the reply lands: ceil(round trip x rate), exact on whole ticks."""
    assert rtc_delay_ticks(0.1, 50.0) == 5
    assert rtc_delay_ticks(0.101, 50.0) == 6
    assert rtc_delay_ticks(0.0, 50.0) == 0
    assert rtc_delay_ticks(0.1, 50.0, margin_ticks=1) == 6
    with pytest.raises(ValueError, match="control_hz"):
        rtc_delay_ticks(0.1, 0.0)


def rtc_after(num_popped: int) -> tuple[int, list[float]]:
    """Queue 10..15 at 10 (chunk from 8), freeze d = 2, play `num_popped`, land a chunk
    from 10 tagged 1000 with E = 6."""
    rule = Rtc()
    state = make_state(10, [10, 11, 12, 13, 14, 15], newest_start=8)
    rule.freeze(state.queued, 2, episode_id=0)
    return queue_of(land(rule, state.popped(num_popped), 10, 1000, horizon=6))


def test_rtc_keeps_frozen_prefix_then_chunk() -> None:
    """Landing after the d frozen actions played: the chunk's rows from s + d."""
    assert rtc_after(2) == (12, [1012, 1013, 1014, 1015])


def test_rtc_early_reply_plays_rest_of_prefix_first() -> None:
    """Landing after 1 of 2 frozen actions: frozen 11, then the chunk from 12 (replace
    would have jumped to 1011)."""
    assert rtc_after(1) == (11, [11, 1012, 1013, 1014, 1015])
    assert rtc_after(0) == (10, [10, 11, 1012, 1013, 1014, 1015])


def test_rtc_late_reply_drops_passed_rows() -> None:
    """Landing after 3 actions (one past the prefix): the chunk's rows from 13."""
    assert rtc_after(3) == (13, [1013, 1014, 1015])


def test_rtc_without_frozen_prefix_replaces() -> None:
    """No freeze at the chunk's start (or an empty queue when frozen): plain replace."""
    state = make_state(11, [11, 12, 13], newest_start=8)
    assert queue_of(land(Rtc(), state, 10, 1000)) == queue_of(land("replace", state, 10, 1000))
    rule = Rtc()
    rule.freeze(IndexedActions.empty(0), 3, episode_id=0)
    assert queue_of(land(rule, QueueState(), 0, 1000)) == (0, [1000, 1001, 1002, 1003])


def test_rtc_out_of_order_dropped_and_prefix_forgotten() -> None:
    """An older chunk is dropped; a landing forgets the prefixes frozen before it."""
    rule = Rtc()
    state = make_state(10, [10, 11, 12, 13], newest_start=8)
    rule.freeze(state.queued, 2, episode_id=0)
    assert land(rule, state, 7, 1000).outcome == "dropped"
    # The prefix frozen at 10 is forgotten by the landing from 10's successor (12).
    rule.freeze(state.queued, 2, episode_id=0)
    after = land(rule, state.popped(2), 12, 1000).state
    assert queue_of(MergeResult(after, "applied")) == (12, [1012, 1013, 1014, 1015])
    assert rule._frozen == {}


def test_rtc_forgets_other_episode_and_bounds_pending() -> None:
    """Frozen prefixes die with their episode; at most max_pending are kept."""
    rule = Rtc(max_pending=2)
    rule.freeze(IndexedActions(10, col(10, 11, 12)), 2, episode_id=0)
    fresh = make_state(0, [], episode_id=1)
    assert queue_of(land(rule, fresh, 0, 1000, episode_id=1)) == (0, [1000, 1001, 1002, 1003])
    assert rule._frozen == {}
    for start in (1, 2, 3):
        rule.freeze(IndexedActions(start, col(start, start + 1)), 1, episode_id=1)
    assert sorted(rule._frozen) == [2, 3]
    with pytest.raises(ValueError, match="max_pending"):
        Rtc(max_pending=0)


def test_rtc_joins_a_smooth_trajectory_without_a_seam() -> None:
    """A policy that honours the prefix (its rows 0..d-1 equal it) continues the
    executed trajectory with steps of the policy's own size, whenever the reply lands."""
    step = 1.0
    for played in range(0, 4):
        rule = Rtc()
        state = QueueState(IndexedActions(0, col(*(step * i for i in range(6)))), 0)
        state = state.popped(2)
        request = rule.freeze(state.queued, 2, episode_id=0)
        # Inpainting policy: the frozen rows, then the same slope from there on.
        last = float(request.prefix[-1, 0])
        chunk = col(*request.prefix[:, 0], *(last + step * (i + 1) for i in range(6)))
        executed = [0.0, 1.0] + [float(v) for v in state.queued.actions[:played, 0]]
        state = state.popped(played)
        result = merge_chunk(rule, state, chunk, 2, max_execution_horizon=8)
        trajectory = executed + [float(v) for v in result.state.queued.actions[:, 0]]
        assert np.diff(trajectory).tolist() == [step] * (len(trajectory) - 1), played
