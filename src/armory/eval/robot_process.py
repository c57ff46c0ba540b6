"""One simulated robot in its own process: an environment driven by the client runtime.

The process makes its environment once (a renderer stays on the thread that made
it), then takes episode numbers from a shared queue until it gets None. Each
episode is a fresh :class:`~armory_client.RobotRuntime` with its own connection to
the server: the robot ticks at the environment's rate times the time scale, the
environment steps once per tick with the action executed (a held action on an
empty queue after the first chunk; nothing before it), and the episode ends when
the environment terminates or after ``episode_time_s`` of simulated time. Each
result goes back on the results queue as a plain dict.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from armory_client import AsyncPolicyClient, RobotRuntime, RuntimeConfig

from armory.eval.environment import Environment
from armory.eval.groot_client import GrootInferClient
from armory.eval.lerobot_client import LeRobotInferClient, lerobot_layout
from armory.eval.mapping import map_observation, source_inputs
from armory.eval.plan import EvalPlan
from armory.eval.recording import EpisodeRecorder
from armory.eval.results import EpisodeResult
from armory.eval.variation import Axis, scenario

TICKET_SCHEMA = "armory-noise-ticket-v1"
"""Schema name of a ticket record (a noise ticket as :mod:`armory.policies.noise` makes it)."""


@dataclass(frozen=True)
class RobotJob:
    """Everything one robot process needs (sent to it pickled, by the parent)."""

    robot_id: str
    plan: EvalPlan
    """The run's settings (environment, server, episodes, variation, ...)."""
    inputs: Mapping[str, Any]
    """The policy's declared inputs (its metadata frame)."""
    execution_horizon: int
    """The most actions a robot plays of one chunk (at most the policy's chunk)."""
    axes: Mapping[str, Axis]
    """The environment's variation axes."""
    run_info: Mapping[str, Any]
    """Policy, server and scheduler, recorded with each staged episode."""


def scene_seed(seed: int, episode: int) -> int:
    """The environment's own seed of ``episode`` (block and goal placement, ...)."""
    return int(np.random.SeedSequence([seed, episode]).generate_state(1)[0])


class EnvRobot:
    """The `Robot` a runtime drives: steps the environment, ends the episode."""

    def __init__(
        self,
        env: Environment,
        *,
        mapping: Mapping[str, str],
        inputs: Mapping[str, Any],
        max_steps: int,
        recorder: EpisodeRecorder | None = None,
        action_delay_ticks: int = 0,
    ) -> None:
        self.env = env
        self.recorder = recorder
        """Keeps each step's observation and action when the run records."""
        self.runtime: RobotRuntime | None = None
        """Set before the runtime runs; stopped when the episode ends."""
        self._mapping = mapping
        self._inputs = inputs
        self.max_steps = max_steps
        self.num_steps = 0
        self.reward = 0.0
        self.success = False
        self.terminated = False
        self.action_delay_ticks = action_delay_ticks
        self._delay_line: collections.deque[np.ndarray] = collections.deque()
        self.age_ticks_sum = 0
        """Sum over executed actions of the ticks since their chunk's observation."""
        self.num_aged = 0

    @property
    def done(self) -> bool:
        return self.terminated or self.num_steps >= self.max_steps

    def get_observation(self) -> dict[str, Any]:
        """Called by the runtime when it sends an observation."""
        return map_observation(self.env.observation(), self._mapping, self._inputs)

    def send_action(self, action: np.ndarray) -> None:
        """Called by the runtime on each tick with an action: one environment step."""
        if self.done:
            return
        # An added actuator delay: the action sent now reaches the motors k ticks later;
        # until the first one does, the robot holds where it is.
        self._delay_line.append(np.asarray(action))
        if len(self._delay_line) > self.action_delay_ticks:
            action = self._delay_line.popleft()
        else:
            action = self.env.hold_action()
        if self.recorder is not None:
            self.recorder.add(self.env.observation(), action)
        result = self.env.step(action)
        self.num_steps += 1
        self.reward += result.reward
        self.success = self.success or result.success
        self.terminated = result.terminated
        queue = self.runtime.queue if self.runtime is not None else None
        if queue is not None and queue.chunk_start is not None:
            age = max(0, queue.action_index - 1 - queue.chunk_start) + self.action_delay_ticks
            self.age_ticks_sum += age
            self.num_aged += 1
        if self.done and self.runtime is not None:
            self.runtime.stop()


