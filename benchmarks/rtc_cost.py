"""What LeRobot's RTC guidance costs a forward pass: tiny pi0.5, plain vs guided.

The lerobot backend's ``infer`` (the worker's own code: processors, one
``predict_action_chunk``) on a tiny pi0.5 (random weights, seed 0, 56x56 cameras, a
10-action chunk in 4 denoising steps, noise ticket 5, ``--policy.rtc-schedule
linear``), for batch sizes 1 and 4: every robot plain, then every robot guided by a
previous plan with one delay (3) and horizon (8), so each batch is one LeRobot call.
Plain and guided batches alternate, after a warm-up, so load on a shared machine
falls on both; the table gives the 10th percentile and the median milliseconds.
Runs under LeRobot's interpreter:

    PYTHONPATH=src $(bash scripts/lerobot-env.sh) benchmarks/rtc_cost.py [--repeats 60]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from armory.workers import wire
from armory.workers.backends.lerobot import LeRobotBackend

OVERRIDES = {"chunk_size": 10, "n_action_steps": 10, "num_inference_steps": 4}
RTC = {"schedule": "linear", "execution_horizon": None, "max_guidance_weight": 10.0}


def observation(seed: int, guided: bool) -> dict[str, Any]:
    """A robot's worker-side observation, with a previous plan when ``guided``."""
    rng = np.random.default_rng(seed)
    obs: dict[str, Any] = {
        f"observation.images.{camera}": rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)
        for camera in ("front", "wrist")
    }
    obs |= {"observation.state": rng.uniform(-1, 1, 6).astype(np.float32), "task": "pick"}
    if guided:
        obs[wire.RTC_PREVIOUS] = rng.uniform(-1, 1, (10, 6)).astype(np.float32)
        obs[wire.RTC_DELAY] = np.int64(3)
        obs[wire.RTC_EXECUTION_HORIZON] = np.int64(8)
    return obs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--cpu-threads", type=int, default=1)
    args = parser.parse_args()
    backend = LeRobotBackend(
        type="pi05",
        backbone="tiny",
        image_size=(56, 56),
        overrides=OVERRIDES,
        cpu_threads=args.cpu_threads,
        rtc=RTC,
    )
    backend.set_noise(np.random.default_rng(5).standard_normal((10, 32)).astype(np.float32))
    print("| batch | plain p10 / median ms | guided p10 / median ms |")
    print("| --- | --- | --- |")
    for size in (1, 4):
        batches = {guided: [observation(s, guided) for s in range(size)] for guided in (0, 1)}
        for batch in batches.values():
            for _ in range(3):
                backend.infer(batch)
        times: dict[int, list[float]] = {0: [], 1: []}
        for _ in range(args.repeats):
            for guided, batch in batches.items():
                started = time.perf_counter()
                backend.infer(batch)
                times[guided].append((time.perf_counter() - started) * 1e3)
        cells = [f"{np.percentile(times[g], 10):.1f} / {np.median(times[g]):.1f}" for g in (0, 1)]
        print(f"| {size} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
