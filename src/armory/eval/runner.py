"""``armory eval``'s run: a server (given or started here), N robot processes, the results.

1. Check what can be checked before anything starts: the variation axes and
   ``--scene`` values, the server's reachability, and that one real observation of
   the environment feeds the policy's declared inputs (:mod:`armory.eval.mapping`).
2. Start one process per robot (:mod:`armory.eval.robot_process`); they take
   episode numbers from one queue, so episodes spread over the robots.
3. Collect one record per episode (a progress bar), stop the processes and the
   in-process server, and write ``results.json``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armory_client import ArmoryClientError, AsyncPolicyClient

from armory.eval.groot_client import check_groot_inputs
from armory.eval.lerobot_client import lerobot_layout
from armory.eval.mapping import MappingError, check_mapping, source_inputs
from armory.eval.plan import EvalPlan
from armory.eval.results import EpisodeResult, EvalSummary, summarize
from armory.eval.robot_process import RobotJob, robot_main, scene_seed
from armory.eval.variation import Axis, check_scene, load_axes, scenario

RESULTS_VERSION = 1

_POLL_S = 0.5
"""How often the parent checks its robot processes while it waits for results."""


class EvalError(Exception):
    """The evaluation cannot run as asked; the message says why in one line."""


@dataclass(frozen=True)
class EvalRun:
    """What a run produced."""

    episodes: list[EpisodeResult]
    summary: EvalSummary
    info: dict[str, Any]
    """The run's settings, as written to results.json."""


def axes_of(plan: EvalPlan) -> dict[str, Axis]:
    """The environment's variation axes, with ``--scene`` values checked against them."""
    axes = load_axes(plan.env.name, plan.variation.axes_file)
    check_scene(axes, plan.scene)
    return axes


async def server_metadata(plan: EvalPlan) -> dict[str, Any]:
    """Connect once and read the policy server's metadata frame."""
    client = AsyncPolicyClient(
        plan.uri, None, api_key=plan.api_key, connect_timeout_s=plan.connect_timeout_s
    )
    try:
        await client.connect()
        return client.metadata
    except ArmoryClientError as exc:
        raise EvalError(f"cannot use the policy server at {plan.uri}: {exc}") from exc
    finally:
        await client.close()


def check_environment(
    plan: EvalPlan, axes: Mapping[str, Axis], metadata: Mapping[str, Any]
) -> float:
    """Make the environment here once and check that its first observation feeds the
    policy's declared inputs and that the policy's actions fit it (raises MappingError
    naming every misfit); returns its control rate."""
    inputs = metadata.get("inputs") or {}
    env = plan.env.make()
    try:
        if plan.door != "groot":
            env.declare_inputs(source_inputs(plan.mapping, inputs))
        env.reset(
            seed=scene_seed(plan.seed, 0),
            episode=0,
            scenario=scenario(axes, plan.variation, 0, plan.scene),
        )
        if plan.door == "groot":
            check_groot_inputs(env.observation(), inputs, env=plan.env.name)
        else:
            check_mapping(env.observation(), plan.mapping, inputs, env=plan.env.name)
        if plan.door == "lerobot":
            lerobot_layout(inputs, env=plan.env.name)
        action_dim = metadata.get("action_dim")
        if action_dim != env.action_dim:
            raise MappingError(
                f"the policy returns actions of {action_dim} values; env:{plan.env.name} "
                f"executes {env.action_dim}"
            )
        return env.control_hz
    finally:
        env.close()


@dataclass(frozen=True)
class PreparedEval:
    """A checked plan: one job per robot, and the run's settings for results.json."""

    plan: EvalPlan
    jobs: list[RobotJob]
    info: dict[str, Any]