class TicketClient:
    """An `InferClient` that notes the noise ticket each reply names."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.sha256s: set[str] = set()

    @property
    def metadata(self) -> dict[str, Any]:
        return self._client.metadata

    async def connect(self) -> Any:
        return await self._client.connect()

    async def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        reply = await self._client.infer(obs)
        timing = reply.get("policy_timing")
        if isinstance(timing, Mapping) and isinstance(timing.get("noise_sha256"), str):
            self.sha256s.add(timing["noise_sha256"])
        return reply

    async def close(self) -> None:
        await self._client.close()


async def run_episode(job: RobotJob, env: Environment, episode: int) -> EpisodeResult:
    """Reset ``env`` for ``episode`` and run it against the server; returns its record."""
    plan = job.plan
    chosen = scenario(job.axes, plan.variation, episode, plan.scene)
    seed = scene_seed(plan.seed, episode)
    reset = env.reset(seed=seed, episode=episode, scenario=chosen)
    chosen = dataclasses.replace(chosen, not_applied=tuple(reset.not_applied))
    max_steps = max(1, round(plan.episode_time_s * env.control_hz))
    recorder = EpisodeRecorder() if plan.record.enabled else None
    robot = EnvRobot(
        env,
        mapping=plan.mapping,
        # A GR00T robot sends its streams; the door's layout picks the inputs.
        inputs=job.inputs if plan.door != "groot" else {},
        max_steps=max_steps,
        recorder=recorder,
        action_delay_ticks=plan.action_delay_ticks,
    )
    client = TicketClient(_door_client(job, robot))
    control_hz = env.control_hz * plan.time_scale
    # The episode's steps start with its first chunk: allow that wait, then some slack.
    wall_limit_s = 1.5 * max_steps / control_hz + plan.request_timeout_s
    runtime = RobotRuntime(
        robot,
        client,
        RuntimeConfig(
            robot_id=job.robot_id,
            control_hz=control_hz,
            max_execution_horizon=job.execution_horizon,
            request_mode=plan.request_mode,
            merge_rule=plan.merge_rule,
            duration_s=wall_limit_s,
            # Every tick of the episode is kept: the queue trace comes from them.
            history_len=math.ceil(wall_limit_s * control_hz) + 1,
        ),
    )
    robot.runtime = runtime
    started_s = time.monotonic()
    summary = await runtime.run()
    wall_s = time.monotonic() - started_s
    result = EpisodeResult(
        episode=episode,
        robot=job.robot_id,
        scene_seed=seed,
        success=robot.success,
        num_steps=robot.num_steps,
        sim_time_s=robot.num_steps / env.control_hz,
        reward=robot.reward,
        terminated=robot.terminated,
        scenario=dataclasses.asdict(chosen),
        ticket=_ticket(plan.ticket, client.sha256s),
        starvation=summary.starvation,
        num_starved_ticks=summary.num_starved_ticks,
        num_counted_ticks=summary.num_counted_ticks,
        mean_chunk_latency_s=summary.mean_round_trip_s,
        mean_observation_age_s=(
            robot.age_ticks_sum / robot.num_aged / env.control_hz if robot.num_aged else None
        ),
        num_requests=summary.num_requests,
        num_request_errors=summary.num_request_errors,
        num_missed_ticks=summary.num_missed_ticks,
        wall_s=wall_s,
        queue_trace=[tick.actions_left for tick in runtime.stats.ticks],
    )
    if recorder is not None:
        record = {**dataclasses.asdict(result), "task": env.task, **job.run_info}
        recorder.save(plan.record.staging, episode, record)
    return result


def _door_client(job: RobotJob, robot: EnvRobot) -> Any:
    """The robot's client of the door the plan names."""
    plan = job.plan
    timeouts = {
        "connect_timeout_s": plan.connect_timeout_s,
        "request_timeout_s": plan.request_timeout_s,
    }
    if plan.door == "openpi":
        return AsyncPolicyClient(plan.uri, None, api_key=plan.api_key, **timeouts)
    assert plan.door_port is not None  # EvalPlan refuses another door without its port
    host = urlsplit(plan.uri).hostname or "127.0.0.1"
    if plan.door == "groot":
        return GrootInferClient(host, plan.door_port, api_token=plan.api_key, **timeouts)
    layout = lerobot_layout(job.inputs, env=plan.env.name)
    return LeRobotInferClient(
        host,
        plan.door_port,
        layout=layout,
        features=layout.features(robot.get_observation()),
        policy_type=str(job.run_info.get("policy") or "unknown"),
        actions_per_chunk=job.execution_horizon,
        api_key=plan.api_key,
        **timeouts,
    )


def _ticket(chosen: Mapping[str, Any] | None, served: set[str]) -> dict[str, Any] | None:
    """The ticket record of an episode: what the run chose (if it did) and the SHA-256s
    its replies named."""
    if chosen is None and not served:
        return None
    record = {"schema": TICKET_SCHEMA, **(chosen or {})}
    record["served_sha256"] = sorted(served)
    return record


def robot_main(job: RobotJob, episodes: Any, results: Any) -> None:
    """The robot process: run episodes from ``episodes`` (None ends) and put
    ``("episode", dict)`` or ``("error", robot_id, message)`` on ``results``."""
    env: Environment | None = None
    try:
        env = job.plan.env.make()
        if job.plan.door != "groot":
            env.declare_inputs(source_inputs(job.plan.mapping, job.inputs))
        while (episode := episodes.get()) is not None:
            result = asyncio.run(run_episode(job, env, episode))
            results.put(("episode", dataclasses.asdict(result)))
    except BaseException as exc:  # reported to the parent, which stops the run
        detail = traceback.format_exc(limit=3)
        results.put(("error", job.robot_id, f"{type(exc).__name__}: {exc}", detail))
    finally:
        if env is not None:
            env.close()
