"""What a policy worker process adds: ACT through the worker vs the same model in-process.

The same tiny ACT (random weights, seed 0, two cameras, 6-dim state and actions) runs
(a) in-process in LeRobot's interpreter, calling the lerobot backend's ``infer`` directly
(the same adapter code: stacking, uint8 -> float, processors, ``predict_action_chunk``),
and (b) behind ``WorkerPolicy.infer_batch`` from this (the server's) interpreter: arrays
copied once into the shared arena, a JSON message, the reply copied out. For batch sizes
1, 2, 4, 8 the table gives the median milliseconds per batch of each, the worker-added
milliseconds (b - a) and the part of (b) not spent in the worker's backend (its own clock:
the wire, the copies and the wake-ups). Then a server (ArmoryServer with the worker
policy) serves 1, 2, 4 and 8 concurrent openpi clients in turn; the latency profile it
learned (``stats().latency_points_s``) is printed beside the in-process times.

    ARMORY_LEROBOT_PYTHON=$(scripts/lerobot-env.sh) .venv/bin/python \
        benchmarks/worker_overhead.py [--repeats 30] [--image-size 96 96] [--serve-s 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from armory_client import PolicyClient

from armory.engine.config import ServerConfig
from armory.policies.lerobot import LeRobotPolicyConfig, lerobot_python
from armory.policies.worker_policy import WorkerOptions, WorkerPolicy
from armory.serve import ArmoryServer, ServerThread
from armory.sim.table import format_table

BATCH_SIZES = (1, 2, 4, 8)
_SETTLE_S = 0.05
SRC = Path(__file__).resolve().parents[1] / "src"
TINY_ACT = {
    "dim_model": 256,
    "n_heads": 4,
    "dim_feedforward": 1024,
    "n_encoder_layers": 2,
    "n_decoder_layers": 1,
    "chunk_size": 50,
    "n_action_steps": 50,
    "use_vae": False,
}

# Runs in LeRobot's interpreter: the direct, in-process call of the same adapter. Reads a
# batch size per line and answers the seconds of one call, so the two sides take turns.
_IN_PROCESS = """
import json, sys, time
import numpy as np
from armory.workers.backends.lerobot import make_backend
backend = make_backend(json.loads(sys.argv[1]))
rng = np.random.default_rng(0)
def obs():
    out = {}
    for key, spec in backend.info().inputs.items():
        if spec["dtype"] == "uint8":
            out[key] = rng.integers(0, 256, spec["shape"], dtype=np.uint8)
        elif spec["dtype"] == "float32":
            out[key] = rng.standard_normal(spec["shape"]).astype(np.float32)
    return out
batches = {}
print("ready", flush=True)
for line in sys.stdin:
    size = int(line)
    batch = batches.get(size) or batches.setdefault(size, [obs() for _ in range(size)])
    started = time.perf_counter()
    backend.infer(batch)
    print(time.perf_counter() - started, flush=True)
