"""Policies in worker processes (numpy mock backend, the server's own interpreter): serving,
crashes, hangs, restarts and start-up failures. Every worker is stopped by the fixture."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from armory_client import PolicyClient
from armory_client.errors import ServerError
from server_harness import running_server

from armory.engine.executor import Executor
from armory.policies.base import Policy
from armory.policies.config import for_server
from armory.policies.mock import MockPolicyConfig
from armory.policies.noise import NoiseConfig, make_noise, save_ticket
from armory.policies.worker_policy import MockWorkerPolicyConfig, WorkerOptions, WorkerPolicy
from armory.workers.backends.mock import worker_mock_actions
from armory.workers.errors import WorkerBatchError, WorkerCrashed, WorkerHung, WorkerStartError

FAULT = "fault"
MakeWorker = Callable[..., WorkerPolicy]


@pytest.fixture
def make_worker() -> Iterator[MakeWorker]:
    """Builds mock-worker policies (fault input on, small images); closes them all after
    the test and checks that no worker process is left."""
    policies: list[WorkerPolicy] = []
    pids: list[int] = []

    def make(**overrides: Any) -> WorkerPolicy:
        options: dict[str, Any] = {
            "fault_key": FAULT,
            "image_shape": (16, 16, 3),
            "intercept_s": 0.0,
            "slope_s": 0.0,
        }
        options.update(overrides)
        policy = MockWorkerPolicyConfig(**options).make()
        policies.append(policy)
        return policy

    def track() -> None:
        for policy in policies:
            if policy.pid is not None and policy.pid not in pids:
                pids.append(policy.pid)

    make.track = track  # type: ignore[attr-defined]
    yield make
    track()
    for policy in policies:
        policy.close()
    for pid in pids:
        assert not _running(pid), f"worker {pid} outlived its policy"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie would still answer; the supervisor reaps every worker it kills.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def make_obs(seed: int, **extra: Any) -> dict[str, Any]:
    """An observation for the fixture's mock inputs, distinct per seed."""
    rng = np.random.default_rng(seed)
    obs: dict[str, Any] = {
        "observation/image": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8),
        "observation/state": rng.standard_normal(8).astype(np.float32),
    }
    obs.update(extra)
    return obs


def expected(policy: WorkerPolicy, obs: dict[str, Any]) -> np.ndarray:
    meta = policy.metadata
    inputs = {key: {} for key in meta.inputs}
    return worker_mock_actions(obs, inputs, meta.action_horizon, meta.action_dim)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


# ---- serving -------------------------------------------------------------------------


def test_worker_answers_each_robot_with_its_own_chunk(make_worker: MakeWorker) -> None:
    """A batch of 5 comes back in order, each chunk the mock's for its own observation;
    the start-up profile seeds latency_points."""
    policy = make_worker()
    meta = policy.metadata
    assert (meta.name, meta.action_horizon, meta.action_dim) == ("mock-worker", 10, 7)
    assert meta.inputs["observation/image"].shape == (16, 16, 3)
    assert meta.inputs[FAULT].is_text and not meta.inputs[FAULT].required
    assert meta.latency_points is not None and set(meta.latency_points) == {1}
    observations = [make_obs(seed) for seed in range(5)]
    chunks = policy.infer_batch(observations)
    assert len(chunks) == 5
    for obs, chunk in zip(observations, chunks, strict=True):
        assert chunk.dtype == np.float32
        np.testing.assert_array_equal(chunk, expected(policy, obs))


def test_profiled_batch_sizes_are_timed_warm(make_worker: MakeWorker) -> None:
    """Each batch size the worker times at start-up runs once untimed first: the first pass
    at a new input shape is often a cold one (here 1 s on top), and a cold time would
    seed the server's profile with a size too dear to run."""
    policy = make_worker(
        intercept_s=0.01, cold_pass_s=1.0, worker=WorkerOptions(profile_batch_sizes=(1, 4))
    )
    points = policy.metadata.latency_points
    assert points is not None and set(points) == {1, 4}
    assert max(points.values()) < 0.5, points


