"""A Policy whose model runs in a supervised worker process (see docs/workers.md).

:class:`WorkerPolicy` is the server's proxy: ``infer_batch`` copies the batch's arrays
once into a shared arena, sends a small JSON message, and waits for the worker's
answer under a watchdog deadline. A worker that dies or passes the deadline fails
that batch alone (a :class:`~armory.workers.errors.WorkerFailed`, sent to the batch's
robots) and is started again at once; the next batch waits for the new worker. A
worker that cannot start raises :class:`~armory.workers.errors.WorkerStartError` with
its reason and last output, from the constructor (so from ``make()``, before the
server listens).

Real-time chunking: with ``rtc_schedule`` set, each robot's ``rtc_prefix``,
``rtc_remainder`` and ``rtc_delay`` are checked as the server accepts the observation
(:meth:`check_observation`: a bad one refuses that robot before it joins a batch) and
reach the worker as its previous plan, zero-padded to the chunk
(:func:`~armory.policies.rtc_guidance.rtc_guidance`), with its delay and execution
horizon (the worker wire's ``rtc.*`` entries); the backend guides its model with them.
``rtc_prefix`` and ``rtc_remainder`` are then declared as optional inputs.

``policy:mock-worker`` runs the numpy mock backend in a worker on the server's own
interpreter: the worker machinery without torch.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from armory_client.wire import RTC_PREFIX_KEY, RTC_REMAINDER_KEY

from armory.core.latency_profile import LatencyProfile
from armory.policies.base import InputSpec, Policy, PolicyMetadata
from armory.policies.noise import NoiseConfig, NoiseTicket, make_noise
from armory.policies.rtc_guidance import RtcGuidance, rtc_guidance
from armory.workers import wire
from armory.workers.arena import Arena
from armory.workers.errors import (
    WorkerBatchError,
    WorkerCrashed,
    WorkerHung,
    WorkerStartError,
)
from armory.workers.process import (
    WorkerGone,
    WorkerProcess,
    WorkerSpec,
    WorkerTimeout,
    describe_failure,
)

logger = logging.getLogger(__name__)

_ARENA_SLACK = 1.5
"""A grown arena has this many times the bytes the batch that outgrew it needed."""


@dataclass(frozen=True)
class WorkerOptions:
    """How the server starts and watches a policy worker (``--policy.worker.*``)."""

    start_timeout_s: float = 600.0
    """Seconds a worker may take to import, load its model and warm up."""
    watchdog_min_s: float = 10.0
    """A batch may always take this long before the worker counts as hung."""
    watchdog_factor: float = 20.0
    """... or this many times the expected seconds of its batch size, when longer."""
    profile_batch_sizes: tuple[int, ...] = (1,)
    """Batch sizes timed once at start-up (after a warm-up pass); they seed the server's
    latency profile. Empty: no warm-up, no seed."""
    warmup_batch_sizes: tuple[int, ...] | None = None
    """Batch sizes run once, untimed, at start-up (largest first), so that none meets its
    first pass while serving: the first pass at a new input shape often runs cold
    (kernels compiled or tuned, memory allocated), and a batch too large for the device
    fails at start-up rather than when the fleet grows. None: every size up to the
    server's max batch under ``armory serve`` and ``armory eval``, none elsewhere."""

    def __post_init__(self) -> None:
        for name in ("start_timeout_s", "watchdog_min_s", "watchdog_factor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"worker {name} must be > 0, got {getattr(self, name)}")
        if any(size < 1 for size in self.profile_batch_sizes):
            raise ValueError(f"profile_batch_sizes must be >= 1, got {self.profile_batch_sizes}")
        if any(size < 1 for size in self.warmup_batch_sizes or ()):
            raise ValueError(f"warmup_batch_sizes must be >= 1, got {self.warmup_batch_sizes}")

    def for_server(self, max_batch_size: int) -> WorkerOptions:
        """These options for a server of ``max_batch_size``: warm-up sizes, unless given,
        every size up to it."""
        if self.warmup_batch_sizes is not None:
            return self
        return replace(self, warmup_batch_sizes=tuple(range(1, max_batch_size + 1)))


class WorkerPolicy(Policy):
    """Proxies ``infer_batch`` to a worker process; restarts it when it fails."""

    def __init__(
        self,
        spec: WorkerSpec,
        options: WorkerOptions | None = None,
        *,
        noise: NoiseConfig | None = None,
        rtc_schedule: str | None = None,
        rtc_execution_horizon: int | None = None,
    ) -> None:
        """Start the worker and wait until it is ready; WorkerStartError when it cannot.
        ``rtc_schedule`` (a prefix-weight schedule) forwards real-time-chunking requests
        to a backend that guides with them, ``rtc_execution_horizon`` rows at most."""
        self.spec = spec
        self.options = options or WorkerOptions()
        self._noise_config = noise or NoiseConfig()
        self._rtc_schedule = rtc_schedule
        self._rtc_execution_horizon = rtc_execution_horizon
        self.noise: NoiseTicket | None = None
        """The fixed noise sent to every worker (None: the model's own)."""
        self._info: dict[str, Any] | None = None
        self._arena: Arena | None = None
        self._process: WorkerProcess | None = None
        self._ready = False
        self._next_id = 0
        self._lock = threading.Lock()
        self.num_restarts = 0
        """Workers started after the first one."""
        self.last_worker_s: float | None = None
        """Seconds the worker's backend spent on the last batch (its own clock): the rest
        of ``infer_batch``'s time is what the worker adds."""
        self.last_peak_memory_bytes: int | None = None
        """The worker's peak memory after the last batch, as its backend reports it."""
        self._spawn()
        try:
            self._handshake()
        except BaseException:
            self.close()
            raise
        meta = self._build_metadata()
        self._metadata = meta
        points = meta.latency_points
        self._expected = LatencyProfile(points) if points else None

    # ---- Policy ----------------------------------------------------------------

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    @property
    def pid(self) -> int | None:
        """The current worker's process id (None between a failure and the restart)."""
        return None if self._process is None else self._process.pid

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        with self._lock:
            self._ensure_ready()
            process, placed = self._process, self._place(observations)
            assert process is not None
            message, request_id = self._request(placed)
            deadline_s = self.deadline_s(len(observations))
            try:
                process.send(message)
                reply = process.receive(deadline_s)
            except WorkerTimeout:
                process.kill()
                self._restart(f"hung: no answer within {deadline_s:.1f} s")
                raise WorkerHung(
                    f"the policy worker passed its {deadline_s:.1f} s deadline on this batch "
                    "and was restarted; ask again"
                ) from None
            except WorkerGone:
                reason = process.exit_reason()
                self._restart("died during a batch", process)
                raise WorkerCrashed(
                    f"the policy worker died during this batch ({reason}) and was restarted; "
                    "ask again"
                ) from None
            return self._read_reply(reply, request_id, len(observations))

    def close(self) -> None:
        """Stop the worker (asking first) and delete the arena."""
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._arena is not None:
            self._arena.close()
            self._arena = None

    # ---- the watchdog ------------------------------------------------------------

    def deadline_s(self, batch_size: int) -> float:
        """Seconds a batch of ``batch_size`` may take: ``max(watchdog_min_s,
        watchdog_factor * expected)``, expected from the start-up profile and the
        forward passes timed since."""
        expected = 0.0 if self._expected is None else self._expected.latency_s(batch_size)
        return max(self.options.watchdog_min_s, self.options.watchdog_factor * expected)

    # ---- batches -----------------------------------------------------------------

    def _place(self, observations: Sequence[Mapping[str, Any]]) -> tuple[wire.Layout, int]:
        """Copy the batch's declared inputs into the arena; (layout, reply offset)."""
        layout = wire.plan_layout([self._worker_entries(obs) for obs in observations])
        meta = self._metadata
        reply_bytes = len(observations) * meta.action_horizon * meta.action_dim * 4
        arena = self._ensure_arena(layout.num_bytes + reply_bytes)
        for offset, array in layout.placements:
            arena.write(offset, array)
        return layout, layout.num_bytes

    def check_observation(self, obs: Mapping[str, Any]) -> None:
        """A bad ``rtc_prefix``/``rtc_remainder``/``rtc_delay`` is refused at once."""
        self._guidance(obs)

    def _guidance(self, obs: Mapping[str, Any]) -> RtcGuidance | None:
        """The robot's real-time-chunking guidance (None: none asked, or RTC is off).

        Raises ValueError naming a bad ``rtc_prefix``/``rtc_remainder``/``rtc_delay``."""
        if self._rtc_schedule is None:
            return None
        meta = self._metadata
        return rtc_guidance(
            obs,
            rows=meta.action_horizon,
            action_dim=meta.action_dim,
            schedule=self._rtc_schedule,
            execution_horizon=self._rtc_execution_horizon,
        )

    def _worker_entries(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """What the worker gets of one observation: its declared inputs, the robot's
        real-time-chunking entries replaced by the worker wire's ``rtc.*`` ones.

        Raises ValueError naming a bad ``rtc_prefix``/``rtc_remainder``/``rtc_delay``."""
        entries = {key: obs[key] for key in self._metadata.inputs if key in obs}
        if self._rtc_schedule is None:
            return entries
        guidance = self._guidance(obs)
        entries.pop(RTC_PREFIX_KEY, None)
        entries.pop(RTC_REMAINDER_KEY, None)
        if guidance is not None:
            entries[wire.RTC_PREVIOUS] = guidance.previous
            entries[wire.RTC_DELAY] = np.int64(guidance.delay)
            entries[wire.RTC_EXECUTION_HORIZON] = np.int64(guidance.execution_horizon)
        return entries

    def _request(self, placed: tuple[wire.Layout, int]) -> tuple[dict[str, Any], int]:
        """The infer message for a placed batch, and its id."""
        layout, reply_offset = placed
        assert self._arena is not None
        self._next_id += 1
        meta = self._metadata
        message = {
            "op": "infer",
            "id": self._next_id,
            "arena": str(self._arena.path),
            "arena_bytes": self._arena.size,
            "obs": layout.observations,
            "reply_offset": reply_offset,
            "chunk_shape": [meta.action_horizon, meta.action_dim],
        }
        return message, self._next_id

    def _read_reply(
        self, reply: dict[str, Any], request_id: int, batch_size: int
    ) -> list[np.ndarray]:
        """The chunks of a result (copied out of the arena: one copy per batch)."""
        if reply.get("id") != request_id or reply.get("op") not in ("result", "error"):
            assert self._process is not None
            self._process.kill()
            self._restart(f"answered out of step ({reply.get('op')!r})")
            raise WorkerCrashed("the policy worker answered out of step and was restarted")
        if reply["op"] == "error":
            raise WorkerBatchError(f"the policy worker's model failed: {reply.get('error')}")
        assert self._arena is not None
        chunks = np.array(wire.view_array(self._arena.buffer, reply["chunks"]), dtype=np.float32)
        infer_s = reply.get("infer_s")
        if isinstance(infer_s, int | float) and infer_s > 0:
            self.last_worker_s = float(infer_s)
            if self._expected is None:
                self._expected = LatencyProfile({batch_size: float(infer_s)})
            self._expected.observe(batch_size, float(infer_s))
        peak = reply.get("peak_memory_bytes")
        if isinstance(peak, int) and not isinstance(peak, bool) and peak >= 0:
            self.last_peak_memory_bytes = peak
        return list(chunks)

    def _ensure_arena(self, num_bytes: int) -> Arena:
        if self._arena is None or self._arena.size < num_bytes:
            if self._arena is not None:
                self._arena.close()
            self._arena = Arena.create(int(num_bytes * _ARENA_SLACK) + 4096)
        return self._arena

    # ---- the worker's life -------------------------------------------------------

    def _spawn(self) -> None:
        try:
            self._process = WorkerProcess(self.spec)
        except OSError as exc:
            raise WorkerStartError(
                f"cannot run {self.spec.name}'s interpreter {self.spec.python!r}: {exc}"
            ) from None
        self._ready = False

    def _handshake(self) -> None:
        """hello -> configure (noise, profile) -> ready, within the start-up timeout."""
        process = self._process
        assert process is not None
        timeout_s = self.options.start_timeout_s
        hello = self._expect(process, "hello", timeout_s)
        info = hello["info"]
        if self._info is None:
            self._info = info
            self.noise = self._make_noise(info)
        elif info != self._info:
            process.kill()
            raise WorkerStartError(f"{self.spec.name} restarted with different metadata")
        message: dict[str, Any] = {
            "op": "configure",
            "noise": None,
            "profile_batch_sizes": list(self.options.profile_batch_sizes),
            "warmup_batch_sizes": list(self.options.warmup_batch_sizes or ()),
        }
        if self.noise is not None:
            arena = self._ensure_arena(self.noise.array.nbytes)
            arena.write(0, self.noise.array)
            message.update(
                noise=wire.array_ref(self.noise.array, 0),
                arena=str(arena.path),
                arena_bytes=arena.size,
            )
        with contextlib.suppress(WorkerGone):  # the next receive says why
            process.send(message)
        ready = self._expect(process, "ready", timeout_s)
        self._latency_points = {int(size): float(s) for size, s in ready["latency_points"].items()}
        self._ready = True
        logger.info("%s ready (pid %d)", self.spec.name, process.pid)

    def _expect(self, process: WorkerProcess, op: str, timeout_s: float) -> dict[str, Any]:
        try:
            message = process.receive(timeout_s)
        except WorkerTimeout:
            process.kill()
            raise WorkerStartError(
                describe_failure(process, f"{self.spec.name} sent no {op} within {timeout_s:g} s")
            ) from None
        except WorkerGone:
            raise WorkerStartError(
                describe_failure(process, f"{self.spec.name} exited before it was ready")
            ) from None
        if message.get("op") == "fatal":  # it exits by itself: wait for its reason
            error = f"{self.spec.name} could not start: {message.get('error')}"
            text = describe_failure(process, error)
            process.kill()
            raise WorkerStartError(text)
        if message.get("op") != op:
            process.kill()
            raise WorkerStartError(f"{self.spec.name} sent {message.get('op')!r}, expected {op!r}")
        return message

    def _make_noise(self, info: Mapping[str, Any]) -> NoiseTicket | None:
        if not self._noise_config.enabled:
            return None
        shape = info.get("noise_shape")
        if shape is None:
            raise WorkerStartError(
                f"policy {info['name']!r} takes no fixed noise: drop --policy.noise.seed / "
                "--policy.noise.ticket"
            )
        try:
            return make_noise(self._noise_config, tuple(shape))
        except ValueError as exc:
            raise WorkerStartError(
                f"the noise does not fit policy {info['name']!r}: {exc}"
            ) from None

    def _ensure_ready(self) -> None:
        """A live, ready worker: finish a pending restart, or start one for a worker that
        died between batches. WorkerCrashed (for this batch) when it cannot start."""
        process = self._process
        if process is not None and self._ready and process.alive:
            return
        if process is not None and self._ready:  # died while idle
            self._restart("died while idle", process)
        try:
            if self._process is None:
                self._spawn()
            self._handshake()
        except WorkerStartError as exc:
            logger.error("%s could not restart: %s", self.spec.name, exc)
            if self._process is not None:
                self._process.kill()
            self._process = None
            raise WorkerCrashed(
                "the policy worker could not be restarted; the server will try again at the "
                "next batch"
            ) from None

    def _restart(self, why: str, process: WorkerProcess | None = None) -> None:
        """Log the failure (with the worker's last output), reap it, start the next one."""
        dead = process or self._process
        if dead is not None:
            logger.error("%s", describe_failure(dead, f"{self.spec.name} (pid {dead.pid}) {why}"))
            dead.kill()
        self._process = None
        self._ready = False
        self.num_restarts += 1
        try:
            self._spawn()
        except WorkerStartError as exc:
            logger.error("%s", exc)

    def _build_metadata(self) -> PolicyMetadata:
        info = self._info
        assert info is not None
        inputs = {
            key: InputSpec(
                shape=tuple(spec["shape"] or ()),
                dtype=spec["dtype"],
                required=bool(spec.get("required", True)),
            )
            for key, spec in info["inputs"].items()
        }
        if self._rtc_schedule is not None:
            plan = InputSpec(shape=(None, int(info["action_dim"])), required=False)
            inputs.update({RTC_PREFIX_KEY: plan, RTC_REMAINDER_KEY: plan})
        return PolicyMetadata(
            name=info["name"],
            action_horizon=int(info["action_horizon"]),
            action_dim=int(info["action_dim"]),
            inputs=inputs,
            latency_points=self._latency_points or None,
            extra=dict(info.get("extra") or {}),
            noise_sha256=None if self.noise is None else self.noise.sha256,
        )


@dataclass(frozen=True)
class MockWorkerPolicyConfig:
    """The numpy mock backend in a worker process: the worker machinery without torch."""

    action_horizon: int = 10
    """Actions per chunk."""
    action_dim: int = 7
    """Values per action."""
    image_keys: tuple[str, ...] = ("observation/image",)
    """Declared uint8 camera inputs."""
    image_shape: tuple[int, int, int] = (96, 96, 3)
    """Shape of every camera image (height, width, channels)."""
    state_key: str = "observation/state"
    """Declared float32 state input."""
    state_dim: int = 8
    """Length of the state vector."""
    intercept_s: float = 0.01
    """Seconds of every forward pass ..."""
    slope_s: float = 0.002
    """... plus these per robot in the batch."""
    fault_key: str | None = None
    """Tests only: a text input of this name makes the worker crash/exit/hang/raise."""
    python: str = ""
    """Interpreter of the worker; empty: the server's own."""
    worker: WorkerOptions = field(default_factory=WorkerOptions)
    """Start-up timeout, watchdog and profiling of the worker."""
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    """Fixed noise of shape (action_horizon, action_dim); 0.1 x its first row is added."""
    start_error: str | None = None
    """Tests only: the backend fails to build with this message."""
    cold_pass_s: float = 0.0
    """Seconds the first forward pass at each batch size takes on top (a cold start)."""

    def __post_init__(self) -> None:
        if min(self.action_horizon, self.action_dim, self.state_dim) < 1:
            raise ValueError(
                f"action_horizon, action_dim and state_dim must be >= 1, got "
                f"{self.action_horizon}, {self.action_dim}, {self.state_dim}"
            )
        if min(self.intercept_s, self.slope_s, self.cold_pass_s) < 0:
            raise ValueError(
                f"intercept_s, slope_s and cold_pass_s must be >= 0, got {self.intercept_s}, "
                f"{self.slope_s}, {self.cold_pass_s}"
            )

    def spec(self) -> WorkerSpec:
        options: dict[str, Any] = {
            "action_horizon": self.action_horizon,
            "action_dim": self.action_dim,
            "image_keys": list(self.image_keys),
            "image_shape": list(self.image_shape),
            "state_key": self.state_key,
            "state_dim": self.state_dim,
            "intercept_s": self.intercept_s,
            "slope_s": self.slope_s,
            "fault_key": self.fault_key,
            "start_error": self.start_error,
            "cold_pass_s": self.cold_pass_s,
        }
        if self.noise.enabled:
            options["noise_shape"] = [self.action_horizon, self.action_dim]
        return WorkerSpec(
            python=self.python or sys.executable,
            backend="mock",
            options=options,
            name="mock-worker",
        )

    def make(self) -> WorkerPolicy:
        return WorkerPolicy(self.spec(), self.worker, noise=self.noise)
