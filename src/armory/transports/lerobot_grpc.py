"""The LeRobot async-inference front door: gRPC ``transport.AsyncInference`` (grpc.aio).

An unmodified LeRobot ``RobotClient`` (lerobot 0.6.1) connects here as it would to
LeRobot's own ``policy_server`` and is batched with every other robot of the server.
Its RPCs: ``Ready`` (hello), ``SendPolicyInstructions`` (a pickled
``RemotePolicyConfig``), ``SendObservations`` (a pickled ``TimedObservation``,
client-streamed in 2 MiB chunks) and ``GetActions`` (a pickled ``TimedAction`` list,
empty when none is ready). See docs/lerobot.md.

- **Robots** are told apart by their gRPC peer (``ipv4:host:port`` of the channel's
  connection): each gets its own engine session, opened by ``Ready`` (or by its first
  call) and closed when it calls ``Ready`` again, when the server stops, or after
  ``session_timeout_s`` without a call.
- **Access**: with the server's API key, every call must carry the gRPC metadata
  ``authorization: Api-Key <key>``, unless it comes from a network in
  ``allowed_networks`` (LeRobot's client cannot send metadata); checked before anything
  of the call is read (:mod:`armory.transports.grpc_access`). With the server's TLS pair
  the door serves TLS only (LeRobot's client cannot: ``tls`` off, and tunnel it).
  See docs/security.md.
- **Pickle** payloads are refused unless the operator turns on
  ``allow_unsafe_pickle_on_untrusted_networks``; even then only the allowlisting
  unpickler (:mod:`armory.transports.safe_unpickle`) reads them.
- **Scheduling**: LeRobot's client does not report its queue; the door estimates it
  (:class:`~armory.transports.lerobot_protocol.QueueEstimator`) and hands the engine an
  ``__armory__`` state in every-tick mode: the newest observation replaces a waiting
  one, none is dropped for looking like the last.
- **Errors** concern one robot: a bad payload fails that call with a gRPC status; an
  error while its chunk is computed is the status of its next ``GetActions``.

A robot's state and rules are its I/O-free core's,
:class:`~armory.transports.lerobot_core.LeRobotRobot`, kept in a
:class:`~armory.transports.sessions.SessionRegistry` (limit, eviction, idle sweep),
and :func:`~armory.transports.lerobot_core.serve` gives its observations to the
engine; this module reads calls and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from armory.engine.server_engine import ServerEngine
from armory.engine.session import Session
from armory.policies.base import PolicyMetadata
from armory.transports.base import Transport
from armory.transports.grpc_access import CallAccess, parse_networks
from armory.transports.lerobot_core import CallRefused, LeRobotRobot, Outgoing, serve
from armory.transports.lerobot_core import mismatch as mismatch
from armory.transports.lerobot_protocol import (
    DEFAULT_PORT,
    MAX_MESSAGE_BYTES,
    ObservationMapping,
    PayloadAssembler,
    PayloadTooLarge,
    QueueEstimator,
    decode_instructions,
    decode_observation,
)
from armory.transports.listen import ListenError, check_free
from armory.transports.sessions import SessionRegistry, TooManyRobots
from armory.transports.tls import pem_key_pair

try:
    import grpc
    import grpc.aio

    from armory.transports.lerobot_proto import services_pb2 as pb
except ImportError as exc:  # the `lerobot` extra (grpcio, protobuf) is not installed
    grpc = pb = None  # type: ignore[assignment]
    _GRPC_IMPORT_ERROR: ImportError | None = exc
else:
    _GRPC_IMPORT_ERROR = None

logger = logging.getLogger(__name__)

SERVICE = "transport.AsyncInference"
"""Full name of the gRPC service (upstream's package and service names)."""
UNSAFE_PICKLE_OPTION = "allow_unsafe_pickle_on_untrusted_networks"
PICKLE_REFUSED = (
    "this Armory server refuses LeRobot's pickle payloads: unpickling data from the network "
    "can run arbitrary code on the server (CVE-2026-25874). On a trusted network only, the "
    f"operator can turn on the LeRobot door's {UNSAFE_PICKLE_OPTION} option "
    "(--lerobot.allow-unsafe-pickle-on-untrusted-networks); Armory then reads payloads with "
    "an allowlisting unpickler that builds only plain data, numpy arrays and tensors"
)
"""Status message of every pickle payload while the option is off."""
_STOP_GRACE_S = 0.5
"""Seconds running calls get to finish when the server stops."""


@dataclass(frozen=True)
class LeRobotDoorConfig:
    """The LeRobot async-inference front door (``--lerobot.*``)."""

    port: int | None = None
    """TCP port of the gRPC service (LeRobot's default: 8080); None keeps the door closed,
    0 picks a free port."""
    # Security
    allow_unsafe_pickle_on_untrusted_networks: bool = False
    """Accept LeRobot's pickle payloads (through the allowlisting unpickler). Off: every
    pickle is refused with FAILED_PRECONDITION. Pickle from an untrusted network is unsafe."""
    allowed_networks: tuple[str, ...] = ()
    """Networks (CIDR, e.g. 10.0.0.0/24; an address is one host) whose calls need no API
    key: LeRobot's RobotClient cannot send one. Other calls need the server's key."""
    tls: bool = True
    """Serve TLS with the server's pair (--server.tls-cert-file) when one is set. LeRobot's
    RobotClient opens only plaintext channels: --lerobot.no-tls serves it (tunnel the door)."""
    # Robots
    default_control_hz: float = 30.0
    """A robot's control rate until measured from its observations (LeRobot's default fps)."""
    chunk_size_threshold: float = 0.5
    """The robots' ``chunk_size_threshold`` (LeRobot's default), an upper bound on their
    queue when they send; LeRobot's client does not report it."""
    mapping: ObservationMapping = field(default_factory=ObservationMapping)
    """How a raw robot observation becomes the policy's inputs."""
    allow_mismatched_policy: bool = False
    """Serve robots whose instructions do not match the served policy: another LeRobot
    policy type or checkpoint, or more joints than the policy's actions have values. Off:
    such a robot is refused at SendPolicyInstructions, told what is served."""
    # Timeouts
    actions_wait_s: float = 2.0
    """Longest a ``GetActions`` call waits for a chunk before answering empty (upstream's
    ``obs_queue_timeout``)."""
    session_timeout_s: float = 10.0
    """A robot that makes no call for this long is forgotten (its session closed)."""
    # Limits
    max_payload_bytes: int = 64 * 2**20
    """Largest observation payload (all its streamed chunks together)."""

    def __post_init__(self) -> None:
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ValueError(f"--lerobot.port must be in 0..65535 or None, got {self.port}")
        if not self.default_control_hz > 0:
            raise ValueError(
                f"--lerobot.default-control-hz must be > 0, got {self.default_control_hz}"
            )
        if not 0 <= self.chunk_size_threshold <= 1:
            raise ValueError(
                f"--lerobot.chunk-size-threshold must be in [0, 1], got {self.chunk_size_threshold}"
            )
        if not 0 < self.actions_wait_s < self.session_timeout_s:
            raise ValueError(
                f"--lerobot.actions-wait-s ({self.actions_wait_s}) must be > 0 and below "
                f"--lerobot.session-timeout-s ({self.session_timeout_s})"
            )
        if self.max_payload_bytes < 1024:
            raise ValueError(
                f"--lerobot.max-payload-bytes must be >= 1024, got {self.max_payload_bytes}"
            )
        parse_networks(self.allowed_networks, option="--lerobot.allowed-networks")

    @property
    def is_open(self) -> bool:
        """Whether a port is set (the door is served)."""
        return self.port is not None

    def door(self, host: str, *, api_key: str | None = None) -> Callable[[ServerEngine], Transport]:
        """The factory ``ArmoryServer(doors=[...])`` takes; raises if the door is closed.
        ``api_key``: the server's key, required of calls from outside ``allowed_networks``."""
        if self.port is None:
            raise ValueError("the LeRobot door is closed: set --lerobot.port (LeRobot uses 8080)")
        return lambda engine: LeRobotGrpcTransport(engine, host=host, config=self, api_key=api_key)


class _Robot(LeRobotRobot):
    """A LeRobot robot with what its calls wait on: the task serving its observations
    and the signal of its outbox."""

    def __init__(
        self, peer: str, session: Session, estimator: QueueEstimator, metadata: PolicyMetadata
    ) -> None:
        self.posted = asyncio.Event()
        """Set whenever the outbox changes."""
        super().__init__(peer, session, estimator, metadata, on_post=self.posted.set)
        self.task: asyncio.Task[None] | None = None
        """Gives the robot's held observations to the engine, while any is held."""


class LeRobotGrpcTransport(Transport):
    """Serves the engine over LeRobot's async-inference gRPC protocol."""

    def __init__(
        self,
        engine: ServerEngine,
        *,
        host: str = "127.0.0.1",
        config: LeRobotDoorConfig | None = None,
        # Security
        api_key: str | None = None,
    ) -> None:
        """Nothing is bound until :meth:`start`; ``config.port`` 0 picks a free port.
        With ``api_key`` every call needs it in its metadata, unless it comes from one of
        ``config.allowed_networks``."""
        if _GRPC_IMPORT_ERROR is not None:
            raise ImportError(
                "the LeRobot door needs grpcio and protobuf: pip install 'armory[lerobot]' "
                f"({_GRPC_IMPORT_ERROR})"
            )
        self.engine = engine
        self.host = host
        self.config = config or LeRobotDoorConfig(port=DEFAULT_PORT)
        self.access = CallAccess(
            api_key=api_key or None,
            networks=parse_networks(
                self.config.allowed_networks, option="--lerobot.allowed-networks"
            ),
        )
        self._tls = self.config.tls and engine.config.tls
        self._server: grpc.aio.Server | None = None
        self._port: int | None = None
        self.robots: SessionRegistry[str, _Robot] = SessionRegistry(
            engine,
            door="lerobot",
            make=self._new_robot,
            on_close=_Robot.close,
            max_robots=engine.config.max_connections,
            idle_timeout_s=self.config.session_timeout_s,
        )
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("the transport is not started")
        return self._port

    @property
    def requires_credentials(self) -> bool:
        return not self.access.is_open

    def describe(self) -> str:
        """One line for the server's start-up announcement."""
        pickle = (
            "pickle accepted through the allowlisting unpickler (trusted networks only)"
            if self.config.allow_unsafe_pickle_on_untrusted_networks
            else f"pickle payloads refused until {UNSAFE_PICKLE_OPTION} is on"
        )
        return (
            f"LeRobot gRPC ({SERVICE}) on {_address(self.host, self.port)} "
            f"({'TLS' if self._tls else 'plaintext'}); {self.access.describe()}; {pickle}"
        )

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
            # A robot holds at most two calls at once (SendObservations, GetActions):
            # past that many robots' worth, a call gets RESOURCE_EXHAUSTED.
            maximum_concurrent_rpcs=2 * self.engine.config.max_connections,
        )
        server.add_generic_rpc_handlers((self._handlers(),))
        address = _address(self.host, self.config.port or 0)
        key_pair = pem_key_pair(self.engine.config) if self._tls else None
        check_free("LeRobot", self.host, self.config.port or 0)  # gRPC would log its own line
        try:
            if key_pair is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, grpc.ssl_server_credentials([key_pair]))
        except RuntimeError as exc:
            raise ListenError("LeRobot", address, exc) from None
        if port == 0:
            raise ListenError("LeRobot", address, "gRPC bound no port")
        await server.start()
        self._server, self._port = server, port
        self._sweeper = asyncio.ensure_future(self._sweep())

    async def stop(self) -> None:
        if self._server is None:
            return
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        robots = self.robots.robots()
        self.robots.close_all("the server stops")
        await self._server.stop(_STOP_GRACE_S)
        for robot in robots:
            if robot.task is not None:
                robot.task.cancel()
                with contextlib.suppress(BaseException):
                    await robot.task

    # ---- the service ---------------------------------------------------

    def _handlers(self) -> grpc.GenericRpcHandler:
        empty, actions = pb.Empty, pb.Actions
        unary = grpc.unary_unary_rpc_method_handler
        guarded = self._guarded
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Ready": unary(
                    guarded(self._ready),
                    request_deserializer=empty.FromString,
                    response_serializer=empty.SerializeToString,
                ),
                "SendPolicyInstructions": unary(
                    guarded(self._instructions),
                    request_deserializer=pb.PolicySetup.FromString,
                    response_serializer=empty.SerializeToString,
                ),
                "SendObservations": grpc.stream_unary_rpc_method_handler(
                    guarded(self._observations),
                    request_deserializer=pb.Observation.FromString,
                    response_serializer=empty.SerializeToString,
                ),
                "GetActions": unary(
                    guarded(self._get_actions),
                    request_deserializer=empty.FromString,
                    response_serializer=actions.SerializeToString,
                ),
            },
        )

    def _guarded(self, behavior: _Behavior) -> _Behavior:
        """``behavior`` behind the access check: a call without the key, from outside
        the allowed networks, fails UNAUTHENTICATED before any of it is read; a call of a
        new robot while ``--server.max-connections`` robots are known fails
        RESOURCE_EXHAUSTED."""

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not self.access.allows(context.invocation_metadata(), context.peer()):
                await self._abort(context, grpc.StatusCode.UNAUTHENTICATED, self.access.refusal())
            try:
                self.robots.check_room(context.peer())
            except TooManyRobots as exc:
                await self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            return await behavior(request, context)

        return call

    async def _ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """A robot says hello: it starts afresh (a session it had is closed)."""
        self.robots.close(context.peer(), "it called Ready again")
        robot = self._robot(context)
        logger.info("LeRobot robot %s is ready", robot.peer)
        return pb.Empty()

    async def _instructions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The robot's ``RemotePolicyConfig``: checked, never loaded (one policy is served)."""
        await self._refuse_pickle_unless_allowed(context)
        robot = self._robot(context)
        with self.robots.calling(robot.peer, self.engine.clock):
            try:
                instructions = decode_instructions(request.data)
            except ValueError as exc:
                await self._abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"refused the policy instructions: {exc}",
                    session=robot.session,
                )
            try:
                robot.instruct(
                    instructions,
                    self.config.mapping,
                    allow_mismatched_policy=self.config.allow_mismatched_policy,
                )
            except CallRefused as exc:
                await self._refuse(context, exc, session=robot.session)
            return pb.Empty()

    async def _observations(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> Any:
        """One observation, streamed in chunks: checked now, served in the background."""
        await self._refuse_pickle_unless_allowed(context)
        robot = self._robot(context)
        with self.robots.calling(robot.peer, self.engine.clock):
            payload = await self._read_payload(requests, context, robot.session)
            received_s = self.engine.clock()
            try:
                robot.check_instructed()
                # Off the event loop: the unpickler's scan and build are bounded, not free.
                obs = await asyncio.to_thread(decode_observation, payload)
            except CallRefused as exc:
                await self._refuse(context, exc, session=robot.session)
            except ValueError as exc:
                await self._abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"refused the observation: {exc}",
                    session=robot.session,
                )
            try:
                robot.observe(obs, received_s)
            except CallRefused as exc:
                await self._refuse(context, exc, session=robot.session)
            if robot.task is None or robot.task.done():
                robot.task = asyncio.ensure_future(serve(robot, self.engine))
            return pb.Empty()

    async def _get_actions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The robot's next chunk; empty after ``actions_wait_s`` without one."""
        robot = self._robot(context)
        with self.robots.calling(robot.peer, self.engine.clock):
            item = await self._next_outgoing(robot)
            if item is None:
                return pb.Actions()
            if item.error is not None:
                await self._refuse(context, item.error, counted=True)
            robot.fetched(item)
            if item.reply is not None:
                self.engine.reply_sent(robot.session, item.reply, self.engine.clock())
            return pb.Actions(data=item.payload)

    async def _next_outgoing(self, robot: _Robot) -> Outgoing | None:
        """The robot's next chunk or error; None after ``actions_wait_s`` without one, or
        once the robot is closed."""
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + self.config.actions_wait_s
        while not robot.closed:
            item = robot.take()
            if item is not None:
                return item
            robot.posted.clear()
            try:
                async with asyncio.timeout_at(deadline_s):
                    await robot.posted.wait()
            except TimeoutError:
                return None
        return None

    # ---- robots ----------------------------------------------------------

    def _robot(self, context: grpc.aio.ServicerContext) -> _Robot:
        """The robot behind this call's peer; a new one for a peer not seen (or closed)."""
        peer = context.peer()
        return self.robots.robot(peer, peer=peer, now_s=self.engine.clock())

    def _new_robot(self, peer: str, session: Session) -> _Robot:
        estimator = QueueEstimator(
            default_control_hz=self.config.default_control_hz,
            chunk_size_threshold=self.config.chunk_size_threshold,
        )
        return _Robot(peer, session, estimator, self.engine.metadata)

    async def _sweep(self) -> None:
        """Forget robots that made no call for ``session_timeout_s``."""
        period_s = min(1.0, self.config.session_timeout_s / 4)
        while True:
            await asyncio.sleep(period_s)
            self.robots.sweep(self.engine.clock())

    # ---- helpers -----------------------------------------------------------

    async def _read_payload(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, session: Session
    ) -> bytes:
        """The observation's payload; a malformed or oversized stream fails the call,
        counted against ``session``'s robot."""
        assembler = PayloadAssembler(max_bytes=self.config.max_payload_bytes)
        async for message in requests:
            try:
                payload = assembler.add(message.transfer_state, message.data)
            except PayloadTooLarge as exc:
                await self._abort(
                    context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), session=session
                )
            except ValueError as exc:
                await self._abort(
                    context, grpc.StatusCode.INVALID_ARGUMENT, str(exc), session=session
                )
            if payload is not None:
                return payload
        await self._abort(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            "the observation stream ended before a TRANSFER_END message",
            session=session,
        )
        raise AssertionError("unreachable")

    async def _refuse_pickle_unless_allowed(self, context: grpc.aio.ServicerContext) -> None:
        if not self.config.allow_unsafe_pickle_on_untrusted_networks:
            logger.info("LeRobot call from %s refused: pickle payloads are off", context.peer())
            await self._abort(context, grpc.StatusCode.FAILED_PRECONDITION, PICKLE_REFUSED)

    async def _refuse(
        self,
        context: grpc.aio.ServicerContext,
        exc: CallRefused,
        *,
        counted: bool = False,
        session: Session | None = None,
    ) -> None:
        """Fail this call with the core's refusal (raises)."""
        await self._abort(
            context,
            getattr(grpc.StatusCode, exc.status),
            exc.message,
            counted=counted,
            session=session,
        )

    async def _abort(
        self,
        context: grpc.aio.ServicerContext,
        code: Any,
        message: str,
        *,
        counted: bool = False,
        session: Session | None = None,
    ) -> None:
        """Fail this call with ``code`` and ``message`` (raises); ``counted``: the engine's
        error count already has it; ``session``: the robot whose row counts it (None: a
        call refused before its robot is known)."""
        if not counted:
            self.engine.count_error("lerobot", code.name, session=session)
        logger.info("LeRobot call from %s failed: %s: %s", context.peer(), code.name, message)
        try:
            await context.abort(code, message)
        except BaseException as exc:
            # grpc.aio keeps the abort exception on the call's state, which the garbage
            # collector cannot traverse: through its traceback's frames (a payload among
            # their locals) every aborted call would stay in memory. Let go once the call
            # has ended.
            asyncio.get_running_loop().call_soon(_forget_frames, exc)
            raise


def _forget_frames(exc: BaseException) -> None:
    """Drop the traceback and chained exceptions an ended call's exception holds."""
    exc.__traceback__ = None
    exc.__context__ = None
    exc.__cause__ = None


_Behavior = Callable[[Any, Any], Awaitable[Any]]
"""An RPC's handler: (request or request iterator, context) -> response."""


def _address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"