def test_warmed_batch_sizes_meet_no_cold_pass_while_serving(make_worker: MakeWorker) -> None:
    """Every size up to the max batch runs once at start-up: no batch while serving pays
    the first, cold, pass at its size (1 s here; the warm ones take about 10 ms)."""
    policy = make_worker(
        intercept_s=0.01, cold_pass_s=1.0, worker=WorkerOptions(warmup_batch_sizes=(1, 2, 3, 4))
    )
    for size in (4, 1, 3, 2):
        started = time.perf_counter()
        policy.infer_batch([make_obs(seed) for seed in range(size)])
        assert time.perf_counter() - started < 0.5, size


def test_a_server_warms_every_batch_size_of_a_worker_unless_told_otherwise() -> None:
    """``armory serve`` and ``armory eval`` make a worker policy for their max batch: warm-up
    sizes 1..max unless given (empty: none); a policy without a worker is left alone."""
    config = MockWorkerPolicyConfig()
    assert config.worker.warmup_batch_sizes is None
    assert for_server(config, 5).worker.warmup_batch_sizes == (1, 2, 3, 4, 5)
    given = MockWorkerPolicyConfig(worker=WorkerOptions(warmup_batch_sizes=()))
    assert for_server(given, 5) == given
    assert for_server(MockPolicyConfig(), 5) == MockPolicyConfig()
    with pytest.raises(ValueError, match="warmup_batch_sizes must be >= 1"):
        WorkerOptions(warmup_batch_sizes=(0, 2))


def test_a_servers_profile_is_not_priced_out_by_cold_passes(make_worker: MakeWorker) -> None:
    """Served through a server, every batch size's first pass runs 1 s cold; the learned
    profile holds each back until a second pass at that size says whether it was, and no
    size ends up priced at its cold pass."""
    policy = make_worker(intercept_s=0.01, slope_s=0.002, cold_pass_s=1.0)
    robots = [[make_obs(100 * robot + step) for step in range(6)] for robot in range(4)]
    with running_server(policy, max_batch_size=4) as server:
        run_robots(server.port, robots)
        stats = server.stats()
    assert sum(stats.batch_size_counts.values()) >= 6
    assert max(stats.latency_points_s.values()) < 0.5, stats.latency_points_s


def test_four_robots_through_a_server(make_worker: MakeWorker) -> None:
    """Four openpi clients at once through ArmoryServer: every reply is its robot's chunk."""
    policy = make_worker(intercept_s=0.01)
    robots = [[make_obs(100 * robot + step) for step in range(3)] for robot in range(4)]
    replies = serve_robots(policy, robots)
    for observations, chunks in zip(robots, replies, strict=True):
        for obs, chunk in zip(observations, chunks, strict=True):
            np.testing.assert_array_equal(chunk, expected(policy, obs))


def serve_robots(
    policy: Policy, robots: list[list[dict[str, Any]]], timeout_s: float = 60.0
) -> list[list[np.ndarray]]:
    """Serve ``policy`` on a server and run its robots (:func:`run_robots`); every robot's
    received chunks, in order."""
    with running_server(policy) as server:
        return run_robots(server.port, robots, timeout_s)


def run_robots(
    port: int, robots: list[list[dict[str, Any]]], timeout_s: float = 60.0
) -> list[list[np.ndarray]]:
    """One openpi client thread per robot against the server on ``port``, each sending its
    observations in turn; every robot's received chunks, in order."""
    replies: list[list[np.ndarray]] = [[] for _ in robots]
    failures: list[BaseException] = []

    def robot(index: int) -> None:
        try:
            # A forward pass on a loaded CI machine can take seconds: the client waits
            # as long as the test does.
            with PolicyClient("127.0.0.1", port, request_timeout_s=timeout_s) as client:
                for obs in robots[index]:
                    replies[index].append(client.infer(obs)["actions"])
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=robot, args=(i,)) for i in range(len(robots))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    assert not failures, failures
    return replies


