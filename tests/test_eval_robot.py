"""The robot side of armory eval: stepping an environment per tick, the added delay."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from armory.eval.environment import Environment, ResetResult, StepResult
from armory.eval.plan import EvalPlan
from armory.eval.pusht import PushTConfig
from armory.eval.robot_process import EnvRobot
from armory.eval.variation import Scenario


class CountingEnv(Environment):
    """Records the actions it executes; succeeds when it executes the value 3."""

    name = "counting"
    control_hz = 10.0
    action_dim = 1
    task = "count"

    def __init__(self) -> None:
        self.executed: list[float] = []

    def reset(self, *, seed: int, episode: int, scenario: Scenario) -> ResetResult:
        self.executed = []
        return ResetResult()

    def step(self, action: np.ndarray) -> StepResult:
        self.executed.append(float(action[0]))
        return StepResult(reward=0.5, success=float(action[0]) == 3.0, terminated=False)

    def hold_action(self) -> np.ndarray:
        return np.asarray([-1.0])

    def observation(self) -> dict[str, Any]:
        return {"observation.state": np.zeros(1, np.float32), "privileged/x": np.ones(1)}


def test_env_robot_executes_actions_k_ticks_late_and_holds_before_them() -> None:
    """With a 2-tick delay the environment holds twice, then executes the actions in
    order; the step limit ends the episode."""
    env = CountingEnv()
    robot = EnvRobot(env, mapping={}, inputs={}, max_steps=5, action_delay_ticks=2)
    for value in range(10):
        robot.send_action(np.asarray([float(value)]))
    assert env.executed == [-1.0, -1.0, 0.0, 1.0, 2.0]
    assert robot.done and robot.num_steps == 5 and robot.reward == 2.5
    assert not robot.success


def test_env_robot_sends_only_declared_inputs_under_their_mapped_names() -> None:
    """The observation is renamed by the mapping and cut to the declared inputs."""
    robot = EnvRobot(
        CountingEnv(),
        mapping={"observation.state": "state"},
        inputs={"state": {"shape": [1], "dtype": "float32"}},
        max_steps=3,
    )
    assert list(robot.get_observation()) == ["state"]


@pytest.mark.parametrize(
    ("field", "message"),
    [("request_mode", "unknown request mode 'sometimes'"), ("merge_rule", "unknown merge rule")],
)
def test_plan_refuses_an_unknown_request_mode_or_merge_rule(field: str, message: str) -> None:
    """A plan made without the command line is checked too, before any robot starts."""
    plan = {"uri": "ws://127.0.0.1:1", "num_robots": 1, "num_episodes": 1, "seed": 0}
    with pytest.raises(ValueError, match=message):
        EvalPlan(env=PushTConfig(), episode_time_s=1.0, **plan, **{field: "sometimes"})
