"""One LeRobot robot without gRPC: instructions and observations in, engine requests and
chunks out.

:class:`LeRobotRobot` is what the LeRobot door knows of one robot (one gRPC peer):
the policy instructions it sent and the mapping of its observations, the newest
observation not yet given to the engine (a newer one replaces it), its estimated
queue, and the one-slot outbox its next ``GetActions`` takes (a newer chunk
replaces one never fetched; an error there is the status of that call).
:func:`serve` gives a robot's held observations to the engine. The socket side
(:mod:`armory.transports.lerobot_grpc`) reads calls and answers; failures here are
:class:`CallRefused` with the gRPC status to send, by name, so this module needs no
gRPC. No I/O, and no clock but the engine's.

Chunk timesteps (docs/lerobot.md): a learned policy's rows are numbered from the
observation's timestep ``t``, as upstream's ``policy_server`` numbers them (row ``i``
gets ``t + i``; the robot drops row 0, a step it executed). A policy that plans from
the chunk start it is told (``armory/chunk_start``: the expert, replay) is told the
observation's own index, the robot's next action (``t + 1`` once it executed any),
and its rows are numbered from there, so each plays at the step it was planned for.
The engine schedules the robot from its own chunk start either way: that index aged
by the ticks the observation waited at the door.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from armory_client.wire import ARMORY_KEY, RobotState

from armory.core.errors import INTERNAL_ERROR as INTERNAL
from armory.core.errors import (
    ObservationError,
    QueueStateError,
    RequestError,
    ServerClosing,
    SessionClosed,
)
from armory.engine.server_engine import Reply, ServerEngine
from armory.engine.session import Session
from armory.policies.base import CONTEXT_CHUNK_START, PolicyMetadata, conform_observation
from armory.transports.lerobot_protocol import (
    ObservationMapping,
    PolicyInstructions,
    QueueEstimator,
    QueueReport,
    ResolvedMapping,
    TimedObservation,
    encode_actions,
    map_observation,
    resolve_mapping,
)

logger = logging.getLogger("armory.transports.lerobot_grpc")
"""The door's logger: its lines keep the name they are filtered by."""

ALLOW_MISMATCH = "(or the operator allows it with --lerobot.allow-mismatched-policy)"
"""How a refused robot is told that the operator can serve it anyway."""
NO_INSTRUCTIONS = (
    "no policy instructions from this robot yet: call SendPolicyInstructions after Ready, "
    "on the same channel"
)


class CallRefused(Exception):
    """A call that fails with the gRPC status named ``status`` (e.g. INVALID_ARGUMENT)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Pending:
    """An observation waiting to go to the engine."""

    inputs: dict[str, Any]
    """The policy's inputs, validated."""
    report: QueueReport
    timestamp_s: float
    """The robot's clock when it took the observation."""
    received_s: float
    """Server clock when it arrived."""


@dataclass(frozen=True)
class EngineCall:
    """An observation for the engine, with the robot's estimated queue."""

    pending: Pending
    report: QueueReport
    """The queue when the observation goes to the engine (aged since its arrival)."""
    observation: dict[str, Any]
    """The policy's inputs and the ``__armory__`` state."""
    sent_s: float
    """Server clock when it goes to the engine."""
    first_timestep: int
    """LeRobot timestep of the chunk's row 0, and the index the policy is told its chunk
    starts at (``armory/chunk_start``)."""


@dataclass(frozen=True)
class Outgoing:
    """What the robot's next ``GetActions`` returns: a chunk, or an error status."""

    payload: bytes = b""
    reply: Reply | None = None
    chunk_start: int = 0
    first_timestep: int = 0
    num_actions: int = 0
    error: CallRefused | None = None