def test_noise_seed_reaches_the_worker_and_the_metadata(make_worker: MakeWorker) -> None:
    """With a noise seed the worker gets the ticket's array (0.1 x its first row is added)
    and the metadata reports its SHA-256."""
    policy = make_worker(noise=NoiseConfig(seed=5))
    ticket = make_noise(NoiseConfig(seed=5), (10, 7))
    assert ticket is not None
    assert policy.metadata.noise_sha256 == ticket.sha256
    obs = make_obs(1)
    (chunk,) = policy.infer_batch([obs])
    np.testing.assert_allclose(chunk, expected(policy, obs) + 0.1 * ticket.array[0], rtol=1e-6)


def test_noise_ticket_of_the_wrong_shape_fails_at_start(
    make_worker: MakeWorker, tmp_path: Path
) -> None:
    """A ticket that does not fit the worker's noise shape fails make()."""
    path = save_ticket(tmp_path / "t.npz", np.zeros((10, 8), np.float32))
    with pytest.raises(WorkerStartError, match=r"has shape \(10, 8\); expected \(10, 7\)"):
        make_worker(noise=NoiseConfig(ticket=path))


# ---- failures during a batch -----------------------------------------------------------


def test_a_crash_fails_the_whole_batch_in_flight_and_only_it(make_worker: MakeWorker) -> None:
    """A worker that dies mid-batch fails every robot of that batch with WorkerCrashed (no
    one-by-one retry); it is restarted and the next batch is served."""
    policy = make_worker()
    first_pid = policy.pid
    executor = Executor(policy)
    try:
        outcome = asyncio.run(executor.run([make_obs(1), make_obs(2, fault="crash")]))
        assert not outcome.ok
        assert all(isinstance(chunk, WorkerCrashed) for chunk in outcome.chunks)
        assert "died during this batch (killed by SIGKILL)" in str(outcome.chunks[0])
        obs = make_obs(3)
        outcome = asyncio.run(executor.run([obs]))
        assert outcome.ok
        np.testing.assert_array_equal(outcome.chunks[0], expected(policy, obs))
    finally:
        executor._pool.shutdown(wait=True)
    assert policy.pid != first_pid and policy.num_restarts == 1
    assert not _running(first_pid)  # type: ignore[arg-type]


def test_worker_killed_mid_batch_through_a_server(make_worker: MakeWorker) -> None:
    """SIGKILL from outside while a robot's batch computes: that robot gets a clear error,
    the worker is restarted, and the next request (any robot) succeeds."""
    policy = make_worker()
    make_worker.track()  # type: ignore[attr-defined]
    first_pid = policy.pid
    assert first_pid is not None
    errors: list[BaseException] = []
    with running_server(policy) as server:

        def stuck_robot() -> None:
            with PolicyClient("127.0.0.1", server.port) as client:
                try:
                    client.infer(make_obs(1, fault="hang"))
                except ServerError as exc:
                    errors.append(exc)

        thread = threading.Thread(target=stuck_robot)
        thread.start()
        time.sleep(0.5)  # the batch is in the worker, which sleeps
        os.kill(first_pid, signal.SIGKILL)
        thread.join(timeout=10)
        assert len(errors) == 1
        assert "policy worker died during this batch (killed by SIGKILL)" in str(errors[0])
        with PolicyClient("127.0.0.1", server.port) as client:
            obs = make_obs(2)
            np.testing.assert_array_equal(client.infer(obs)["actions"], expected(policy, obs))
    assert policy.pid != first_pid and policy.num_restarts == 1


def test_hung_worker_is_caught_by_the_watchdog(make_worker: MakeWorker) -> None:
    """A worker that never answers is killed at the deadline (WorkerHung) and replaced."""
    policy = make_worker(worker=WorkerOptions(watchdog_min_s=0.5, watchdog_factor=1.0))
    first_pid = policy.pid
    assert policy.deadline_s(1) == 0.5
    started = time.monotonic()
    with pytest.raises(WorkerHung, match=r"passed its 0\.5 s deadline"):
        policy.infer_batch([make_obs(1, fault="hang")])
    assert time.monotonic() - started < 5.0
    assert not _running(first_pid)  # type: ignore[arg-type]
    obs = make_obs(2)
    np.testing.assert_array_equal(policy.infer_batch([obs])[0], expected(policy, obs))
    assert policy.num_restarts == 1


