"""A synthetic robot: observations at its ticks, actions counted, freshness measured.

It is the `Robot` a fleet runner's `RobotRuntime` drives. Beside handing out
observations it keeps what the runtime does not: the age of the observation
behind every action it executes (freshness, as the simulator reports it). For
that it needs two facts: when each observation was taken (it takes them), and
which chunk each action comes from (the runtime's queue says which chunk is
playing; :meth:`SyntheticRobot.on_send` says which observation each chunk start
was sent with).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from armory_client import ARMORY_KEY, ActionQueue

from armory.fleet.observations import ObservationFactory

_RECENT_OBSERVATIONS = 8
"""Observations remembered until sent: a runtime sends one of its newest few."""


class SyntheticRobot:
    """Robot ``index`` of a fleet; its observations come from a shared factory."""

    def __init__(
        self,
        factory: ObservationFactory,
        index: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.factory = factory
        self.index = index
        self._clock = clock
        self._queue: ActionQueue | None = None
        self._step = 0
        # (observation, seconds taken) of the newest observations, newest last.
        self._recent: deque[tuple[dict[str, Any], float]] = deque(maxlen=_RECENT_OBSERVATIONS)
        # Seconds the observation behind each sent chunk start was taken.
        self._taken_by_start: dict[int, float] = {}
        self._playing: tuple[int, float] | None = None
        # Counters
        self.num_observations = 0
        self.num_executed = 0
        self.age_sum_s = 0.0

    def watch(self, queue: ActionQueue) -> None:
        """Called once, with the queue of the runtime that drives this robot."""
        self._queue = queue

    # ---- Robot protocol ------------------------------------------------

    def get_observation(self) -> dict[str, Any]:
        """Called on a tick whose observation the request mode wants."""
        obs = self.factory.make(self.index, self._step)
        self._step += 1
        self.num_observations += 1
        self._recent.append((obs, self._clock()))
        return obs

    def send_action(self, action: np.ndarray) -> None:
        """Called on each tick with a queued action: counts it and its observation's age."""
        self.num_executed += 1
        taken_s = self._taken_s_of_playing_chunk()
        if taken_s is not None:
            self.age_sum_s += self._clock() - taken_s

    # ---- from the client -----------------------------------------------

    def on_send(self, payload: Mapping[str, Any]) -> None:
        """Called as an observation map (``__armory__`` attached) leaves for the server."""
        state = payload.get(ARMORY_KEY)
        if not isinstance(state, Mapping) or "action_index" not in state:
            return
        for obs, taken_s in reversed(self._recent):
            if all(payload.get(key) is value for key, value in obs.items()):
                self._taken_by_start[int(state["action_index"])] = taken_s
                return

    # ---- internals -----------------------------------------------------

    def _taken_s_of_playing_chunk(self) -> float | None:
        queue = self._queue
        if queue is None or queue.chunk_start is None:
            return None
        start = queue.chunk_start
        if self._playing is None or self._playing[0] != start:
            taken_s = self._taken_by_start.get(start)
            if taken_s is None:
                return None
            self._playing = (start, taken_s)
            # Chunks start where observations were sent, in order: older ones are done.
            for old in [s for s in self._taken_by_start if s < start]:
                del self._taken_by_start[old]
        return self._playing[1]
