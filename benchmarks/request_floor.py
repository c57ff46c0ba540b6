"""The request path at the floor: Armory against a minimal openpi-protocol server.

Both servers speak openpi's WebSocket protocol on 127.0.0.1 and run in this
process, one after the other. The *floor* server does only what any such server
must: decode the msgpack frame, check the declared inputs' shapes, encode a reply
of zeros, send it (no forward pass, no scheduling). Armory serves ``policy:mock``
on a near-zero latency profile. The robots are openpi-style blocking clients (one
frame out, one frame in; two 224x224x3 uint8 images and an 8-float state, about
301 KB a request), each a thread of a child process so that they do not share the
servers' interpreter lock, asking back to back. For Armory the time the reply
reports as its forward pass and scheduling wait (``server_timing``: ``infer_ms`` and
``queue_ms``) is taken off each round trip: what is left is what Armory adds on
the request path. The table prints p50 and p99 of both, the difference and the
ratio. With ``--rounds R`` all servers stay up and each is measured in turn R times
(the floor, then each scheduler, then again): the machine's drift between runs falls
on both alike, and the last column gives each round's own difference of medians.
Goal: +0.3 ms at p50 and +2 ms at p99 at 1 robot, +0.5 ms at p50 at 8.

    python benchmarks/request_floor.py [--requests 400] [--robots 1 8] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from armory_client import packb, unpackb

from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.policies.mock import MockPolicyConfig
from armory.serve import ArmoryServer, ServerThread
from armory.sim.table import format_table

IMAGE_SHAPE = (224, 224, 3)
ACTIONS = np.zeros((10, 7), np.float32)


# ---- the floor server ------------------------------------------------------------


async def _floor_handler(ws: Any) -> None:
    await ws.send(packb({}))
    async for frame in ws:
        obs = unpackb(frame)
        for key in ("observation/image", "observation/wrist_image"):
            if obs[key].shape != IMAGE_SHAPE:
                raise ValueError(key)
        if obs["observation/state"].shape != (8,):
            raise ValueError("observation/state")
        await ws.send(packb({"actions": ACTIONS, "server_timing": {"infer_ms": 0.0}}))


@contextmanager
def floor_server() -> Iterator[int]:
    """The minimal server on an ephemeral port, on its own event loop thread."""
    from websockets.asyncio.server import serve

    loop = asyncio.new_event_loop()
    ready: list[Any] = []
    started = threading.Event()

    async def main() -> None:
        server = await serve(_floor_handler, "127.0.0.1", 0, compression=None, max_size=None)
        ready.append(server)
        started.set()
        await server.serve_forever()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(10)
    server = ready[0]
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        loop.call_soon_threadsafe(server.close)
        thread.join(5)


@contextmanager
def armory_server(scheduler: str) -> Iterator[ServerThread]:
    policy = MockPolicyConfig(
        latency_profile="linear", linear=LinearProfileConfig(intercept_s=1e-4, slope_s=0.0)
    ).make()
    config = ServerConfig(max_batch_size=8, scheduler=scheduler)
    server = ArmoryServer(policy, config, host="127.0.0.1", port=0)
    with ServerThread(server) as thread:
        yield thread


# ---- the robots (child process) ----------------------------------------------------


def robot(port: int, num_requests: int, out: list[float]) -> None:
    """One openpi-style blocking client: per request, the round trip less the server's
    reported forward pass and wait, seconds."""
    from websockets.sync.client import connect

    rng = np.random.default_rng(port)
    obs = {
        "observation/image": rng.integers(0, 256, IMAGE_SHAPE, dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, IMAGE_SHAPE, dtype=np.uint8),
        "observation/state": rng.standard_normal(8).astype(np.float32),
        "prompt": "pick",
    }
    with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as ws:
        ws.recv()
        for i in range(num_requests + 20):
            started = time.perf_counter()
            ws.send(packb(obs))
            reply = unpackb(ws.recv())
            total_s = time.perf_counter() - started
            timing = reply["server_timing"]
            inside_s = (timing.get("infer_ms", 0.0) + timing.get("queue_ms", 0.0)) / 1e3
            if i >= 20:  # warm
                out.append(total_s - inside_s)


def client_main(port: int, num_robots: int, num_requests: int) -> None:
    results: list[list[float]] = [[] for _ in range(num_robots)]
    threads = [
        threading.Thread(target=robot, args=(port, num_requests, results[k]))
        for k in range(num_robots)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps([t for r in results for t in r]))


def measure(port: int, num_robots: int, num_requests: int) -> np.ndarray:
    """Per-request seconds the server added, from the robots in a child process."""
    command = [sys.executable, __file__, "--client", str(port), str(num_robots), str(num_requests)]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return np.asarray(json.loads(out.stdout.strip().splitlines()[-1]))


# ---- main ----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="per robot and round")
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--schedulers", nargs="+", default=["just-in-time", "max-batch"])
    parser.add_argument(
        "--rounds", type=int, default=1, help="floor and Armory measured in turn this often"
    )
    args = parser.parse_args()
    rows = []
    for num_robots in args.robots:
        with contextlib.ExitStack() as servers:
            floor_port = servers.enter_context(floor_server())
            armories = {
                name: servers.enter_context(armory_server(name)) for name in args.schedulers
            }
            rounds: list[dict[str, np.ndarray]] = []
            for _ in range(args.rounds):
                measured = {"floor": measure(floor_port, num_robots, args.requests) * 1e3}
                for name, thread in armories.items():
                    measured[name] = measure(thread.port, num_robots, args.requests) * 1e3
                rounds.append(measured)
            decision_ms = {
                name: thread.stats().decision_ms_mean for name, thread in armories.items()
            }
        floor = np.concatenate([measured["floor"] for measured in rounds])
        f50, f99 = np.percentile(floor, [50, 99])
        for name in args.schedulers:
            armory = np.concatenate([measured[name] for measured in rounds])
            a50, a99 = np.percentile(armory, [50, 99])
            added = [np.median(m[name]) - np.median(m["floor"]) for m in rounds]
            rows.append(
                [
                    str(num_robots),
                    name,
                    f"{f50:.2f}",
                    f"{f99:.2f}",
                    f"{a50:.2f}",
                    f"{a99:.2f}",
                    f"{a50 - f50:+.2f}",
                    f"{a99 - f99:+.2f}",
                    f"{a50 / f50:.2f}",
                    f"{np.median(added):+.2f} ({min(added):+.2f}..{max(added):+.2f})",
                    f"{decision_ms[name]:.3f}",
                ]
            )
    headers = [
        "robots",
        "armory scheduler",
        "floor p50 ms",
        "floor p99 ms",
        "armory p50 ms",
        "armory p99 ms",
        "added p50",
        "added p99",
        "p50 ratio",
        "added p50 by round: median (range)",
        "decision ms",
    ]
    print(format_table(headers, rows))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        client_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