def prepare(plan: EvalPlan) -> PreparedEval:
    """Check everything that can be checked before a robot starts; raises EvalError (or
    ValueError for a bad ``--scene`` value or mapping)."""
    axes = axes_of(plan)
    if plan.record.enabled:
        plan.record.check()
    metadata = asyncio.run(server_metadata(plan))
    horizon = metadata.get("action_horizon")
    if not isinstance(horizon, int) or horizon < 1:
        raise EvalError(f"the server at {plan.uri} names no action_horizon: not an openpi server?")
    if plan.execution_horizon is not None and plan.execution_horizon > horizon:
        raise EvalError(
            f"--execution-horizon {plan.execution_horizon} exceeds the policy's chunk of "
            f"{horizon} actions"
        )
    execution_horizon = plan.execution_horizon or horizon
    inputs = metadata.get("inputs") or {}
    control_hz = check_environment(plan, axes, metadata)
    info = {
        "version": RESULTS_VERSION,
        "env": plan.env.name,
        "env_config": dataclasses.asdict(plan.env),
        "control_hz": control_hz,
        "server": plan.uri,
        "policy": metadata.get("policy"),
        "action_horizon": horizon,
        "scheduler": (metadata.get("armory") or {}).get("scheduler"),
        "robots": plan.num_robots,
        "episodes": plan.num_episodes,
        "episode_time_s": plan.episode_time_s,
        "seed": plan.seed,
        "time_scale": plan.time_scale,
        "request_mode": plan.request_mode,
        "merge_rule": plan.merge_rule,
        "execution_horizon": execution_horizon,
        "door": plan.door if plan.door_port is None else f"{plan.door} (port {plan.door_port})",
        "action_delay_ticks": plan.action_delay_ticks,
        "mapping": dict(plan.mapping),
        "variation": json.loads(json.dumps(dataclasses.asdict(plan.variation), default=str)),
        "scene": dict(plan.scene),
        "ticket": None if plan.ticket is None else dict(plan.ticket),
        "served_noise_sha256": metadata.get("noise_sha256"),
        **plan.run_info,
    }
    jobs = [
        RobotJob(
            robot_id=f"robot-{i}",
            plan=plan,
            inputs=inputs,
            execution_horizon=execution_horizon,
            axes=axes,
            run_info={k: info.get(k) for k in ("policy", "server", "scheduler", "time_scale")},
        )
        for i in range(plan.num_robots)
    ]
    return PreparedEval(plan=plan, jobs=jobs, info=info)


def run_eval(
    prepared: PreparedEval, *, on_episode: Callable[[EpisodeResult], None] | None = None
) -> EvalRun:
    """Run the robots of ``prepared`` until every episode has its record."""
    episodes = _run_robots(prepared.jobs, prepared.plan.num_episodes, on_episode)
    episodes.sort(key=lambda r: r.episode)
    return EvalRun(episodes=episodes, summary=summarize(episodes), info=prepared.info)


def _run_robots(
    jobs: list[RobotJob],
    num_episodes: int,
    on_episode: Callable[[EpisodeResult], None] | None,
) -> list[EpisodeResult]:
    """One spawned process per job; episodes 0..num_episodes-1 from one queue."""
    context = multiprocessing.get_context("spawn")
    todo = context.Queue()
    done = context.Queue()
    for episode in range(num_episodes):
        todo.put(episode)
    for _ in jobs:
        todo.put(None)
    processes = [
        context.Process(target=robot_main, args=(job, todo, done), name=job.robot_id, daemon=True)
        for job in jobs
    ]
    for process in processes:
        process.start()
    results: list[EpisodeResult] = []
    try:
        while len(results) < num_episodes:
            try:
                message = done.get(timeout=_POLL_S)
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    codes = sorted({p.exitcode for p in processes}, key=str)
                    raise EvalError(
                        f"every robot process ended after {len(results)} of {num_episodes} "
                        f"episodes (exit codes {codes}; their stderr says why)"
                    ) from None
                continue
            if message[0] == "error":
                _, robot, error, detail = message
                raise EvalError(f"{robot} failed: {error}\n{detail}")
            result = EpisodeResult(**message[1])
            results.append(result)
            if on_episode is not None:
                on_episode(result)
    finally:
        _stop(processes)
    return results


def _stop(processes: list[Any], timeout_s: float = 10.0) -> None:
    """Wait for every process to end (they do once the queue is empty); end stragglers."""
    deadline_s = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(0.0, deadline_s - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(timeout_s)


def write_results(run: EvalRun, out_dir: Path) -> Path:
    """Write ``results.json`` (run settings, summary, every episode) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    body = {
        "run": run.info,
        "summary": dataclasses.asdict(run.summary),
        "episodes": [dataclasses.asdict(r) for r in run.episodes],
    }
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    return path
