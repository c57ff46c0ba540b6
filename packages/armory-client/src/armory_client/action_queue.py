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

`min_execution_horizon` is not enforced here (the server and the request modes
honour it); the queue only exposes how far into its chunk the robot is.
No I/O and no clock: the runtime calls `pop` on its ticks and `apply` when a
reply lands.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["ActionQueue"]


class ActionQueue:
    """One robot's queued actions and counters, for one episode at a time."""

    def __init__(self, *, max_execution_horizon: int, min_execution_horizon: int = 1) -> None:
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
        self.reset()

    def reset(self) -> None:
        """Start a new episode: the index restarts at 0, the queue is emptied, and
        ticks before the episode's first chunk are start-up again, not starvation."""
        self._action_index = 0
        self._queue_end = 0
        self._chunk_start: int | None = None
        self._chunk: np.ndarray | None = None

    # ---- state ---------------------------------------------------------

    @property
    def action_index(self) -> int:
        """Actions executed this episode; the index of the next action to execute."""
        return self._action_index

    @property
    def actions_left(self) -> int:
        """Actions queued (all from the current chunk)."""
        return self._queue_end - self._action_index

    @property
    def chunk_start(self) -> int | None:
        """Action index of the current chunk's first row; None before the first chunk."""
        return self._chunk_start

    @property
    def actions_into_chunk(self) -> int | None:
        """Actions executed since the current chunk's start; None before the first chunk."""
        if self._chunk_start is None:
            return None
        return self._action_index - self._chunk_start

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

    def apply(self, chunk: np.ndarray, start_index: int) -> int:
        """A chunk computed from the observation at `start_index` lands; returns the
        number of its actions now queued (0 when dropped as older than the current one).

        Raises ValueError for a chunk that is not 2-D with at least one row, or that
        starts ahead of the robot (no observation can come from an index not reached).
        """
        if not isinstance(chunk, np.ndarray) or chunk.ndim != 2 or len(chunk) == 0:
            shape = getattr(chunk, "shape", type(chunk).__name__)
            raise ValueError(f"a chunk must be a 2-D array with >= 1 row, got {shape}")
        if not isinstance(start_index, numbers.Integral) or isinstance(start_index, bool):
            raise ValueError(f"start_index must be an int, got {start_index!r}")
        start_index = int(start_index)
        if not 0 <= start_index <= self._action_index:
            raise ValueError(
                f"chunk start {start_index} is outside [0, action index {self._action_index}]"
            )
        if self._chunk_start is not None and start_index < self._chunk_start:
            self.num_chunks_dropped += 1
            return 0
        kept = min(self.max_execution_horizon, len(chunk))
        self._queue_end = max(self._action_index, start_index + kept)
        self._chunk_start = start_index
        self._chunk = chunk
        self.num_chunks_applied += 1
        return self.actions_left

    def pop(self) -> np.ndarray | None:
        """Called once per tick: the action to execute now, or None on a starved tick."""
        if self._chunk is None:
            return None
        self.num_counted_ticks += 1
        if self._action_index >= self._queue_end:
            self.num_starved_ticks += 1
            return None
        assert self._chunk_start is not None
        action = self._chunk[self._action_index - self._chunk_start]
        self._action_index += 1
        self.num_executed += 1
        return action
