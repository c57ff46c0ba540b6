"""Server-added time per request: a replica of ``armory cluster`` (Ray Serve) against a
plain ``armory serve``.

Both run the mock policy (5 ms + 1 ms per robot) in a process of their own: the plain
server as ``armory serve`` in a child process, the cluster's replica as a Ray Serve
replica (one CPU replica, Ray started by this process). ``--robots`` blocking clients
in this process send the mock's two-camera observation (about 301 KB) back to back for
``--requests`` requests each; the cluster's clients connect through the front door
(one redirect) and then talk to their replica directly. Each server's engine measures
its added time per request (arrival to reply sent, less waiting and the forward pass;
``overhead_ms_p50`` of ``GET /stats``); the clients measure their round trips.
Goal: the replica's p50 within 1 ms of the plain server's.

    python benchmarks/cluster_overhead.py [--requests 300] [--robots 2]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
from armory_client import PolicyClient

from armory.cli import Serve
from armory.cluster.ray_cluster import ClusterConfig, ClusterRunner
from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.policies.mock import MockPolicyConfig

LINEAR = LinearProfileConfig(intercept_s=0.005, slope_s=0.001)
GOAL_MS = 1.0


def observation(config: MockPolicyConfig, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    obs = {
        k: rng.integers(0, 256, size=config.image_shape, dtype=np.uint8) for k in config.image_keys
    }
    obs[config.state_key] = rng.standard_normal(config.state_dim).astype(np.float32)
    return obs


def drive(uri: str, num_robots: int, num_requests: int) -> list[float]:
    """Round trips (ms) of ``num_robots`` clients, each sending back to back."""
    config = MockPolicyConfig()
    trips: list[float] = []
    lock = threading.Lock()

    def robot(i: int) -> None:
        obs = observation(config, i)
        with PolicyClient(f"{uri}/?robot=bench-{i}", request_timeout_s=10.0) as client:
            for _ in range(20):  # warm-up
                client.infer(obs)
            mine = []
            for _ in range(num_requests):
                start = time.perf_counter()
                client.infer(obs)
                mine.append(1e3 * (time.perf_counter() - start))
        with lock:
            trips.extend(mine)

    threads = [threading.Thread(target=robot, args=(i,)) for i in range(num_robots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return trips


def stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as response:
        return json.loads(response.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--robots", type=int, default=2)
    args = parser.parse_args()
    rows = []
    port = free_port()
    plain = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "armory.cli",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "WARNING",
            "policy:mock",
            "--policy.latency-profile",
            "linear",
            "--policy.linear.intercept-s",
            str(LINEAR.intercept_s),
            "--policy.linear.slope-s",
            str(LINEAR.slope_s),
        ],
    )
    try:
        wait_healthy(port)
        trips = drive(f"ws://127.0.0.1:{port}", args.robots, args.requests)
        rows.append(("armory serve", stats(port), trips))
    finally:
        plain.terminate()
        plain.wait(10)
    replica = Serve(
        port=0,
        server=ServerConfig(),
        policy=MockPolicyConfig(latency_profile="linear", linear=LINEAR),
    )
    started = time.perf_counter()
    with ClusterRunner(ClusterConfig(num_replicas=1, port=0), replica) as cluster:
        start_s = time.perf_counter() - started
        address = cluster.addresses()[0]
        assert address is not None
        trips = drive(cluster.uri, args.robots, args.requests)
        rows.append(("armory cluster (Ray Serve replica)", stats(address.openpi_port), trips))
    print(
        f"{args.robots} robots x {args.requests} requests, back to back; "
        f"cluster start {start_s:.1f} s"
    )
    print(f"{'server':<36} {'added p50 ms':>12} {'added p99 ms':>12} {'round trip p50 ms':>18}")
    for name, s, trips in rows:
        print(
            f"{name:<36} {s['overhead_ms_p50']:>12.3f} {s['overhead_ms_p99']:>12.3f} "
            f"{np.percentile(trips, 50):>18.2f}"
        )
    delta = rows[1][1]["overhead_ms_p50"] - rows[0][1]["overhead_ms_p50"]
    print(f"replica - plain, added p50: {delta:+.3f} ms (goal within {GOAL_MS} ms)")


if __name__ == "__main__":
    main()
