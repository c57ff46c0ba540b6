"""Bytes on the wire and round trip for two 640x480 camera frames: raw, resized, resized + JPEG.

One robot sends an observation of two 480x640x3 uint8 frames and an 8-float
state, prepared three ways on the robot (armory_client.image_prep):

- ``raw``: the frames as they are (the server's policy declares 480x640 inputs);
- ``resized``: ``resize_with_pad`` to the policy's 224x224 (aspect kept, padded);
- ``resized+jpeg qQ``: resized, then JPEG at quality Q; the server decodes it.

Each way is timed over three links: loopback, and a delaying proxy
(armory.fleet.delay_proxy) playing a wired LAN hop (100 Mbit/s, 1 ms each way)
and a busy Wi-Fi link (20 Mbit/s, 5 ms each way). The frames are a synthetic
scene (smooth shading, edges and sensor noise of sigma 3), which compresses like
a camera image, not like white noise. The mock policy takes 1 ms, so the round
trip is the wire plus encoding and decoding.

Columns: request bytes (the msgpack frame), the robot's preparation time
(resize and encode, median), the round trip of ``infer`` (median, includes the
server's JPEG decode), and the total per request.

    python benchmarks/wire_images.py [--requests 30] [--qualities 90 75]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from armory_client import AsyncPolicyClient, packb
from armory_client.image_prep import image_specs, prepare_images

from armory.core.latency_profile import LinearProfileConfig
from armory.engine.config import ServerConfig
from armory.fleet.delay_proxy import DelayProxy
from armory.fleet_spec import DelaySpec
from armory.policies.mock import MockPolicyConfig
from armory.serve import ArmoryServer, ServerThread
from armory.sim.table import format_table

FRAME_SHAPE = (480, 640, 3)
POLICY_SHAPE = (224, 224, 3)
KEYS = ("observation/image", "observation/wrist_image")


@dataclass(frozen=True)
class Link:
    name: str
    delay: DelaySpec | None
    rate_bytes_per_s: float | None


LINKS = (
    Link("loopback", None, None),
    Link("LAN 100 Mbit/s, 1 ms", DelaySpec(0.001), 100e6 / 8),
    Link("Wi-Fi 20 Mbit/s, 5 ms", DelaySpec(0.005), 20e6 / 8),
)


def camera_frame(seed: int) -> np.ndarray:
    """A 480x640 RGB scene: smooth shading, a few solid shapes, sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : FRAME_SHAPE[0], 0 : FRAME_SHAPE[1]].astype(np.float32)
    image = np.empty(FRAME_SHAPE, np.float32)
    for c in range(3):
        fy, fx, phase = rng.uniform(0.002, 0.01), rng.uniform(0.002, 0.01), rng.uniform(0, 6)
        image[..., c] = 128 + 60 * np.sin(fy * y + phase) * np.cos(fx * x)
    for _ in range(6):
        y0, x0 = rng.integers(0, 400), rng.integers(0, 560)
        h, w = rng.integers(30, 120), rng.integers(30, 120)
        image[y0 : y0 + h, x0 : x0 + w] = rng.uniform(0, 255, 3)
    image += rng.normal(0.0, 3.0, FRAME_SHAPE)
    return np.clip(image, 0, 255).astype(np.uint8)


def observation(step: int) -> dict[str, Any]:
    obs: dict[str, Any] = {key: camera_frame(10 * step + i) for i, key in enumerate(KEYS)}
    obs["observation/state"] = np.zeros(8, np.float32)
    return obs


def start_server(image_shape: tuple[int, int, int]) -> ServerThread:
    policy = MockPolicyConfig(
        latency_profile="linear",
        linear=LinearProfileConfig(intercept_s=0.001, slope_s=0.0),
        image_keys=KEYS,
        image_shape=image_shape,
    ).make()
    config = ServerConfig(max_batch_size=1)
    return ServerThread(ArmoryServer(policy, config, host="127.0.0.1", port=0)).start()


async def measure(
    port: int, link: Link, quality: int | None, resize: bool, requests: int
) -> tuple[int, float, float]:
    """(request bytes, median prep ms, median round-trip ms) for one way over one link."""
    async with DelayProxy(
        "127.0.0.1",
        port,
        uplink=link.delay,
        downlink=link.delay,
        rate_bytes_per_s=link.rate_bytes_per_s,
    ) as proxy:
        client = AsyncPolicyClient("127.0.0.1", proxy.port, request_timeout_s=30.0)
        await client.connect()
        specs = image_specs(client.metadata)
        prep_ms, rtt_ms, sizes = [], [], []
        for step in range(requests + 2):
            obs = observation(step % 4)
            t0 = time.perf_counter()
            if resize:
                obs = prepare_images(obs, specs, jpeg_quality=quality)
            t1 = time.perf_counter()
            await client.infer(obs)
            t2 = time.perf_counter()
            if step >= 2:  # the first two warm up the link and the server
                prep_ms.append(1e3 * (t1 - t0))
                rtt_ms.append(1e3 * (t2 - t1))
                sizes.append(len(packb(obs)))
        await client.close()
    return int(np.median(sizes)), float(np.median(prep_ms)), float(np.median(rtt_ms))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--qualities", type=int, nargs="+", default=[90, 75])
    args = parser.parse_args()
    ways: list[tuple[str, tuple[int, int, int], bool, int | None]] = [
        ("raw 2x640x480", FRAME_SHAPE, False, None),
        ("resized 2x224x224", POLICY_SHAPE, True, None),
        *[(f"resized+jpeg q{q}", POLICY_SHAPE, True, q) for q in args.qualities],
    ]
    rows = []
    for name, shape, resize, quality in ways:
        server = start_server(shape)
        try:
            for link in LINKS:
                size, prep, rtt = asyncio.run(
                    measure(server.port, link, quality, resize, args.requests)
                )
                rows.append(
                    [
                        name,
                        link.name,
                        f"{size / 1e3:.0f}",
                        f"{prep:.1f}",
                        f"{rtt:.1f}",
                        f"{prep + rtt:.1f}",
                    ]
                )
        finally:
            server.stop()
    print(
        format_table(
            ["payload", "link", "request KB", "prep ms", "round trip ms", "total ms"], rows
        )
    )


if __name__ == "__main__":
    main()