def test_deadline_grows_with_the_learned_latency(make_worker: MakeWorker) -> None:
    """The deadline is max(watchdog_min_s, factor x expected seconds of the batch size)."""
    policy = make_worker(
        intercept_s=0.05, worker=WorkerOptions(watchdog_min_s=0.1, watchdog_factor=20.0)
    )
    assert policy.deadline_s(1) >= 20 * 0.05


def test_model_error_fails_the_batch_and_keeps_the_worker(make_worker: MakeWorker) -> None:
    """A backend exception is a WorkerBatchError (the executor retries each robot alone);
    the same worker serves the next batch."""
    policy = make_worker()
    pid = policy.pid
    with pytest.raises(WorkerBatchError, match="failing this batch on purpose"):
        policy.infer_batch([make_obs(1, fault="raise")])
    policy.infer_batch([make_obs(2)])
    assert policy.pid == pid and policy.num_restarts == 0


def test_worker_that_died_while_idle_is_restarted_before_the_next_batch(
    make_worker: MakeWorker,
) -> None:
    """No robot pays for a worker that died between batches."""
    policy = make_worker()
    first_pid = policy.pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    process = policy._process
    assert process is not None
    wait_until(lambda: not process.alive)
    obs = make_obs(4)
    np.testing.assert_array_equal(policy.infer_batch([obs])[0], expected(policy, obs))
    assert policy.num_restarts == 1


# ---- start-up failures -------------------------------------------------------------------


def test_backend_that_cannot_build_says_why(make_worker: MakeWorker) -> None:
    """The backend's exception reaches make() with the worker's exit reason and output."""
    with pytest.raises(WorkerStartError) as info:
        make_worker(start_error="checkpoint /nope has no config.json")
    text = str(info.value)
    assert "could not start: cannot build the 'mock' backend" in text
    assert "RuntimeError: checkpoint /nope has no config.json" in text
    assert "exit code 1" in text and "Traceback" in text


def test_missing_interpreter_says_so(make_worker: MakeWorker) -> None:
    """An interpreter path that does not exist fails make() naming it."""
    with pytest.raises(WorkerStartError, match=r"cannot run .*'/no/such/python'"):
        make_worker(python="/no/such/python")


def test_interpreter_without_armory_or_numpy_says_why(
    make_worker: MakeWorker, tmp_path: Path
) -> None:
    """A worker that exits at once reports its exit code and its stderr."""
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho 'No module named numpy' >&2\nexit 7\n")
    script.chmod(0o755)
    with pytest.raises(WorkerStartError, match=r"exited before it was ready \(exit code 7\)"):
        make_worker(python=str(script))


def test_start_timeout_kills_a_slow_worker(make_worker: MakeWorker, tmp_path: Path) -> None:
    """A worker that does not say hello within start_timeout_s is killed; make() says so."""
    script = tmp_path / "python"
    pid_file = tmp_path / "pid"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 30\n")
    script.chmod(0o755)
    with pytest.raises(WorkerStartError, match=r"sent no hello within 0\.5 s"):
        make_worker(python=str(script), worker=WorkerOptions(start_timeout_s=0.5))
    assert not _running(int(pid_file.read_text()))


def test_close_stops_the_worker_and_removes_the_arena(make_worker: MakeWorker) -> None:
    """close() asks the worker to stop (exit code 0) and deletes the arena file."""
    policy = make_worker()
    policy.infer_batch([make_obs(1)])
    arena = policy._arena
    assert arena is not None and arena.path.exists()
    process = policy._process
    assert process is not None
    policy.close()
    assert process.exit_reason() == "exit code 0"
    assert not arena.path.exists()
