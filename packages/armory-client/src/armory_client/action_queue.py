"""The robot's action queue: rows of its newest chunk, played one per tick.

The queue model is Armory's (docs/scheduling.md), the same the simulator's
ground-truth robot follows:

- The **action index** counts the actions executed this episode; it advances only
  when an action is popped, never on a starved tick.
- A chunk computed from the observation taken at index ``s`` holds the actions for
  indices ``s, s+1, ...``. Applying it **replaces everything queued from ``s`` on**;
  of its own rows the queue keeps those with index in
  ``[max(s, action_index), s + max_execution_horizon)``. A chunk that lands after
  the robot executed ``d`` more actions yields ``E - d`` actions, one that lands on
  an idle robot yields all ``E``.
- A chunk whose start is older than the current chunk's start is dropped.
- Because every landing replaces from its start on, and a start is never ahead of
  the robot, every queued action belongs to the newest chunk.

The landing itself goes through `merge.merge_chunk` with the queue's merge rule
(`merge.MERGE_RULES`, chosen by name); the default, ``replace``, is the rule above.
Other rules blend a landing chunk into the queued actions (LeRobot's rules, ACT's
temporal ensemble) or keep a frozen prefix (``rtc``): the queued actions then mix
chunks, and `chunk_start` is the newest chunk's start.

`min_execution_horizon` is not enforced here (the server and the request modes
honour it); the queue only exposes how far into its chunk the robot is.
No I/O and no clock: the runtime calls `pop` on its ticks and `apply` when a
reply lands.
"""

from __future__ import annotations

import numbers

import numpy as np

from armory_client.merge import (
    IndexedActions,
    MergeRule,
    QueueState,
    Rtc,
    RtcRequest,
    make_merge_rule,
    merge_chunk,
)

__all__ = ["ActionQueue"]


class ActionQueue:
    """One robot's queued actions and counters, for one episode at a time."""

    def __init__(
        self,
        *,
        max_execution_horizon: int,
        min_execution_horizon: int = 1,
        merge_rule: MergeRule | str = "replace",
    ) -> None:
        for name, value in [
            ("max_execution_horizon", max_execution_horizon),
            ("min_execution_horizon", min_execution_horizon),
        ]:
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if min_execution_horizon > max_execution_horizon:
            raise ValueError(
                f"min_execution_horizon ({min_execution_horizon}) exceeds "
                f"max_execution_horizon ({max_execution_horizon})"
            )
        self.max_execution_horizon = int(max_execution_horizon)
        self.min_execution_horizon = int(min_execution_horizon)
        self.merge_rule = make_merge_rule(merge_rule) if isinstance(merge_rule, str) else merge_rule
        """How a landing chunk joins the queued actions (one object per queue)."""
        self._state = QueueState()
        # Counters, kept across episodes.
        self.num_executed = 0
        """Actions popped."""
        self.num_counted_ticks = 0
        """Ticks (calls to `pop`) since the episode's first chunk was applied."""
        self.num_starved_ticks = 0
        """Counted ticks on which the queue was empty."""
        self.num_chunks_applied = 0
        self.num_chunks_dropped = 0
        """Chunks refused because they started before the current chunk."""
        self.num_chunks_nonfinite = 0
        """Chunks refused because they hold NaN or inf (in any row, even one that would
        have been cut or replaced)."""
        self.reset()

    def reset(self) -> None:
        """Start a new episode: the index restarts at 0, the queue is emptied, and
        ticks before the episode's first chunk are start-up again, not starvation."""
        self._state = self._state.new_episode()
        self.merge_rule.reset()

    # ---- state ---------------------------------------------------------

    @property
    def episode_id(self) -> int:
        """The queue's episode counter (`QueueState.episode_id`); `reset` advances it."""
        return self._state.episode_id

    @property
    def action_index(self) -> int:
        """Actions executed this episode; the index of the next action to execute."""
        return self._state.action_index

    @property
    def actions_left(self) -> int:
        """Actions queued (all from the current chunk under ``replace``)."""
        return len(self._state.queued)

    @property
    def chunk_start(self) -> int | None:
        """Action index of the current (newest) chunk's first row; None before the first."""
        return self._state.newest_start

    @property
    def queued(self) -> IndexedActions:
        """The queued actions; ``queued.first_index`` is the action index."""
        return self._state.queued

    @property
    def actions_into_chunk(self) -> int | None:
        """Actions executed since the current chunk's start; None before the first chunk."""
        if self.chunk_start is None:
            return None
        return self.action_index - self.chunk_start

    @property
    def past_min_horizon(self) -> bool:
        """Whether the robot is at least `min_execution_horizon` actions into its chunk
        (True before the first chunk): only then may a new chunk be served."""
        into = self.actions_into_chunk
        return into is None or into >= self.min_execution_horizon

    @property
    def starvation(self) -> float:
        """Starved ticks / counted ticks (0.0 before any tick is counted)."""
        if not self.num_counted_ticks:
            return 0.0
        return self.num_starved_ticks / self.num_counted_ticks

    # ---- events --------------------------------------------------------

    def freeze(self, delay_ticks: int) -> RtcRequest:
        """Called before sending a request under the ``rtc`` rule: freezes the first
        `delay_ticks` queued actions in this episode (`Rtc.freeze`) and returns the
        fields to send. Raises ValueError when the queue's rule is not ``rtc``."""
        if not isinstance(self.merge_rule, Rtc):
            raise ValueError(
                f"freeze needs the 'rtc' merge rule; this queue merges by {self.merge_rule.name!r}"
            )
        return self.merge_rule.freeze(self.queued, delay_ticks, episode_id=self.episode_id)

    def apply(self, chunk: np.ndarray, start_index: int) -> int:
        """A chunk computed from the observation at `start_index` lands and is merged by
        the queue's rule; returns the number of actions now queued (0 when dropped as
        older than the current one, or refused for holding NaN or inf: each is counted).

        Raises ValueError for a chunk that is not 2-D with at least one row, that
        starts ahead of the robot (no observation can come from an index not reached),
        or (from `merge_chunk`) that is not numeric or differs in width from the queue.
        """
        if not isinstance(chunk, np.ndarray) or chunk.ndim != 2 or len(chunk) == 0:
            shape = getattr(chunk, "shape", type(chunk).__name__)
            raise ValueError(f"a chunk must be a 2-D array with >= 1 row, got {shape}")
        if not isinstance(start_index, numbers.Integral) or isinstance(start_index, bool):
            raise ValueError(f"start_index must be an int, got {start_index!r}")
        start_index = int(start_index)
        if not 0 <= start_index <= self.action_index:
            raise ValueError(
                f"chunk start {start_index} is outside [0, action index {self.action_index}]"
            )
        result = merge_chunk(
            self.merge_rule,
            self._state,
            chunk,
            start_index,
            max_execution_horizon=self.max_execution_horizon,
        )
        if result.outcome == "non-finite":
            self.num_chunks_nonfinite += 1
            return 0
        if result.outcome != "applied":
            self.num_chunks_dropped += 1
            return 0
        self._state = result.state
        self.num_chunks_applied += 1
        return self.actions_left

    def pop(self) -> np.ndarray | None:
        """Called once per tick: the action to execute now, or None on a starved tick."""
        if self.chunk_start is None:
            return None
        self.num_counted_ticks += 1
        queued = self._state.queued
        if not len(queued):
            self.num_starved_ticks += 1
            return None
        action = queued.actions[0]
        self._state = self._state.popped(1)
        self.num_executed += 1
        return action
