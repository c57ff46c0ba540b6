"""The GR00T door without sockets: decoded requests in, reply frames and engine calls out.

:class:`GrootDoorCore` holds what the door knows of its robots (one per ZeroMQ
identity, in a :class:`~armory.transports.sessions.SessionRegistry` with the idle
sweep) and answers every endpoint: ``ping``, ``kill``, ``get_modality_config`` and
``reset`` at once, ``get_action`` as an :class:`ActionCall` that the socket side hands
to the engine and turns back into a frame with :meth:`GrootDoorCore.action_reply`.
Every failure becomes the ``{"error": ...}`` frame of :meth:`GrootDoorCore.refusal`.
No I/O and no clock: the socket side (:mod:`armory.transports.groot_zmq`) passes
frames and the time.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from armory.core.errors import INTERNAL_ERROR as INTERNAL
from armory.core.errors import ObservationError, RequestError, SessionClosed
from armory.engine.server_engine import Reply, ServerEngine
from armory.engine.session import Session
from armory.transports.groot_adapter import GrootAdapter, MappedObservation, StreamNames
from armory.transports.groot_config import GrootDoorConfig
from armory.transports.groot_protocol import (
    ENDPOINTS,
    UNAUTHORIZED,
    Encoding,
    GrootProtocolError,
    GrootRequest,
    encode_reply,
    error_reply,
    get_action_parts,
    reset_encoding,
)
from armory.transports.sessions import SessionRegistry

logger = logging.getLogger("armory.transports.groot_zmq")
"""The door's logger: its lines keep the name they are filtered by."""

BUSY = (
    "more requests are in progress than robots may connect (--server.max-connections); "
    "send one request at a time"
)
"""Error of a request past the door's limit of requests in progress."""
SESSION_CLOSED = "the session was closed; send the request again"


@dataclass
class GrootRobot:
    """What the door remembers of one robot (one REQ socket)."""

    session: Session
    encoding: Encoding | None = None
    """The encoding it revealed: by its last get_action, or an N1.6 ``reset`` (None before)."""
    streams: StreamNames | None = None
    """The streams of its last get_action, as get_modality_config lists them."""


@dataclass(frozen=True)
class Answer:
    """A reply ready at once."""

    frame: bytes
    kill: bool = False
    """The operator allowed ``kill`` and a robot sent it: the server stops after replying."""


@dataclass(frozen=True)
class ActionCall:
    """A ``get_action`` for the engine: ``observation`` in the policy's terms."""

    robot: GrootRobot
    mapped: MappedObservation
    encoding: Encoding

    @property
    def session(self) -> Session:
        return self.robot.session

    @property
    def observation(self) -> Mapping[str, Any]:
        return self.mapped.observation

    def in_robot_terms(self, exc: ObservationError) -> ObservationError:
        """The engine's observation error, naming the robot's streams."""
        return ObservationError(self.mapped.in_robot_terms(str(exc)))


