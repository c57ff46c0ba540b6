"""ActionQueue: the replace-from-index rule, exact numbers."""

from __future__ import annotations

import numpy as np
import pytest
from armory_client import ActionQueue

E = 10


def make_chunk(start: int, rows: int = 20, dim: int = 2) -> np.ndarray:
    """A chunk whose row r holds the value start + r: the action index it belongs to."""
    return np.repeat(np.arange(start, start + rows, dtype=np.float32)[:, None], dim, axis=1)


def make_queue(min_execution_horizon: int = 1) -> ActionQueue:
    return ActionQueue(max_execution_horizon=E, min_execution_horizon=min_execution_horizon)


def pop_values(queue: ActionQueue, n: int) -> list[float | None]:
    """Pop n times; the value of each popped action, None for a starved tick."""
    values = []
    for _ in range(n):
        action = queue.pop()
        values.append(None if action is None else float(action[0]))
    return values


def test_idle_robot_gets_full_execution_horizon() -> None:
    """A chunk landing on an idle robot at its own index yields E actions, in order."""
    queue = make_queue()
    assert queue.apply(make_chunk(0), 0) == E
    assert (queue.actions_left, queue.chunk_start, queue.action_index) == (E, 0, 0)
    assert pop_values(queue, E) == list(range(E))
    assert queue.action_index == E and queue.actions_left == 0


def test_late_chunk_yields_e_minus_d() -> None:
    """A chunk from index 2 landing after 3 more actions ran yields E - 3, rows for 5..11."""
    queue = make_queue()
    queue.apply(make_chunk(0), 0)
    assert pop_values(queue, 2) == [0, 1]
    start = queue.action_index
    assert pop_values(queue, 3) == [2, 3, 4]
    assert queue.apply(make_chunk(start), start) == E - 3
    assert queue.chunk_start == 2 and queue.actions_left == 7
    assert pop_values(queue, 8) == [5, 6, 7, 8, 9, 10, 11, None]


def test_idle_starved_robot_gets_e_from_its_index() -> None:
    """A robot starved at index 10 gets E actions from a chunk started at 10."""
    queue = make_queue()
    queue.apply(make_chunk(0), 0)
    pop_values(queue, E + 2)
    assert queue.action_index == E
    assert queue.apply(make_chunk(E), E) == E
    assert pop_values(queue, E) == list(range(E, 2 * E))


def test_older_chunk_is_dropped_and_counted() -> None:
    """A chunk starting before the current chunk's start changes nothing and returns 0."""
    queue = make_queue()
    queue.apply(make_chunk(0), 0)
    pop_values(queue, 6)
    queue.apply(make_chunk(6), 6)
    assert queue.apply(make_chunk(4), 4) == 0
    assert queue.num_chunks_dropped == 1 and queue.num_chunks_applied == 2
    assert (queue.chunk_start, queue.actions_left) == (6, E)
    assert pop_values(queue, 2) == [6, 7]


def test_same_start_replaces() -> None:
    """A chunk with the current chunk's start is not older: it replaces the queue."""
    queue = make_queue()
    queue.apply(make_chunk(0), 0)
    pop_values(queue, 2)
    assert queue.apply(make_chunk(50), 0) == E - 2
    assert pop_values(queue, 1) == [52]
    assert queue.num_chunks_dropped == 0


def test_max_execution_horizon_cuts_long_chunks() -> None:
    """Of a 50-row chunk only the first E rows are ever played."""
    queue = make_queue()
    assert queue.apply(make_chunk(0, rows=50), 0) == E
    assert pop_values(queue, E + 1) == [*range(E), None]


def test_short_chunk_keeps_only_its_rows() -> None:
    """A chunk with fewer rows than E yields its rows, not E."""
    queue = make_queue()
    assert queue.apply(make_chunk(0, rows=4), 0) == 4
    assert pop_values(queue, 5) == [0, 1, 2, 3, None]


def test_replace_drops_old_actions_past_new_end() -> None:
    """Everything queued from the new start on is replaced, even if the old queue was longer."""
    queue = make_queue()
    queue.apply(make_chunk(0), 0)
    pop_values(queue, 2)
    assert queue.apply(make_chunk(2, rows=3), 2) == 3
    assert pop_values(queue, 4) == [2, 3, 4, None]


def test_chunk_landing_past_its_horizon_yields_nothing() -> None:
    """A chunk that lands E or more actions after its start is applied but yields 0."""
    queue = make_queue()
    queue.apply(make_chunk(0, rows=30), 0)
    pop_values(queue, 3)
    queue.apply(make_chunk(0, rows=30), 0)
    pop_values(queue, E)
    assert queue.action_index == E
    assert queue.apply(make_chunk(0, rows=30), 0) == 0
    assert queue.num_chunks_applied == 3 and queue.actions_left == 0


