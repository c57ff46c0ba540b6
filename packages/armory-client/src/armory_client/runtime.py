"""The robot runtime: plays an action queue at `control_hz` and asks a policy server
for chunks, in one of the request modes, without ever blocking its ticks.

Each tick (at ``t0 + n / control_hz`` on a monotonic clock, so timing never
drifts) the runtime

1. pops the next queued action and sends it to the robot (nothing on a starved tick);
2. asks the request mode whether to send an observation now; if so it takes one
   from the robot, attaches the queue state (`RobotState`) and sends it from a
   background task, or, while a request is in flight, keeps it as the newest
   waiting observation, sent when the reply lands if the mode still wants it.
   Every-tick against a server that allows pipelining sends it at once instead:
   the server keeps each robot's newest observation and answers the ones it
   replaced "deferred".

A reply is merged into the queue at the chunk start the server names (an
upstream openpi server names none: the index the observation was sent with) by
the merge rule `RuntimeConfig.merge_rule` names (`merge.MERGE_RULES`; the default
``replace`` is Armory's replace-from-index rule). With ``rtc`` each request
carries the actions frozen for the ticks its round trip will take (`merge.Rtc`).

Every action passes the safety layer (`RuntimeConfig.safety`, `safety.SafetyLayer`)
on its way to `Robot.send_action`: limits clip, a jump or a bad action stops, and
a starved tick sends the last action again by default (or a safe action, or
nothing). A `SafetyStop`, or `RobotRuntime.estop`, stops the runtime at once and
`run` raises the `SafetyStop`.

When the server's metadata declares image inputs (`image_prep.image_specs`), camera
images are cast and resized to them before sending (`RuntimeConfig.prepare_images`),
and JPEG-encoded at `RuntimeConfig.jpeg_quality` for keys the server decodes.

A tick that runs more than a full period late skips the missed slots (counted)
rather than playing actions in a burst.

A chunk holding NaN or inf is refused whole when it lands (never merged, even when
its bad rows would be cut or replaced), counted (`RuntimeSummary.num_chunks_nonfinite`)
and logged with the rows at fault; the robot plays on from its queue.

Request errors (timeouts, lost connections, server error messages, malformed
replies) are counted and logged, and the robot carries on with its queue; an
observation the codec cannot encode or a refused handshake (e.g. a wrong API
key) cannot fix itself, so it stops the runtime and `run` raises it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import numpy as np

from armory_client.action_queue import ActionQueue
from armory_client.errors import ArmoryClientError, HandshakeRejected
from armory_client.image_prep import ImageSpec, image_specs, prepare_images
from armory_client.merge import Rtc, make_merge_rule, nonfinite_rows, rtc_delay_ticks
from armory_client.request_modes import (
    RequestMode,
    RoundTripEstimate,
    SendState,
    make_request_mode,
)
from armory_client.robot import Robot
from armory_client.runtime_stats import RequestRecord, RuntimeStats, RuntimeSummary, TickRecord
from armory_client.safety import SafetyConfig, SafetyLayer, SafetyStop
from armory_client.wire.codec import packb
from armory_client.wire.queue_state import RobotState, attach
from armory_client.wire.reply_state import ReplyState, parse_reply

__all__ = ["InferClient", "RobotRuntime", "RuntimeConfig"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """One robot's runtime settings (checked on construction)."""

    robot_id: str
    """Stable name of the robot, unique within the fleet."""
    control_hz: float
    """Ticks (actions) per second."""
    max_execution_horizon: int
    """Most actions of a chunk played (the rest are discarded)."""
    min_execution_horizon: int = 1
    """Fewest actions of a chunk played before a new one may replace it."""
    weight: float = 1.0
    """Relative priority of this robot when the server is short of capacity."""
    # Requests
    request_mode: str = "directed"
    """``every-tick``, ``threshold``, ``directed`` or ``chunk-fraction`` (see
    `request_modes`)."""
    threshold_margin_s: float = 0.05
    """Threshold (and directed fallback): added to the measured round trip."""
    chunk_size_threshold: float = 0.5
    """Chunk-fraction: send every tick while the queue holds at most this fraction of
    `max_execution_horizon` (LeRobot's async client's parameter of the same name)."""
    round_trip_smoothing: float = 0.25
    """Weight of the newest sample in the round-trip moving average."""
    pipelining: bool = True
    """Every-tick: send each tick's observation at once, without waiting for earlier
    replies, when the server allows it (its metadata says ``"pipelining": true``); the
    server keeps the newest. Otherwise one request at a time, with `defer_after_ticks`."""
    defer_after_ticks: float = 2.0
    """Every-tick, one request at a time: the server answers "deferred" to an observation
    no batch took within this many ticks, and a fresh observation replaces it at once."""
    # Actions
    merge_rule: str = "replace"
    """How a landing chunk joins the queued actions, by name (`merge.MERGE_RULES`)."""
    merge_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The rule's parameters by name, e.g. ``{"decay": 0.05}`` for ``temporal_ensemble``
    (ACT's ``temporal_ensemble_coeff``) or ``{"max_pending": 4}`` for ``rtc``; an option
    the rule does not take is refused."""
    rtc_margin_ticks: int = 1
    """``rtc``: actions frozen beyond the measured round trip (``ceil(rtt * hz)``), so a
    reply that lands a little late still joins the frozen prefix without a seam."""
    safety: SafetyConfig = dataclasses.field(default_factory=SafetyConfig)
    """Limits, jump stop and dry-queue behaviour (default: hold the last action)."""
    # Images
    prepare_images: bool = True
    """Cast and resize the images the server's metadata declares before sending."""
    jpeg_quality: int | None = None
    """JPEG-encode prepared images at this quality (1..100) for keys the server
    decodes (``"jpeg": true`` in its metadata); None sends raw arrays."""
    # Run
    duration_s: float | None = None
    """Stop after this long (tick slots / control_hz); None runs until `stop`."""
    history_len: int = 10_000
    """Newest tick and request records kept (the summary covers the whole run)."""

    def __post_init__(self) -> None:
        # RobotState checks the fields it shares with the config.
        self.robot_state(action_index=0, actions_left=0, chunk_start=None)
        self.make_request_mode()
        RoundTripEstimate(smoothing=self.round_trip_smoothing)
        if not (math.isfinite(self.defer_after_ticks) and self.defer_after_ticks > 0):
            raise ValueError(f"defer_after_ticks must be > 0, got {self.defer_after_ticks}")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and self.duration_s > 0
        ):
            raise ValueError(f"duration_s must be finite and > 0 (or None), got {self.duration_s}")
        if not isinstance(self.history_len, int) or self.history_len < 0:
            raise ValueError(f"history_len must be an int >= 0, got {self.history_len!r}")
        if not isinstance(self.merge_options, Mapping):
            raise ValueError(f"merge_options must be a map, got {self.merge_options!r}")
        make_merge_rule(self.merge_rule, **self.merge_options)
        if (
            not isinstance(self.rtc_margin_ticks, int)
            or isinstance(self.rtc_margin_ticks, bool)
            or self.rtc_margin_ticks < 0
        ):
            raise ValueError(f"rtc_margin_ticks must be an int >= 0, got {self.rtc_margin_ticks!r}")
        if not isinstance(self.pipelining, bool):
            raise ValueError(f"pipelining must be a bool, got {self.pipelining!r}")
        if not isinstance(self.safety, SafetyConfig):
            raise ValueError(f"safety must be a SafetyConfig, got {self.safety!r}")
        if self.jpeg_quality is not None and (
            not isinstance(self.jpeg_quality, int)
            or isinstance(self.jpeg_quality, bool)
            or not 1 <= self.jpeg_quality <= 100
        ):
            raise ValueError(
                f"jpeg_quality must be an int in 1..100 or None, got {self.jpeg_quality!r}"
            )

    def make_request_mode(self) -> RequestMode:
        """The request mode this config names, with its parameters."""
        return make_request_mode(
            self.request_mode,
            margin_s=self.threshold_margin_s,
            chunk_size_threshold=self.chunk_size_threshold,
        )

    def robot_state(self, **fields: Any) -> RobotState:
        """A `RobotState` of this robot with the given per-observation fields."""
        return RobotState(
            robot_id=self.robot_id,
            control_hz=self.control_hz,
            min_execution_horizon=self.min_execution_horizon,
            max_execution_horizon=self.max_execution_horizon,
            weight=self.weight,
            directed=self.request_mode == "directed",
            **fields,
        )