class GrootDoorCore:
    """Answers GR00T requests of every robot of the door."""

    def __init__(
        self,
        engine: ServerEngine,
        config: GrootDoorConfig,
        *,
        can_stop_server: bool = True,
        # Security
        api_token: str | None = None,
    ) -> None:
        """``can_stop_server``: whether the socket side can honour ``kill`` (it also needs
        ``config.allow_kill``); ``api_token``: the token every request must carry (None:
        any request is served)."""
        self.engine = engine
        self.config = config
        self.allow_kill = config.allow_kill and can_stop_server
        self.api_token = api_token or None
        meta = engine.metadata
        self.adapter = GrootAdapter(config.layout, meta.inputs, meta.action_horizon)
        self.robots: SessionRegistry[bytes, GrootRobot] = SessionRegistry(
            engine,
            door="groot",
            make=lambda _identity, session: GrootRobot(session=session),
            max_robots=engine.config.max_connections,
            idle_timeout_s=config.session_timeout_s,
        )
        self._last_encoding: Encoding = "n1.6"
        """The encoding the door last heard a robot reveal (see _encoding)."""

    def receive(
        self, identity: bytes, request: GrootRequest, received_s: float
    ) -> Answer | ActionCall:
        """One request of the robot behind ``identity``.

        Raises GrootProtocolError or RequestError (:meth:`refusal` makes their frame).
        """
        self._check_token(request)
        endpoint = request.endpoint
        if endpoint == "ping":
            return Answer(encode_reply({"status": "ok", "message": "Server is running"}))
        if endpoint == "kill":
            if not self.allow_kill:
                raise GrootProtocolError(
                    "kill is disabled on this server (the operator enables it with "
                    "--groot.allow-kill)"
                )
            return Answer(
                encode_reply({"status": "ok", "message": "Server is shutting down"}), kill=True
            )
        peer = f"zmq:{identity.hex()}"
        if endpoint == "reset":
            # A new episode: the robot's queue starts empty; what it revealed of itself stays.
            before = self.robots.get(identity)
            self.robots.close(identity, "it reset")
            robot = self.robots.robot(identity, peer=peer, now_s=received_s)
            if before is not None:
                robot.encoding, robot.streams = before.encoding, before.streams
            robot.encoding = self._heard(reset_encoding(request.data)) or robot.encoding
            return Answer(encode_reply({"status": "ok", "message": "reset"}))
        robot = self.robots.robot(identity, peer=peer, now_s=received_s)
        if endpoint == "get_modality_config":
            configs = self.adapter.modality_configs(self._encoding(robot), robot.streams)
            return Answer(encode_reply(configs))
        if endpoint != "get_action":
            raise GrootProtocolError(
                f"Unknown endpoint: {endpoint!r}; valid: {', '.join(ENDPOINTS)}"
            )
        obs, encoding = get_action_parts(request.data, self.config.encoding)
        robot.encoding = self._heard(encoding)
        mapped = self.adapter.observation(obs, encoding)
        robot.streams = mapped.streams
        return ActionCall(robot=robot, mapped=mapped, encoding=encoding)

    def action_reply(self, call: ActionCall, reply: Reply, sent_s: float) -> bytes:
        """The frame answering ``call`` with the engine's reply (counted as sent at ``sent_s``)."""
        actions = self.adapter.actions(reply.actions, call.encoding)
        if call.encoding == "n1.5":
            frame = encode_reply(actions)
        else:
            frame = encode_reply([actions, _info(reply, self.engine.metadata.name)])
        self.engine.reply_sent(call.session, reply, sent_s)
        return frame

    def refusal(self, exc: Exception, identity: bytes | None = None) -> bytes:
        """The error frame of a request that failed with ``exc`` (counted and logged);
        ``identity``: the robot that sent it, whose row counts it too (when it is known)."""
        if isinstance(exc, GrootProtocolError | RequestError):
            robot = None if identity is None else self.robots.get(identity)
            session = None if robot is None else robot.session
            self.engine.count_error("groot", type(exc).__name__, session=session)
            logger.info("GR00T request refused: %s", exc)
            return error_reply(str(exc))
        if isinstance(exc, SessionClosed):
            return error_reply(SESSION_CLOSED)
        logger.error("GR00T request failed", exc_info=exc)
        return error_reply(INTERNAL)

    def close(self) -> None:
        """Close every robot's session (the door stops)."""
        self.robots.close_all("the server stops")

    def _check_token(self, request: GrootRequest) -> None:
        expected = self.api_token
        if expected is None:
            return
        given = (request.api_token or "").encode()
        if not hmac.compare_digest(given, expected.encode()):
            raise GrootProtocolError(UNAUTHORIZED)

    def _heard(self, encoding: Encoding | None) -> Encoding | None:
        """Remember the encoding a robot revealed as the door's last one (see _encoding)."""
        if encoding is not None:
            self._last_encoding = encoding
        return encoding

    def _encoding(self, robot: GrootRobot) -> Encoding:
        """How to answer a robot's get_modality_config: the configured encoding; under auto,
        the one the robot revealed (by its last get_action, or an N1.6 reset), else the one
        the door last heard from any robot, else N1.6. Both clients ask for the config with
        byte-identical requests and no reply decodes in both (docs/groot.md), so a robot
        not yet heard from is assumed to be like the others."""
        configured = self.config.encoding
        if configured != "auto":
            return configured  # type: ignore[return-value]
        return robot.encoding or self._last_encoding


def _info(reply: Reply, policy: str) -> dict[str, Any]:
    """The info map of an N1.6 reply: where the chunk came from and how long it took."""
    info: dict[str, Any] = {
        "policy": policy,
        "batch_size": reply.batch_size,
        "queue_ms": 1e3 * reply.wait_s,
        "infer_ms": 1e3 * reply.forward_s,
    }
    if reply.noise_sha256 is not None:
        info["noise_sha256"] = reply.noise_sha256
    return info