def test_starved_ticks_count_from_first_chunk_and_keep_index() -> None:
    """Ticks before the first chunk are start-up; a starved tick never advances the index."""
    queue = make_queue()
    assert pop_values(queue, 3) == [None, None, None]
    assert (queue.num_counted_ticks, queue.num_starved_ticks, queue.action_index) == (0, 0, 0)
    queue.apply(make_chunk(0, rows=2), 0)
    assert pop_values(queue, 5) == [0, 1, None, None, None]
    assert queue.action_index == 2
    assert (queue.num_counted_ticks, queue.num_starved_ticks, queue.num_executed) == (5, 3, 2)
    assert queue.starvation == pytest.approx(3 / 5)


def test_min_horizon_exposed_not_enforced() -> None:
    """past_min_horizon turns True min_execution_horizon actions into the chunk; apply
    replaces earlier anyway."""
    queue = make_queue(min_execution_horizon=3)
    assert queue.past_min_horizon and queue.actions_into_chunk is None
    queue.apply(make_chunk(0), 0)
    pop_values(queue, 2)
    assert (queue.actions_into_chunk, queue.past_min_horizon) == (2, False)
    pop_values(queue, 1)
    assert (queue.actions_into_chunk, queue.past_min_horizon) == (3, True)
    queue.apply(make_chunk(1), 1)
    assert queue.actions_into_chunk == 2 and queue.num_chunks_applied == 2


def test_reset_restarts_index_and_start_up() -> None:
    """reset empties the queue, restarts the index, keeps counters, and un-counts start-up."""
    queue = make_queue()
    queue.apply(make_chunk(0), 0)
    pop_values(queue, 4)
    queue.reset()
    assert (queue.action_index, queue.actions_left, queue.chunk_start) == (0, 0, None)
    assert pop_values(queue, 2) == [None, None]
    assert (queue.num_executed, queue.num_counted_ticks, queue.num_starved_ticks) == (4, 4, 0)
    # A start from the old episode is ahead of the restarted index: refused.
    with pytest.raises(ValueError, match="outside"):
        queue.apply(make_chunk(3), 3)
    assert queue.apply(make_chunk(0), 0) == E


@pytest.mark.parametrize(
    ("chunk", "start", "match"),
    [
        (np.zeros(5, np.float32), 0, "2-D"),
        (np.zeros((0, 2), np.float32), 0, "2-D"),
        ([[0.0, 1.0]], 0, "2-D"),
        (np.zeros((5, 2), np.float32), 1, "outside"),
        (np.zeros((5, 2), np.float32), -1, "outside"),
        (np.zeros((5, 2), np.float32), True, "int"),
    ],
)
def test_apply_rejects_bad_input(chunk, start, match) -> None:
    """Non-2-D chunks and starts ahead of the robot (or negative) raise ValueError."""
    with pytest.raises(ValueError, match=match):
        make_queue().apply(chunk, start)


def test_constructor_checks_horizons() -> None:
    """Horizons must be ints >= 1 with min <= max; the message names the field."""
    with pytest.raises(ValueError, match="max_execution_horizon"):
        ActionQueue(max_execution_horizon=0)
    with pytest.raises(ValueError, match="exceeds"):
        ActionQueue(max_execution_horizon=3, min_execution_horizon=4)


def test_rtc_freeze_keeps_the_frozen_prefix_in_every_episode() -> None:
    """Under rtc, actions frozen with `freeze` before a request are played whatever the
    chunk says, in the first episode and after a reset."""
    queue = ActionQueue(max_execution_horizon=50, merge_rule="rtc")
    for _ in range(2):
        queue.apply(np.zeros((20, 1), np.float32), 0)
        request = queue.freeze(4)
        assert request.delay == 4 and request.action_index == 0
        queue.pop()
        queue.pop()
        queue.apply(np.ones((20, 1), np.float32), 0)
        assert queue.queued.actions[:4, 0].tolist() == [0, 0, 1, 1]
        queue.reset()


def test_freeze_needs_the_rtc_rule() -> None:
    """Freezing a queue that merges by another rule is refused, naming that rule."""
    with pytest.raises(ValueError, match="'replace'"):
        make_queue().freeze(2)


def test_nonfinite_chunk_is_refused_and_counted() -> None:
    """A chunk with an inf in a row the horizon would cut is refused whole and counted,
    apart from chunks dropped as out of order."""
    queue = make_queue()
    queue.apply(make_chunk(0), 0)
    bad = make_chunk(0)
    bad[E + 5, 0] = np.inf
    assert queue.apply(bad, 0) == 0
    assert (queue.num_chunks_nonfinite, queue.num_chunks_dropped) == (1, 0)
    assert pop_values(queue, E) == list(range(E))
