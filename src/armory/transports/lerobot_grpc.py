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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from armory_client import ARMORY_KEY, RobotState

from armory.engine.errors import (
    ObservationError,
    QueueStateError,
    RequestError,
    ServerClosing,
    SessionClosed,
)
from armory.engine.server_engine import Reply, ServerEngine
from armory.engine.session import Session
from armory.policies.base import PolicyMetadata, conform_observation
from armory.transports.base import Transport
from armory.transports.grpc_access import CallAccess, parse_networks
from armory.transports.lerobot_protocol import (
    DEFAULT_PORT,
    MAX_MESSAGE_BYTES,
    ObservationMapping,
    PayloadAssembler,
    PayloadTooLarge,
    PolicyInstructions,
    QueueEstimator,
    QueueReport,
    ResolvedMapping,
    decode_instructions,
    decode_observation,
    encode_actions,
    map_observation,
    resolve_mapping,
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
    policy type, or more joints than the policy's actions have values. Off: such a robot
    is refused at SendPolicyInstructions, told what is served."""
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


@dataclass(frozen=True)
class _Pending:
    """An observation waiting to go to the engine."""

    inputs: dict[str, Any]
    """The policy's inputs, validated."""
    report: QueueReport
    timestamp_s: float
    """The robot's clock when it took the observation."""
    received_s: float
    """Server clock when it arrived."""


@dataclass(frozen=True)
class _Outgoing:
    """What the robot's next ``GetActions`` returns: a chunk, or an error status."""

    payload: bytes = b""
    reply: Reply | None = None
    chunk_start: int = 0
    first_timestep: int = 0
    num_actions: int = 0
    error: tuple[Any, str] | None = None
    """(grpc.StatusCode, message)."""


class _Robot:
    """Runtime state of one LeRobot robot (one gRPC peer)."""

    def __init__(self, peer: str, session: Session, estimator: QueueEstimator):
        self.peer = peer
        self.name = f"lerobot:{peer}"
        self.session = session
        self.estimator = estimator
        self.instructions: PolicyInstructions | None = None
        self.mapping: ResolvedMapping | None = None
        self.actions_per_chunk = 1
        """Actions of each chunk sent to the robot: its ``actions_per_chunk``, at most the
        policy's horizon."""
        self.held: _Pending | None = None
        """The newest observation not yet given to the engine."""
        self.task: asyncio.Task[None] | None = None
        self.outbox: asyncio.Queue[_Outgoing | None] = asyncio.Queue(maxsize=1)
        self.last_index = 0
        """Engine action index of the last report handed to the engine."""
        self.closed = False
        # Counters
        self.num_replaced = 0
        """Observations replaced by a newer one before any batch took them."""
        self.num_unfetched = 0
        """Chunks replaced by a newer chunk before the robot fetched them."""

    def post(self, item: _Outgoing | None) -> None:
        """Put ``item`` for the next ``GetActions``, replacing one not yet fetched."""
        with contextlib.suppress(asyncio.QueueEmpty):
            old = self.outbox.get_nowait()
            if old is not None and old.error is None:
                self.num_unfetched += 1
        self.outbox.put_nowait(item)


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
            make=self._new_robot,
            on_close=self._closed,
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
                )
            meta = self.engine.metadata
            try:
                mapping = resolve_mapping(self.config.mapping, instructions.features, meta.inputs)
            except ValueError as exc:
                await self._abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the robot's observations do not fit the served policy {meta.name!r}: {exc}",
                )
            refusal = None if self.config.allow_mismatched_policy else mismatch(instructions, meta)
            if refusal is not None:
                await self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, refusal)
            robot.instructions, robot.mapping = instructions, mapping
            robot.actions_per_chunk = min(instructions.actions_per_chunk, meta.action_horizon)
            _check_instructions(robot, instructions, meta.name, meta.action_horizon)
            return pb.Empty()

    async def _observations(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> Any:
        """One observation, streamed in chunks: checked now, served in the background."""
        await self._refuse_pickle_unless_allowed(context)
        robot = self._robot(context)
        with self.robots.calling(robot.peer, self.engine.clock):
            payload = await self._read_payload(requests, context)
            received_s = self.engine.clock()
            if robot.mapping is None:
                await self._abort(
                    context,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "no policy instructions from this robot yet: call SendPolicyInstructions "
                    "after Ready, on the same channel",
                )
            try:
                # Off the event loop: the unpickler's scan and build are bounded, not free.
                obs = await asyncio.to_thread(decode_observation, payload)
                inputs = map_observation(obs.observation, robot.mapping)
                inputs = conform_observation(inputs, self.engine.metadata.inputs)
                report = robot.estimator.observe(obs, received_s)
            except ValueError as exc:
                await self._abort(
                    context, grpc.StatusCode.INVALID_ARGUMENT, f"refused the observation: {exc}"
                )
            if robot.held is not None:
                robot.num_replaced += 1
            robot.held = _Pending(inputs, report, obs.timestamp_s, received_s)
            if robot.task is None or robot.task.done():
                robot.task = asyncio.ensure_future(self._serve(robot))
            return pb.Empty()

    async def _get_actions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The robot's next chunk; empty after ``actions_wait_s`` without one."""
        robot = self._robot(context)
        with self.robots.calling(robot.peer, self.engine.clock):
            try:
                item = await asyncio.wait_for(robot.outbox.get(), self.config.actions_wait_s)
            except TimeoutError:
                return pb.Actions()
            if item is None:
                return pb.Actions()
            if item.error is not None:
                await self._abort(context, *item.error, counted=True)
            robot.estimator.fetched(item.chunk_start, item.first_timestep, item.num_actions)
            if item.reply is not None:
                self.engine.reply_sent(robot.session, item.reply, self.engine.clock())
            return pb.Actions(data=item.payload)

    # ---- serving one robot -----------------------------------------------

    async def _serve(self, robot: _Robot) -> None:
        """Give the robot's newest observation to the engine until none is left."""
        try:
            while robot.held is not None and not robot.closed:
                pending, robot.held = robot.held, None
                outgoing = await self._infer(robot, pending)
                if outgoing is not None:
                    robot.post(outgoing)
        except SessionClosed:
            pass
        except Exception:
            logger.exception("LeRobot robot %s: serving failed", robot.peer)
            robot.post(_Outgoing(error=(grpc.StatusCode.INTERNAL, _INTERNAL)))

    async def _infer(self, robot: _Robot, pending: _Pending) -> _Outgoing | None:
        """One observation through the engine: its chunk, an error, or None (deferred so
        that a newer one takes its place, or superseded by a chunk already computed)."""
        now_s = self.engine.clock()
        estimator = robot.estimator
        report = pending.report.aged(now_s - pending.received_s, estimator.control_hz)
        report = report.not_before(robot.last_index)
        if not estimator.servable(report):
            return None
        robot.last_index = report.action_index
        try:
            reply = await self.engine.infer(
                robot.session, self._request(robot, pending, report), received_s=now_s
            )
        except RequestError as exc:
            self.engine.count_error()
            logger.info("LeRobot robot %s: request refused: %s", robot.peer, exc)
            return _Outgoing(error=(_status(exc), str(exc)))
        if reply.deferred:
            if robot.held is None:
                robot.held = pending  # nothing newer came: ask again with this one
            return None
        estimator.computed(reply.chunk_start)
        rows = reply.actions[: robot.actions_per_chunk]
        return _Outgoing(
            payload=encode_actions(
                rows,
                first_timestep=report.timestep,
                timestamp_s=pending.timestamp_s,
                step_s=estimator.tick_s,
            ),
            reply=reply,
            chunk_start=reply.chunk_start,
            first_timestep=report.timestep,
            num_actions=len(rows),
        )

    def _request(self, robot: _Robot, pending: _Pending, report: QueueReport) -> dict[str, Any]:
        """The policy's inputs and the robot's estimated queue as ``__armory__`` state
        (every-tick mode: a waiting observation is handed back after about a tick)."""
        estimator = robot.estimator
        state = RobotState(
            robot_id=robot.name,
            action_index=report.action_index,
            actions_left=report.actions_left,
            chunk_start=report.chunk_start,
            control_hz=estimator.control_hz,
            min_execution_horizon=1,
            # Row 0 of a chunk is the action the robot executed when it took the
            # observation: the client skips it.
            max_execution_horizon=max(robot.actions_per_chunk - 1, 1),
            observation_step=max(estimator.num_observations - 1, 0),
            defer_after_s=estimator.tick_s,
        )
        return {**pending.inputs, ARMORY_KEY: state.to_wire()}

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
        return _Robot(peer, session, estimator)

    def _closed(self, robot: _Robot, reason: str) -> None:
        """A robot left (its session is closed): a ``GetActions`` waiting gets nothing."""
        robot.closed = True
        robot.post(None)
        logger.info(
            "LeRobot robot %s left (%s): %d observations, %d replaced by newer ones, "
            "%d chunks never fetched",
            robot.peer,
            reason,
            robot.estimator.num_observations,
            robot.num_replaced,
            robot.num_unfetched,
        )

    async def _sweep(self) -> None:
        """Forget robots that made no call for ``session_timeout_s``."""
        period_s = min(1.0, self.config.session_timeout_s / 4)
        while True:
            await asyncio.sleep(period_s)
            self.robots.sweep(self.engine.clock())

    # ---- helpers -----------------------------------------------------------

    async def _read_payload(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> bytes:
        assembler = PayloadAssembler(max_bytes=self.config.max_payload_bytes)
        async for message in requests:
            try:
                payload = assembler.add(message.transfer_state, message.data)
            except PayloadTooLarge as exc:
                await self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            except ValueError as exc:
                await self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            if payload is not None:
                return payload
        await self._abort(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            "the observation stream ended before a TRANSFER_END message",
        )
        raise AssertionError("unreachable")

    async def _refuse_pickle_unless_allowed(self, context: grpc.aio.ServicerContext) -> None:
        if not self.config.allow_unsafe_pickle_on_untrusted_networks:
            logger.info("LeRobot call from %s refused: pickle payloads are off", context.peer())
            await self._abort(context, grpc.StatusCode.FAILED_PRECONDITION, PICKLE_REFUSED)

    async def _abort(
        self,
        context: grpc.aio.ServicerContext,
        code: Any,
        message: str,
        *,
        counted: bool = False,
    ) -> None:
        """Fail this call with ``code`` and ``message`` (raises); ``counted``: the engine's
        error count already has it."""
        if not counted:
            self.engine.count_error()
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


_INTERNAL = "internal server error; the server log has the details"
_Behavior = Callable[[Any, Any], Awaitable[Any]]
"""An RPC's handler: (request or request iterator, context) -> response."""


def _status(exc: RequestError) -> Any:
    """The gRPC status of an engine error."""
    if isinstance(exc, ObservationError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, QueueStateError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, ServerClosing):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL  # PolicyError, or a failure of the server


def mismatch(instructions: PolicyInstructions, meta: PolicyMetadata) -> str | None:
    """Why the served policy cannot serve a robot with these instructions, or None.

    Called at SendPolicyInstructions (unless ``--lerobot.allow-mismatched-policy``): a
    robot asking for another LeRobot policy type than the served one would silently get
    the served one's actions; a robot with more joints than an action has values would
    fail later inside LeRobot's client, which plays action value i on joint i of its
    ``action_features`` (its ``observation.state`` names, for LeRobot's robots). A served
    policy that is not a LeRobot policy (``policy:mock``) has no type to compare.
    """
    served_type = meta.extra.get("lerobot_type")
    if isinstance(served_type, str) and instructions.policy_type != served_type:
        return (
            f"this server serves the LeRobot policy type {served_type!r} ({meta.name!r}), "
            f"not {instructions.policy_type!r}: set the robot's policy_type={served_type!r} "
            "(or the operator allows it with --lerobot.allow-mismatched-policy)"
        )
    state = instructions.features.get("observation.state")
    joints = state.get("names") if isinstance(state, Mapping) else None
    if isinstance(joints, list | tuple) and len(joints) > meta.action_dim:
        return (
            f"the served policy {meta.name!r} returns actions of {meta.action_dim} values but "
            f"the robot has {len(joints)} joints {list(joints)}: LeRobot's client would run "
            "out of action values (or the operator allows it with "
            "--lerobot.allow-mismatched-policy)"
        )
    return None


def _check_instructions(
    robot: _Robot, instructions: PolicyInstructions, served: str, horizon: int
) -> None:
    """Log what the robot asked for that this server does not do."""
    asked = instructions.policy_type
    logger.info(
        "LeRobot robot %s asks for policy %r (%r) with %d actions per chunk",
        robot.peer,
        asked,
        instructions.pretrained_name_or_path,
        instructions.actions_per_chunk,
    )
    if asked.lower() not in served.lower():
        logger.warning(
            "LeRobot robot %s asks for policy %r (%r); this server serves %r and never loads "
            "another: the robot gets %r's actions",
            robot.peer,
            asked,
            instructions.pretrained_name_or_path,
            served,
            served,
        )
    if instructions.actions_per_chunk > horizon:
        logger.warning(
            "LeRobot robot %s asks for %d actions per chunk; the policy's horizon is %d: it "
            "gets chunks of %d",
            robot.peer,
            instructions.actions_per_chunk,
            horizon,
            horizon,
        )


def _address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"
