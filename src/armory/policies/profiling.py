"""Measure a policy's forward pass per batch size, warm: what ``armory profile`` runs.

Each batch size gets ``warmup`` untimed passes, then ``repeats`` timed ones, on random
observations of the policy's declared inputs (a different observation per robot). A
worker policy is timed by the worker's own clock around its model call (what a batch
costs the model, without the copy to and from the worker); any other policy by the wall
time of ``infer_batch``. Peak memory is the worker's as its backend reports it (device
allocations on a GPU, the resident set on the CPU), else this process's resident set.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from armory.core.profile_file import ProfileFile, timing_from_samples
from armory.policies.base import Policy, PolicyMetadata
from armory.policies.worker_policy import WorkerPolicy
from armory.workers.backends.base import peak_rss_bytes

WORKER_TIMED = "the worker's model call (its own clock)"
WALL_TIMED = "infer_batch, wall time"


def example_observations(metadata: PolicyMetadata, num_robots: int, seed: int = 0) -> list[dict]:
    """``num_robots`` random observations of the declared inputs: uniform uint8 images,
    standard-normal float vectors, a short task text per robot; optional non-text inputs
    are left out."""
    rng = np.random.default_rng(seed)
    observations: list[dict[str, Any]] = []
    for robot in range(num_robots):
        obs: dict[str, Any] = {}
        for key, spec in metadata.inputs.items():
            if spec.is_text:
                obs[key] = f"pick up the cube and place it in bin {robot}"
            elif spec.required:
                shape = tuple(1 if dim is None else dim for dim in spec.shape)
                dtype = np.dtype(spec.dtype)
                if dtype.kind in "ui":
                    info = np.iinfo(dtype)
                    obs[key] = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
                else:
                    obs[key] = rng.standard_normal(shape).astype(dtype)
        observations.append(obs)
    return observations


def profile_policy(
    policy: Policy,
    batch_sizes: Iterable[int],
    *,
    warmup: int = 2,
    repeats: int = 10,
    device: str = "",
    options: str = "",
    clock: Callable[[], float] = time.perf_counter,
    on_sample: Callable[[int, float], None] | None = None,
) -> ProfileFile:
    """Time ``policy`` at each of ``batch_sizes`` (see the module docstring)."""
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch sizes must be >= 1, got {sizes}")
    if warmup < 0 or repeats < 1:
        raise ValueError(f"warmup must be >= 0 and repeats >= 1, got {warmup}, {repeats}")
    observations = example_observations(policy.metadata, sizes[-1])
    timings = []
    for size in sizes:
        batch = observations[:size]
        for _ in range(warmup):
            policy.infer_batch(batch)
        samples = [_timed(policy, batch, clock) for _ in range(repeats)]
        if on_sample is not None:
            on_sample(size, float(np.median(samples)))
        timings.append(timing_from_samples(size, samples, _peak_memory(policy)))
    meta = policy.metadata
    is_worker = isinstance(policy, WorkerPolicy)
    return ProfileFile(
        policy=meta.name,
        device=device or str(meta.extra.get("device", "")),
        batches=tuple(timings),
        warmup=warmup,
        timed=WORKER_TIMED if is_worker else WALL_TIMED,
        host=f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        options=options,
    )


def _timed(policy: Policy, batch: Sequence[dict], clock: Callable[[], float]) -> float:
    started = clock()
    chunks = policy.infer_batch(batch)
    elapsed = clock() - started
    if len(chunks) != len(batch):
        raise ValueError(f"the policy returned {len(chunks)} chunks for {len(batch)} robots")
    if isinstance(policy, WorkerPolicy) and policy.last_worker_s is not None:
        return policy.last_worker_s
    return elapsed


def _peak_memory(policy: Policy) -> int | None:
    if isinstance(policy, WorkerPolicy):
        return policy.last_peak_memory_bytes
    return peak_rss_bytes()