class InferClient(Protocol):
    """What the runtime needs of a policy client (`AsyncPolicyClient` is one)."""

    async def connect(self) -> Any:
        """Called once, before the first tick."""
        ...

    async def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """Called from a background task for each observation sent; returns the reply map.
        A client that counts the connections it opens (``num_connections``, an int) lets
        the runtime leave round trips that waited for a reconnect out of its estimate."""
        ...

    async def close(self) -> None:
        """Called once, when the runtime stops."""
        ...


class RobotRuntime:
    """Drives one robot against one policy client; `run` once, `stop` from any task."""

    def __init__(
        self,
        robot: Robot,
        client: InferClient,
        config: RuntimeConfig,
        *,
        # Safety
        on_safety_stop: Callable[[SafetyStop], None] | None = None,
        # Time (injected by tests)
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self.queue = ActionQueue(
            max_execution_horizon=config.max_execution_horizon,
            min_execution_horizon=config.min_execution_horizon,
            merge_rule=make_merge_rule(config.merge_rule, **config.merge_options),
        )
        self.safety = SafetyLayer(config.safety, on_stop=on_safety_stop)
        """Checks every action before `Robot.send_action` (`on_safety_stop` is told once
        per stop, e.g. to cut motor torque)."""
        self.mode = config.make_request_mode()
        # A streaming mode (every-tick): an observation no batch took within
        # `defer_after_ticks` is answered "deferred", and a fresh one is sent in its place.
        streams = self.mode.streams
        self._defer_after_s = config.defer_after_ticks / config.control_hz if streams else None
        self.round_trip = RoundTripEstimate(smoothing=config.round_trip_smoothing)
        self.stats = RuntimeStats(history_len=config.history_len)
        self.episode_id = 0
        self._robot = robot
        self._client = client
        name_robot = getattr(client, "name_robot", None)
        if callable(name_robot):  # an Armory client: a cluster's front door places it by name
            name_robot(
                config.robot_id,
                control_hz=config.control_hz,
                max_execution_horizon=config.max_execution_horizon,
                weight=config.weight,
            )
        self._clock = clock
        self._sleep = sleep
        # Request state
        self._observation_step = 0
        self._next_request_index: int | None = None
        self._measured: tuple[int, float] | None = None
        """(observation_step, seconds) of this episode's latest request answered with a
        chunk: the round trip the server learns its link delay from."""
        self._pending: tuple[int, dict[str, Any]] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        """Requests awaiting their replies: at most one, or `_max_in_flight` pipelined."""
        self._pipelined = False
        """Every-tick against a server that allows pipelining: send every observation at
        once, without waiting for earlier replies (set on connecting)."""
        self._max_in_flight = 1
        self._consecutive_errors = 0
        self._image_specs: dict[str, ImageSpec] = {}
        # Run state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0_s: float | None = None
        self._started = False
        self._stopping = False
        self._sleeper: asyncio.Future[Any] | None = None
        self._failure: BaseException | None = None

    # ---- control ---------------------------------------------------------

    async def run(self) -> RuntimeSummary:
        """Connect, tick until `stop` or `duration_s`, then cancel the request in flight
        and close the client; returns the summary."""
        if self._started:
            raise RuntimeError("a RobotRuntime runs once; make a new one")
        self._started = True
        self._loop = asyncio.get_running_loop()
        try:
            await self._client.connect()
            self._image_specs = self._declared_images()
            self._pipelined, self._max_in_flight = self._requests_in_flight()
            await self._tick_loop()
        finally:
            await self._shut_down()
        if self._failure is not None:
            raise self._failure
        return self.summary()

    def stop(self) -> None:
        """Ask the running loop to stop (at once, even mid-sleep); safe to call twice."""
        self._stopping = True
        if self._sleeper is not None:
            self._sleeper.cancel()

    def estop(self, reason: str = "e-stop") -> None:
        """Halt playback at once, from any thread: the safety layer refuses every later
        action, the runtime stops, and `run` raises a `SafetyStop` naming `reason`."""
        self.safety.estop(reason)
        loop = self._loop
        if loop is None or loop.is_closed():
            return  # Not running: the latched layer stops the first tick of `run`.
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._halt()
        else:
            loop.call_soon_threadsafe(self._halt)

    def _halt(self) -> None:
        """Stop after a safety stop; `run` raises it."""
        if self._failure is None:
            self._failure = SafetyStop(self.safety.stop_reason or "e-stop")
        self.stop()

    def new_episode(self) -> None:
        """Start a new episode: the queue empties and its index restarts at 0; a reply
        to an earlier episode's observation is discarded when it lands."""
        self.queue.reset()
        self.episode_id += 1
        self._observation_step = 0
        self._next_request_index = None
        self._pending = None
        self._measured = None

    def summary(self) -> RuntimeSummary:
        """The run so far."""
        return self.stats.summary(self.queue, control_hz=self.config.control_hz)

    def trace(self) -> dict[str, Any]:
        """The run so far as a JSON-ready map: the config, the summary, and the kept
        tick and request records (what ``armory-client plot`` draws)."""
        return {
            "version": 1,
            "config": dataclasses.asdict(self.config),
            "summary": dataclasses.asdict(self.summary()),
            "ticks": [dataclasses.asdict(t) for t in self.stats.ticks],
            "requests": [dataclasses.asdict(r) for r in self.stats.requests],
        }

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Write `trace` to `path` as JSON."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.trace(), f)  # inf limits are written as Infinity
            f.write("\n")

    @property
    def in_flight(self) -> bool:
        """Whether a request awaits its reply."""
        return bool(self._requests)

    # ---- ticks -----------------------------------------------------------

    async def _tick_loop(self) -> None:
        """Run ticks on the grid ``t0 + n / control_hz`` until stopped."""
        hz = self.config.control_hz
        duration_s = self.config.duration_s
        num_slots = None if duration_s is None else max(1, math.ceil(duration_s * hz - 1e-9))
        t0_s = self._t0_s = self._clock()
        n = 0
        while not self._stopping and (num_slots is None or n < num_slots):
            late_s = self._clock() - (t0_s + n / hz)
            if late_s < 0:
                await self._sleep_for(-late_s)
                if self._stopping:
                    break
            elif late_s * hz >= 1:
                # A full period late or more: skip to the slot now due.
                due = max(n + 1, math.floor((self._clock() - t0_s) * hz))
                if num_slots is not None:
                    due = min(due, num_slots)
                self.stats.num_missed_ticks += due - n
                n = due
                continue
            try:
                self._tick(n)
            except SafetyStop as exc:
                if self._failure is None:
                    self._failure = exc
                break
            n += 1

    async def _sleep_for(self, delay_s: float) -> None:
        """Sleep with the injected sleep, in a task `stop` can cancel."""
        sleeper = asyncio.ensure_future(self._sleep(delay_s))
        self._sleeper = sleeper
        try:
            await asyncio.wait({sleeper})
        finally:
            self._sleeper = None
            sleeper.cancel()
        if not sleeper.cancelled():
            sleeper.result()

    def _tick(self, n: int) -> None:
        """One tick: play the next action (through the safety layer), then maybe send
        an observation. Raises SafetyStop when the layer stops the robot."""
        counted = self.queue.chunk_start is not None
        action = self.queue.pop()
        safe = self.safety.filter(action)
        if safe is not None:
            self._robot.send_action(safe)
        self.stats.on_tick(
            TickRecord(
                tick=n,
                action_index=self.queue.action_index,
                actions_left=self.queue.actions_left,
                starved=counted and action is None,
            )
        )
        if self.mode.should_send(self._send_state()):
            obs = self._robot.get_observation()
            if len(self._requests) < self._max_in_flight:
                self._send(obs)
            else:
                self._pending = (self.queue.action_index, obs)

    def _send_state(self) -> SendState:
        """What the request mode sees now."""
        return SendState(
            action_index=self.queue.action_index,
            actions_left=self.queue.actions_left,
            chunk_start=self.queue.chunk_start,
            control_hz=self.config.control_hz,
            min_execution_horizon=self.config.min_execution_horizon,
            in_flight=bool(self._requests),
            round_trip_s=self.round_trip.value_s,
            next_request_index=self._next_request_index,
            max_execution_horizon=self.config.max_execution_horizon,
        )

    # ---- requests ----------------------------------------------------------

    def _send(self, obs: Mapping[str, Any]) -> None:
        """Attach the queue state as it is now and send `obs` from a background task."""
        assert len(self._requests) < self._max_in_flight, "too many requests in flight"
        state = self.config.robot_state(
            action_index=self.queue.action_index,
            actions_left=self.queue.actions_left,
            chunk_start=self.queue.chunk_start,
            episode_id=self.episode_id,
            observation_step=self._observation_step,
            round_trip_s=None if self._measured is None else self._measured[1],
            round_trip_step=None if self._measured is None else self._measured[0],
            defer_after_s=None if self._pipelined else self._defer_after_s,
            pipelined=self._pipelined,
        )
        self._observation_step += 1
        if isinstance(self.queue.merge_rule, Rtc):
            delay = rtc_delay_ticks(
                self.round_trip.value_s or 0.0,
                self.config.control_hz,
                margin_ticks=self.config.rtc_margin_ticks,
            )
            frozen = self.queue.freeze(delay)
            obs = {**obs, **frozen.to_wire()}
        sent_s = self._clock() - (self._t0_s if self._t0_s is not None else self._clock())
        task = asyncio.create_task(self._request_chunk(attach(obs, state), state, sent_s=sent_s))
        self._requests.add(task)  # removed by the task itself, or by `_shut_down`

    async def _request_chunk(
        self, payload: dict[str, Any], sent: RobotState, *, sent_s: float
    ) -> None:
        """The background task of one request: send, await the reply, apply it."""
        try:
            record = await self._exchange(payload, sent, sent_s=sent_s)
        except Exception as exc:
            self._failure = exc
            self.stop()
            return
        finally:
            self._requests.discard(asyncio.current_task())  # type: ignore[arg-type]
        self.stats.on_finish(record)
        if (
            record.outcome == "deferred"
            and not self._pipelined
            and self._pending is None
            and not self._stopping
        ):
            # No batch took the observation in time: a fresh one takes its place now
            # rather than at the next tick, so the server is not left without one.
            # (Pipelined, a newer observation replaced it and is at the server already.)
            self._pending = (self.queue.action_index, self._robot.get_observation())
        self._send_pending()

    async def _exchange(
        self, payload: dict[str, Any], sent: RobotState, *, sent_s: float
    ) -> RequestRecord:
        """Prepare the images of `payload`, send it and land its reply; request errors
        become an ``error`` record.

        Raises what cannot fix itself: a CodecError for an observation that cannot be
        encoded, a ValueError for an image that cannot be prepared, HandshakeRejected
        for a refused connection.
        """
        if self.config.prepare_images and self._image_specs:
            payload = prepare_images(
                payload, self._image_specs, jpeg_quality=self.config.jpeg_quality
            )
        # Packed here only to measure it: the client packs it again to send.
        bytes_sent = len(packb(payload))
        self.stats.on_send(bytes_sent)
        record = functools.partial(
            RequestRecord,
            action_index=sent.action_index,
            episode_id=sent.episode_id,
            bytes_sent=bytes_sent,
            sent_s=sent_s,
        )
        start_s = self._clock()
        num_connections = self._num_connections()
        round_trip_s: float | None = None
        reconnected = False
        try:
            reply = await self._client.infer(payload)
            round_trip_s = self._clock() - start_s
            # A (re)connect meanwhile is not part of the link's round trip: the sample
            # neither teaches the estimate nor is reported to the server.
            reconnected = self._num_connections() != num_connections
            actions, reply_state = parse_reply(reply, sent_index=sent.action_index)
            if not reply_state.deferred and not reconnected:
                self.round_trip.update(round_trip_s)
                if sent.episode_id == self.episode_id:
                    self._measured = (sent.observation_step, round_trip_s)
        except HandshakeRejected:
            raise
        except ArmoryClientError as exc:
            self._on_error(exc)
            return record(
                reconnected=reconnected,
                round_trip_s=round_trip_s,
                outcome="error",
                actions_gained=0,
                error=f"{type(exc).__name__}: {exc}",
            )
        if self._consecutive_errors:
            logger.info("%s: requests succeed again", self.config.robot_id)
            self._consecutive_errors = 0
        record = functools.partial(record, round_trip_s=round_trip_s, reconnected=reconnected)
        if reply_state.deferred:
            return record(outcome="deferred", actions_gained=0)
        outcome, gained = self._land(actions, reply_state, sent)
        return record(outcome=outcome, actions_gained=gained)

    def _land(self, actions: np.ndarray, reply: ReplyState, sent: RobotState) -> tuple[str, int]:
        """Apply a chunk answering the observation `sent`; returns (outcome, actions gained)."""
        if sent.episode_id != self.episode_id:
            return "stale-episode", 0
        num_dropped = self.queue.num_chunks_dropped
        num_nonfinite = self.queue.num_chunks_nonfinite
        gained = self.queue.apply(actions, reply.chunk_start)
        if self.queue.num_chunks_nonfinite > num_nonfinite:
            logger.warning(
                "%s: refused the chunk from action index %d: rows %s of %d hold NaN or inf",
                self.config.robot_id,
                reply.chunk_start,
                nonfinite_rows(actions),
                len(actions),
            )
            return "non-finite", 0
        if self.queue.num_chunks_dropped > num_dropped:
            return "dropped", 0
        self._next_request_index = reply.next_request_index
        return "applied", gained

    def _send_pending(self) -> None:
        """After a reply: send the newest waiting observation if the mode still wants it."""
        pending, self._pending = self._pending, None
        if pending is None or self._stopping or not self.mode.should_send(self._send_state()):
            return
        action_index, obs = pending
        # Ticks replace the waiting observation and only ticks move the index.
        assert action_index == self.queue.action_index, (action_index, self.queue.action_index)
        self._send(obs)

    def _num_connections(self) -> int:
        """Connections the client has opened (`AsyncPolicyClient.num_connections`; 0
        for a client that does not count them)."""
        count = getattr(self._client, "num_connections", 0)
        return count if isinstance(count, int) else 0

    def _server_metadata(self) -> Mapping[str, Any]:
        """The metadata the server sent (empty when the client has none, e.g. a test
        double)."""
        try:
            metadata = getattr(self._client, "metadata", None)
        except ArmoryClientError:
            return {}
        return metadata if isinstance(metadata, Mapping) else {}

    def _declared_images(self) -> dict[str, ImageSpec]:
        """The image inputs the server's metadata declares."""
        if not self.config.prepare_images:
            return {}
        return image_specs(self._server_metadata())

    def _requests_in_flight(self) -> tuple[bool, int]:
        """(pipelined, most requests in flight): a streaming mode (every-tick) pipelines
        when the server's metadata allows it (``"pipelining": true`` under ``"armory"``), up
        to its ``max_pipelined_requests``; otherwise one request at a time."""
        if not self.mode.streams or not self.config.pipelining:
            return False, 1
        info = self._server_metadata().get("armory")
        if not isinstance(info, Mapping) or info.get("pipelining") is not True:
            return False, 1
        limit = info.get("max_pipelined_requests")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            return False, 1
        return True, limit

    def _on_error(self, exc: ArmoryClientError) -> None:
        """Log a failed request (a warning for the first of a run of failures)."""
        self._consecutive_errors += 1
        log = logger.warning if self._consecutive_errors == 1 else logger.debug
        log("%s: request failed (%s: %s)", self.config.robot_id, type(exc).__name__, exc)

    async def _shut_down(self) -> None:
        """Stop ticking, cancel the request in flight and close the client."""
        self._stopping = True
        while self._requests:
            tasks = set(self._requests)
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            self._requests -= tasks
        await self._client.close()
