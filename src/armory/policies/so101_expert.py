"""The SO-101 pick-and-place expert rolled forward into action chunks.

``lerobot_env_so101.scripted.pick_place.PickPlaceController`` returns one native
action (``[dx, dy, dz, grasp]``) per observation and keeps a phase (hover,
descend, close, lift, ...) that one observation cannot recover. A served policy
returns a chunk, so :class:`So101ChunkExpert` rolls the controller forward on a
kinematic prediction:

- the grasp point moves by ``action x action_scale`` per step and a carried block
  (lift, traverse, lower) rides with it;
- a moving phase ends only on a real observation: when the prediction alone says
  its goal is met, the remaining rows hold the target, so the robot does not
  close its jaws on a predicted position it has not reached (the arm lags its
  target by up to 2 cm);
- the controller's state before each row is kept per action index, and the next
  chunk continues from the state at its own chunk start, so the jaw's close and
  open counts carry over whatever part of the last chunk the robot played.

Chunk rows are absolute targets of the grasp point (world metres) plus the grasp
command, the action space the evaluation environment accepts
(``armory.eval.so101``): a late chunk then still leads through the right places,
and a robot that holds its last action on an empty queue stands still.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

ACTION_DIM = 4
"""Grasp-point target x, y, z (metres, world frame) and grasp command (0 closed, 1 open)."""
PRIVILEGED_STATE_DIM = 12
"""Grasp point (3), the arm's IK target (3), block centre (3), goal (3), in metres."""


@dataclass
class _RobotPlan:
    """One robot's controller states of its current episode, by action index."""

    episode: int
    states: dict[int, Any]


class So101ChunkExpert:
    """Per-robot pick-and-place controllers, each reset when its robot's episode changes."""

    def __init__(self, *, action_horizon: int, action_scale: float | None = None) -> None:
        """Import the environment's controller (raises ImportError naming the package)."""
        try:
            from lerobot_env_so101.policy import DEFAULT_ACTION_SCALE
            from lerobot_env_so101.scripted import pick_place
        except ImportError as exc:
            raise ImportError(
                "policy:expert for so101-pick needs lerobot-env-so101: pip install 'armory[eval]'"
            ) from exc
        self._pick_place = pick_place
        self._carry = (pick_place.Phase.LIFT, pick_place.Phase.TRAVERSE, pick_place.Phase.LOWER)
        self._holds = (pick_place.Phase.CLOSE, pick_place.Phase.OPEN, pick_place.Phase.DONE)
        self.action_horizon = action_horizon
        self.action_scale = DEFAULT_ACTION_SCALE if action_scale is None else action_scale
        self._plans: dict[str, _RobotPlan] = {}

    def chunk(self, robot: str, episode: int, chunk_start: int, state: np.ndarray) -> np.ndarray:
        """Called per observation: the (action_horizon, 4) float32 chunk starting at
        ``chunk_start`` from the privileged ``state`` (:data:`PRIVILEGED_STATE_DIM` values)."""
        state = np.asarray(state, dtype=np.float64)
        if state.shape != (PRIVILEGED_STATE_DIM,):
            raise ValueError(
                f"so101 expert: privileged state must have shape ({PRIVILEGED_STATE_DIM},), "
                f"got {state.shape}"
            )
        grasp, target, block, goal = state[0:3], state[3:6], state[6:9], state[9:12]
        plan = self._plans.get(robot)
        if plan is None or plan.episode != episode:
            plan = self._plans[robot] = _RobotPlan(episode=episode, states={})
        controller = plan.states.get(chunk_start)
        if controller is None:
            # A new episode, or a start past the last plan (a long starvation): the
            # latest state known, else a fresh controller.
            earlier = [index for index in plan.states if index <= chunk_start]
            controller = (
                plan.states[max(earlier)]
                if earlier
                else self._pick_place.PickPlaceController(self.action_scale)
            )
        rows, states = self._roll(controller, grasp, target, block, goal)
        plan.states = {chunk_start + i: s for i, s in enumerate(states)}
        return rows

    def _roll(
        self,
        controller: Any,
        grasp: np.ndarray,
        target: np.ndarray,
        block: np.ndarray,
        goal: np.ndarray,
    ) -> tuple[np.ndarray, list[Any]]:
        """Roll a copy of ``controller`` forward; returns the rows and the controller
        state before each row (and after the last)."""
        current = copy.deepcopy(controller)
        grasp, target, block = grasp.copy(), target.copy(), block.copy()
        rows = np.empty((self.action_horizon, ACTION_DIM), dtype=np.float32)
        states = []
        grip = 1.0
        for i in range(self.action_horizon):
            states.append(copy.deepcopy(current))
            before = current.phase
            trial = copy.deepcopy(current)
            action = trial.act(grasp, block, goal)
            if i > 0 and before not in self._holds and trial.phase is not before:
                # A moving phase ends on a real observation only: hold the target.
                action = np.asarray([0.0, 0.0, 0.0, grip], dtype=np.float32)
            else:
                current = trial
            step = action[:3].astype(np.float64) * self.action_scale
            target = target + step
            grasp = grasp + step
            if current.phase in self._carry:
                block = block + step
            grip = float(action[3])
            rows[i, :3] = target
            rows[i, 3] = grip
        states.append(copy.deepcopy(current))
        return rows, states
