"""The client a fleet robot's runtime talks through: a policy client around a policy client.

:class:`FleetClient` tells its robot which observation each request carries
(for freshness) and, when asked, adds the fleet file's network delays on the
client side: it sleeps one uplink delay before sending and one downlink delay
after the reply arrives, each drawn like the simulator draws them (median plus
uniform jitter). On loopback, where the real links take well under a
millisecond, a run then resembles the simulated links; against a server across
a real network, leave the delays out. The runtime measures its round trip
around this client, so the sleeps count as network time everywhere: in the
robot's threshold and in the server's link estimate.

asyncio's timers wake late (the event loop's poll rounds its timeout up to the
millisecond: about 0.75 ms a sleep on Linux), so the client learns that
lateness from the sleeps it makes and asks for that much less.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from armory_client import InferClient
from armory_client.wire.ordering import after

from armory.fleet.robot import SyntheticRobot
from armory.fleet_spec import DelaySpec

_LATENESS_GAIN = 0.1
"""Share of each sleep's error (slept less asked) added to the lateness correction."""


class FleetClient:
    """An `InferClient` that notes each request on its robot and may inject link delays."""

    def __init__(
        self,
        inner: InferClient,
        robot: SyntheticRobot,
        *,
        uplink: DelaySpec | None = None,
        downlink: DelaySpec | None = None,
        rng: np.random.Generator | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``uplink``/``downlink`` None: no injected delay that way."""
        self.inner = inner
        self.robot = robot
        self.uplink = uplink
        self.downlink = downlink
        self._rng = rng or np.random.default_rng()
        self._clock = clock
        self.lateness_s = 0.0
        """How much less than the drawn delay a sleep asks for (learned)."""
        # Done once the latest request has been sent / its reply delivered.
        self._sent: asyncio.Future[None] | None = None
        self._landed: asyncio.Future[None] | None = None

    async def connect(self) -> Any:
        return await self.inner.connect()

    @property
    def metadata(self) -> Any:
        """The inner client's server metadata (what the runtime reads: image inputs,
        pipelining)."""
        return getattr(self.inner, "metadata", None)

    async def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """Overlapping (pipelined) requests keep their order both ways, as on a TCP link:
        jitter never lets a message overtake an earlier one."""
        self.robot.on_send(obs)
        loop = asyncio.get_running_loop()
        sent_before, sent = self._sent, loop.create_future()
        landed_before, landed = self._landed, loop.create_future()
        self._sent, self._landed = sent, landed
        try:
            await self._delay(self.uplink)
            await after(sent_before)
            sent.set_result(None)
            reply = await self.inner.infer(obs)
            await self._delay(self.downlink)
            await after(landed_before)
        finally:
            for future in (sent, landed):
                if not future.done():
                    future.set_result(None)
        return reply

    async def close(self) -> None:
        await self.inner.close()

    async def _delay(self, spec: DelaySpec | None) -> None:
        if spec is None:
            return
        seconds = spec.median_s
        if spec.jitter_s:
            seconds += spec.jitter_s * (2.0 * self._rng.random() - 1.0)
        ask_s = seconds - self.lateness_s
        if ask_s <= 0:
            return
        started_s = self._clock()
        await asyncio.sleep(ask_s)
        # Integral control: the correction grows while sleeps end late on average.
        self.lateness_s += _LATENESS_GAIN * (self._clock() - started_s - seconds)