"""


class InProcess:
    """The same ACT in LeRobot's interpreter, called directly, one batch per request."""

    def __init__(self, python: str, image_size: tuple[int, int]) -> None:
        options = {"type": "act", "overrides": TINY_ACT, "image_size": list(image_size)}
        self.process = subprocess.Popen(
            [python, "-c", _IN_PROCESS, json.dumps(options)],
            env={**os.environ, "PYTHONPATH": str(SRC)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stdin is not None
        self._out, self._in = self.process.stdout, self.process.stdin
        if self._out.readline().strip() != "ready":
            raise RuntimeError("the in-process benchmark could not build the model")

    def time_s(self, size: int) -> float:
        self._in.write(f"{size}\n")
        self._in.flush()
        return float(self._out.readline())

    def close(self) -> None:
        self._in.close()
        self.process.wait(timeout=30)


def make_obs(policy: WorkerPolicy, rng: np.random.Generator) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, spec in policy.metadata.inputs.items():
        if spec.dtype == "uint8":
            out[key] = rng.integers(0, 256, spec.shape, dtype=np.uint8)  # type: ignore[arg-type]
        elif spec.dtype == "float32":
            out[key] = rng.standard_normal(spec.shape).astype(np.float32)  # type: ignore[arg-type]
    return out


def measure(policy: WorkerPolicy, direct: InProcess, repeats: int) -> dict[str, dict[int, float]]:
    """Median seconds per batch size: in-process, through the worker, and the worker's part
    outside its backend. The two sides take turns, so drifting load hits both alike."""
    rng = np.random.default_rng(0)
    samples: dict[str, dict[int, list[float]]] = {
        name: {size: [] for size in BATCH_SIZES} for name in ("direct", "worker", "outside")
    }
    batches = {size: [make_obs(policy, rng) for _ in range(size)] for size in BATCH_SIZES}
    for size in BATCH_SIZES:  # warm-up
        direct.time_s(size)
        policy.infer_batch(batches[size])

    def through_worker(size: int) -> None:
        started = time.perf_counter()
        policy.infer_batch(batches[size])
        elapsed = time.perf_counter() - started
        samples["worker"][size].append(elapsed)
        samples["outside"][size].append(elapsed - (policy.last_worker_s or 0.0))

    def in_process(size: int) -> None:
        samples["direct"][size].append(direct.time_s(size))

    for repeat in range(repeats):
        for size in BATCH_SIZES:
            # Alternate who goes first, and pause between them: torch's idle threads spin
            # for a while after a call and would slow whichever side comes right after.
            for run in (in_process, through_worker)[:: 1 if repeat % 2 else -1]:
                time.sleep(_SETTLE_S)
                run(size)
    return {
        name: {size: float(np.median(values)) for size, values in by_size.items()}
        for name, by_size in samples.items()
    }


def serve_and_learn(policy: WorkerPolicy, serve_s: float) -> dict[int, float]:
    """Serve 1, 2, 4, 8 concurrent openpi clients for ``serve_s`` each; the learned profile."""
    server = ArmoryServer(policy, ServerConfig(max_batch_size=max(BATCH_SIZES)), port=0)
    thread = ServerThread(server).start()

    def robot(seed: int, stop_s: float) -> None:
        rng = np.random.default_rng(seed)
        with PolicyClient("127.0.0.1", thread.port) as client:
            while time.monotonic() < stop_s:
                client.infer(make_obs(policy, rng))

    try:
        for num_robots in BATCH_SIZES:
            stop_s = time.monotonic() + serve_s
            robots = [threading.Thread(target=robot, args=(i, stop_s)) for i in range(num_robots)]
            for each in robots:
                each.start()
            for each in robots:
                each.join()
        return dict(server.engine.stats().latency_points_s)
    finally:
        thread.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--image-size", type=int, nargs=2, default=(96, 96))
    parser.add_argument("--serve-s", type=float, default=4.0)
    args = parser.parse_args()
    python = lerobot_python()
    image_size = (args.image_size[0], args.image_size[1])
    config = LeRobotPolicyConfig(
        type="act",
        random_weights=True,
        overrides=json.dumps(TINY_ACT),
        image_size=image_size,
        python=python,
        worker=WorkerOptions(profile_batch_sizes=BATCH_SIZES),
    )
    direct = InProcess(python, image_size)
    policy = config.make()
    try:
        seeded = dict(policy.metadata.latency_points or {})
        medians = measure(policy, direct, args.repeats)
        learned = serve_and_learn(policy, args.serve_s)
    finally:
        policy.close()
        direct.close()

    height, width = image_size
    print(
        f"ACT (dim_model {TINY_ACT['dim_model']}, chunk {TINY_ACT['chunk_size']}, two "
        f"{height}x{width} cameras, CPU), median of {args.repeats}, ms per batch"
    )
    rows = [
        [
            str(size),
            f"{1e3 * medians['direct'][size]:.2f}",
            f"{1e3 * medians['worker'][size]:.2f}",
            f"{1e3 * (medians['worker'][size] - medians['direct'][size]):+.2f}",
            f"{1e3 * medians['outside'][size]:.2f}",
            f"{1e3 * seeded.get(size, float('nan')):.2f}",
            f"{1e3 * learned[size]:.2f}" if size in learned else "-",
        ]
        for size in BATCH_SIZES
    ]
    headers = [
        "batch",
        "in-process",
        "worker",
        "worker-added",
        "outside backend",
        "start-up profile",
        "server learned",
    ]
    print(format_table(headers, rows))
    points = ", ".join(f"{size}: {1e3 * seconds:.1f}" for size, seconds in sorted(learned.items()))
    print(f"server's learned profile after serving (batch size: ms): {points}")


if __name__ == "__main__":
    main()