class LeRobotRobot:
    """Runtime state of one LeRobot robot (one gRPC peer)."""

    def __init__(
        self,
        peer: str,
        session: Session,
        estimator: QueueEstimator,
        metadata: PolicyMetadata,
        *,
        on_post: Callable[[], None] | None = None,
    ) -> None:
        """``on_post``: called whenever the outbox changes (a waiting ``GetActions`` looks)."""
        self.peer = peer
        self.name = f"lerobot:{peer}"
        self.session = session
        self.estimator = estimator
        self.metadata = metadata
        self.on_post = on_post
        self.instructions: PolicyInstructions | None = None
        self.mapping: ResolvedMapping | None = None
        self.actions_per_chunk = 1
        """Actions of each chunk sent to the robot: its ``actions_per_chunk``, at most the
        policy's horizon."""
        self.plans_from_chunk_start = CONTEXT_CHUNK_START in metadata.context_keys
        """The policy plans its rows from the chunk start it is told (the expert, replay):
        they are numbered from the observation's own index and all played. Otherwise (a
        learned policy) from the observation's timestep, as upstream: row 0 is dropped."""
        self.held: Pending | None = None
        """The newest observation not yet given to the engine."""
        self._outbox: Outgoing | None = None
        self.last_index = 0
        """Engine action index of the last report handed to the engine."""
        self.closed = False
        # Counters
        self.num_replaced = 0
        """Observations replaced by a newer one before any batch took them."""
        self.num_unfetched = 0
        """Chunks replaced by a newer chunk before the robot fetched them."""

    # ---- calls ---------------------------------------------------------

    def instruct(
        self,
        instructions: PolicyInstructions,
        mapping: ObservationMapping,
        *,
        allow_mismatched_policy: bool = False,
    ) -> None:
        """The robot's ``RemotePolicyConfig``: checked against the served policy, never
        loaded. Raises CallRefused (INVALID_ARGUMENT), changing nothing."""
        meta = self.metadata
        try:
            resolved = resolve_mapping(mapping, instructions.features, meta.inputs)
        except ValueError as exc:
            raise CallRefused(
                "INVALID_ARGUMENT",
                f"the robot's observations do not fit the served policy {meta.name!r}: {exc}",
            ) from None
        refusal = None if allow_mismatched_policy else mismatch(instructions, meta)
        if refusal is not None:
            raise CallRefused("INVALID_ARGUMENT", refusal)
        self.instructions, self.mapping = instructions, resolved
        self.actions_per_chunk = min(instructions.actions_per_chunk, meta.action_horizon)
        _log_instructions(self, instructions, meta.name, meta.action_horizon)

    def check_instructed(self) -> None:
        """Raises CallRefused (FAILED_PRECONDITION) before the robot's instructions."""
        if self.mapping is None:
            raise CallRefused("FAILED_PRECONDITION", NO_INSTRUCTIONS)

    def observe(self, obs: TimedObservation, received_s: float) -> None:
        """A decoded observation: checked and held for the engine (replacing one not yet
        given to it). Raises CallRefused, changing nothing."""
        self.check_instructed()
        assert self.mapping is not None
        try:
            inputs = map_observation(obs.observation, self.mapping)
            inputs = conform_observation(inputs, self.metadata.inputs)
            report = self.estimator.observe(obs, received_s)
        except ValueError as exc:
            raise CallRefused("INVALID_ARGUMENT", f"refused the observation: {exc}") from None
        if self.held is not None:
            self.num_replaced += 1
        self.held = Pending(inputs, report, obs.timestamp_s, received_s)

    def take(self) -> Outgoing | None:
        """What a ``GetActions`` returns now, if anything (taken out of the outbox)."""
        item, self._outbox = self._outbox, None
        return item

    def fetched(self, item: Outgoing) -> None:
        """Called when a chunk is on its way to the robot."""
        self.estimator.fetched(item.chunk_start, item.first_timestep, item.num_actions)

    # ---- the engine ----------------------------------------------------

    def next_call(self, now_s: float) -> EngineCall | None:
        """The held observation for the engine at ``now_s``, or None when none is held (an
        observation a chunk already computed supersedes is dropped)."""
        while self.held is not None and not self.closed:
            pending, self.held = self.held, None
            estimator = self.estimator
            report = pending.report.aged(now_s - pending.received_s, estimator.control_hz)
            report = report.not_before(self.last_index)
            if not estimator.servable(report):
                continue
            self.last_index = report.action_index
            first = self._first_timestep(pending.report)
            return EngineCall(pending, report, self._observation(pending, report), now_s, first)
        return None

    def answered(self, call: EngineCall, reply: Reply) -> None:
        """The engine's reply to ``call``: its chunk goes to the outbox; "deferred" holds
        the observation again unless a newer one came."""
        if reply.deferred:
            if self.held is None:
                self.held = call.pending  # nothing newer came: ask again with this one
            return
        self.estimator.computed(reply.chunk_start)
        rows = reply.actions[: self.actions_per_chunk]
        # Timed as upstream times a timestep: the observation's time plus a tick per step.
        tick_s = self.estimator.tick_s
        ahead = call.first_timestep - call.pending.report.timestep
        self.post(
            Outgoing(
                payload=encode_actions(
                    rows,
                    first_timestep=call.first_timestep,
                    timestamp_s=call.pending.timestamp_s + ahead * tick_s,
                    step_s=tick_s,
                ),
                reply=reply,
                chunk_start=reply.chunk_start,
                first_timestep=call.first_timestep,
                num_actions=len(rows),
            )
        )

    def refused(self, exc: RequestError) -> None:
        """The engine refused the observation: the error is the next GetActions' status."""
        logger.info("LeRobot robot %s: request refused: %s", self.peer, exc)
        self.post(Outgoing(error=CallRefused(status_of(exc), str(exc))))

    def failed(self) -> None:
        """Serving the robot failed inside the server: its next GetActions says so."""
        self.post(Outgoing(error=CallRefused("INTERNAL", INTERNAL)))

    def close(self, reason: str) -> None:
        """The robot left (its session is closed): a ``GetActions`` waiting gets nothing."""
        self.closed = True
        self.post(None)
        logger.info(
            "LeRobot robot %s left (%s): %d observations, %d replaced by newer ones, "
            "%d chunks never fetched",
            self.peer,
            reason,
            self.estimator.num_observations,
            self.num_replaced,
            self.num_unfetched,
        )

    def post(self, item: Outgoing | None) -> None:
        """Put ``item`` for the next ``GetActions``, replacing one not yet fetched."""
        old = self._outbox
        if old is not None and old.error is None:
            self.num_unfetched += 1
        self._outbox = item
        if self.on_post is not None:
            self.on_post()

    def _observation(self, pending: Pending, report: QueueReport) -> dict[str, Any]:
        """The policy's inputs and the robot's estimated queue as ``__armory__`` state
        (every-tick mode: a waiting observation is handed back after about a tick)."""
        estimator = self.estimator
        state = RobotState(
            robot_id=self.name,
            action_index=report.action_index,
            actions_left=report.actions_left,
            chunk_start=report.chunk_start,
            control_hz=estimator.control_hz,
            min_execution_horizon=1,
            # Numbered from the observation's timestep, row 0 is the action the robot
            # executed when it took the observation: the client skips it.
            max_execution_horizon=(
                self.actions_per_chunk
                if self.plans_from_chunk_start
                else max(self.actions_per_chunk - 1, 1)
            ),
            observation_step=max(estimator.num_observations - 1, 0),
            defer_after_s=estimator.tick_s,
        )
        return {**pending.inputs, ARMORY_KEY: state.to_wire()}

    def _first_timestep(self, report: QueueReport) -> int:
        """The timestep of row 0 of the chunk computed from the observation of ``report``
        (as it arrived, not aged)."""
        return report.action_index if self.plans_from_chunk_start else report.timestep


