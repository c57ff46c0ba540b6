"""Every-tick over openpi's one-request-per-connection loop: an observation no batch took
within its ``defer_after_s`` is answered "deferred" (no chunk), so the robot's next,
fresher observation can take its place. (Runtimes in both every-tick ways:
test_pipelining.py.)"""

from __future__ import annotations

import asyncio

import numpy as np
from armory_client import ARMORY_KEY, attach
from server_harness import (
    every_tick_state,
    expected_actions,
    hold_the_slot,
    make_obs,
    one_slot_server,
)


def test_an_observation_waiting_past_defer_after_is_answered_deferred() -> None:
    """Robot a holds the only executor slot; robot b's every-tick observation is answered
    "deferred" with no actions, and b's next observation is the one served."""
    # a's batch is held past its expected end: nothing is decided until it ends.
    with one_slot_server() as (policy, server, a, b):

        async def scenario() -> tuple[dict, dict, dict]:
            held = every_tick_state("a", 0, defer_after_s=None)
            task_a = await hold_the_slot(policy, a, attach(make_obs(0), held))
            first = await asyncio.to_thread(
                b.infer, attach(make_obs(1, 0), every_tick_state("b", 0, defer_after_s=0.05))
            )
            policy.allow(2)
            second = await asyncio.to_thread(
                b.infer, attach(make_obs(1, 1), every_tick_state("b", 1, defer_after_s=5.0))
            )
            return await task_a, first, second

        reply_a, first, second = asyncio.run(scenario())
        stats = server.stats()
    assert first[ARMORY_KEY]["deferred"] is True
    assert first[ARMORY_KEY]["chunk_start"] == 0 and first["actions"].shape == (0, 7)
    assert second[ARMORY_KEY]["deferred"] is False
    np.testing.assert_array_equal(second["actions"], expected_actions(policy, make_obs(1, 1)))
    np.testing.assert_array_equal(reply_a["actions"], expected_actions(policy, make_obs(0)))
    assert stats.num_deferred == 1 and stats.num_errors == 0