async def serve(robot: LeRobotRobot, engine: ServerEngine) -> None:
    """Give the robot's newest observation to the engine until none is left; each answer
    goes to its outbox (an error concerns this robot alone)."""
    try:
        while (call := robot.next_call(engine.clock())) is not None:
            try:
                reply = await engine.infer(
                    robot.session,
                    call.observation,
                    received_s=call.sent_s,
                    planning_start=call.first_timestep,
                )
            except RequestError as exc:
                engine.count_error("lerobot", type(exc).__name__, session=robot.session)
                robot.refused(exc)
                continue
            robot.answered(call, reply)
    except SessionClosed:
        pass
    except Exception:
        logger.exception("LeRobot robot %s: serving failed", robot.peer)
        robot.failed()


def status_of(exc: RequestError) -> str:
    """The gRPC status name of an engine error."""
    if isinstance(exc, ObservationError):
        return "INVALID_ARGUMENT"
    if isinstance(exc, QueueStateError):
        return "FAILED_PRECONDITION"
    if isinstance(exc, ServerClosing):
        return "UNAVAILABLE"
    return "INTERNAL"  # PolicyError, or a failure of the server


def mismatch(instructions: PolicyInstructions, meta: PolicyMetadata) -> str | None:
    """Why the served policy cannot serve a robot with these instructions, or None.

    Called at SendPolicyInstructions (unless ``--lerobot.allow-mismatched-policy``): a
    robot asking for another LeRobot policy type or checkpoint than the served one would
    silently get the served one's actions; a robot with more joints than an action has
    values would fail later inside LeRobot's client, which plays action value i on joint
    i of its ``action_features`` (its ``observation.state`` names, for LeRobot's robots).
    A served policy that is not a LeRobot policy (``policy:mock``) has no type to
    compare, and one built from scratch (``--policy.random-weights``) no checkpoint.
    """
    served_type = meta.extra.get("lerobot_type")
    if isinstance(served_type, str) and instructions.policy_type != served_type:
        return (
            f"this server serves the LeRobot policy type {served_type!r} ({meta.name!r}), "
            f"not {instructions.policy_type!r}: set the robot's policy_type={served_type!r} "
            f"{ALLOW_MISMATCH}"
        )
    served_path = meta.extra.get("lerobot_checkpoint")
    asked_path = instructions.pretrained_name_or_path
    if isinstance(served_path, str) and not names_checkpoint(asked_path, served_path):
        return (
            f"this server serves the LeRobot checkpoint {served_path!r} ({meta.name!r}), "
            f"not {asked_path!r}: set the robot's pretrained_name_or_path to that directory "
            f"or its last folders (e.g. {PurePosixPath(served_path).name!r}) {ALLOW_MISMATCH}"
        )
    state = instructions.features.get("observation.state")
    joints = state.get("names") if isinstance(state, Mapping) else None
    if isinstance(joints, list | tuple) and len(joints) > meta.action_dim:
        return (
            f"the served policy {meta.name!r} returns actions of {meta.action_dim} values but "
            f"the robot has {len(joints)} joints {list(joints)}: LeRobot's client would run "
            f"out of action values {ALLOW_MISMATCH}"
        )
    return None


def names_checkpoint(asked: str, served: str) -> bool:
    """Whether a robot's ``pretrained_name_or_path`` names the served checkpoint directory:
    the same path, its last folders (``act_cube``, ``user/act_cube`` for
    ``/ckpt/user/act_cube``), or the Hugging Face repository id of a hub cache snapshot
    (``user/act_cube`` for ``.../models--user--act_cube/snapshots/<hash>``)."""
    asked_parts = PurePosixPath(asked.strip()).parts
    served_parts = PurePosixPath(served).parts
    if not asked_parts or asked_parts == ("/",):
        return False
    if asked_parts == served_parts[-len(asked_parts) :]:
        return True
    hub = [part for part in served_parts if part.startswith("models--")]
    return bool(hub) and asked.strip() == hub[-1].removeprefix("models--").replace("--", "/")


def _log_instructions(
    robot: LeRobotRobot, instructions: PolicyInstructions, served: str, horizon: int
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
