"""One fuzzing client per front door: encode a (mutated) message, send it, classify what
came back.

Every input gets one of the :data:`OUTCOMES`. ``reply`` and ``refused`` (a clear error
to that robot alone) and ``closed`` (the connection closed, e.g. a frame over the
limit) are what a server may answer; the :data:`FAILURES` are not: ``internal`` (the
server's generic fault text, gRPC UNKNOWN or INTERNAL), ``schedule_failed`` (a
scheduling failure reached a robot), ``no_reply`` (nothing within the timeout).
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
from armory_client.wire import packb

from armory.core.door_names import DOOR_NAMES
from armory.fuzz.messages import (
    LEROBOT_PICKLE_PROTOCOL,
    groot_request,
    lerobot_instructions_state,
    lerobot_observation_state,
    lerobot_pickle,
    openpi_observation,
)

OUTCOMES = ("reply", "refused", "closed", "internal", "schedule_failed", "no_reply")
FAILURES = frozenset({"internal", "schedule_failed", "no_reply"})
DOORS = DOOR_NAMES

_INTERNAL_TEXT = "internal server error"
_SCHEDULE_TEXT = "failed to schedule"


@dataclass(frozen=True)
class Wire:
    """One encoded input: which call carries it (LeRobot) and its bytes."""

    kind: str
    data: bytes


def classify_text(text: str) -> str:
    """The outcome of an error text."""
    if _SCHEDULE_TEXT in text:
        return "schedule_failed"
    if _INTERNAL_TEXT in text:
        return "internal"
    return "refused"


class FuzzDoor:
    """A door's fuzzing client: valid messages, their encoding, one send at a time."""

    name = ""

    def valid_message(self, index: int) -> Any:
        """The ``index``-th valid message (a tree the mutator may change)."""
        raise NotImplementedError

    def encode(self, message: Any) -> Wire:
        """The bytes of ``message``; raises (TypeError, ValueError, OverflowError) when
        the door's encoding cannot carry it."""
        raise NotImplementedError

    def send(self, wire: Wire) -> str:
        """Send one input and wait for its answer; returns its outcome."""
        raise NotImplementedError

    def close(self) -> None:
        """Called once at the end."""


class OpenpiDoor(FuzzDoor):
    """WebSocket frames of packed observation maps; a connection lasts until an error."""

    name = "openpi"

    def __init__(self, port: int, *, timeout_s: float) -> None:
        self.uri = f"ws://127.0.0.1:{port}"
        self.timeout_s = timeout_s
        self._ws: Any = None
        self._connection = contextlib.ExitStack()

    def valid_message(self, index: int) -> Any:
        return openpi_observation(index, robot_id=f"fuzz-{index % 4}")

    def encode(self, message: Any) -> Wire:
        return Wire("frame", packb(message))

    def send(self, wire: Wire) -> str:
        from websockets.exceptions import ConnectionClosed, InvalidStatus
        from websockets.sync.client import connect

        try:
            if self._ws is None:
                self._connection = contextlib.ExitStack()
                self._ws = self._connection.enter_context(
                    connect(self.uri, compression=None, max_size=None, open_timeout=self.timeout_s)
                )
                self._ws.recv(timeout=self.timeout_s)  # the metadata frame
            self._ws.send(wire.data)
            reply = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            self.close()
            return "no_reply"
        except (ConnectionClosed, InvalidStatus, OSError):
            self.close()
            return "closed"
        if isinstance(reply, str):
            self.close()
            return classify_text(reply)
        return "reply"

    def close(self) -> None:
        if self._ws is not None:
            self._ws = None
            self._connection.close()


class GrootDoor(FuzzDoor):
    """A REQ socket with a receive timeout: every request must get exactly one reply."""

    name = "groot"

    def __init__(self, port: int, *, timeout_s: float) -> None:
        import zmq

        self._zmq = zmq
        self.address = f"tcp://127.0.0.1:{port}"
        self.timeout_s = timeout_s
        self._context = zmq.Context()
        self._socket: Any = None

    def valid_message(self, index: int) -> Any:
        return groot_request(index)

    def encode(self, message: Any) -> Wire:
        from armory.transports.groot_protocol import encode_reply

        return Wire("frame", encode_reply(message))

    def send(self, wire: Wire) -> str:
        zmq = self._zmq
        if self._socket is None:
            self._socket = self._context.socket(zmq.REQ)
            self._socket.setsockopt(zmq.LINGER, 0)
            self._socket.setsockopt(zmq.RCVTIMEO, int(self.timeout_s * 1000))
            self._socket.connect(self.address)
        self._socket.send(wire.data)
        try:
            reply = self._socket.recv()
        except zmq.Again:
            self._socket.close(linger=0)
            self._socket = None
            return "no_reply"
        try:
            decoded = msgpack.unpackb(reply, raw=False, strict_map_key=False)
        except Exception:
            return "internal"  # a reply the client cannot read
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            return classify_text(decoded["error"])
        return "reply"

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
        self._context.term()


class LeRobotDoor(FuzzDoor):
    """One gRPC channel (one robot): Ready and valid instructions first, then mutated
    observations and now and then instructions; every few inputs a GetActions."""

    name = "lerobot"

    def __init__(self, port: int, *, timeout_s: float, fetch_every: int = 8) -> None:
        import grpc

        from armory.transports.lerobot_proto import services_pb2 as pb
        from armory.transports.lerobot_protocol import MAX_MESSAGE_BYTES, split_payload

        self._grpc, self._pb, self._split = grpc, pb, split_payload
        self.timeout_s = timeout_s
        self.fetch_every = fetch_every
        self._num_sent = 0
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}",
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        service = "/transport.AsyncInference/"
        empty = pb.Empty
        self._ready = self.channel.unary_unary(
            service + "Ready",
            request_serializer=empty.SerializeToString,
            response_deserializer=empty.FromString,
        )
        self._instructions = self.channel.unary_unary(
            service + "SendPolicyInstructions",
            request_serializer=pb.PolicySetup.SerializeToString,
            response_deserializer=empty.FromString,
        )
        self._observations = self.channel.stream_unary(
            service + "SendObservations",
            request_serializer=pb.Observation.SerializeToString,
            response_deserializer=empty.FromString,
        )
        self._actions = self.channel.unary_unary(
            service + "GetActions",
            request_serializer=empty.SerializeToString,
            response_deserializer=pb.Actions.FromString,
        )
        self._ready(empty(), timeout=timeout_s)
        self._instructions(
            pb.PolicySetup(data=lerobot_pickle("RemotePolicyConfig", lerobot_instructions_state())),
            timeout=timeout_s,
        )

    def valid_message(self, index: int) -> Any:
        if index % 50 == 49:
            return {"RemotePolicyConfig": lerobot_instructions_state()}
        return {"TimedObservation": lerobot_observation_state(index, index, index / 30)}

    def encode(self, message: Any) -> Wire:
        if isinstance(message, dict) and len(message) == 1:
            ((name, state),) = message.items()
            if name in ("TimedObservation", "RemotePolicyConfig"):
                kind = "instructions" if name == "RemotePolicyConfig" else "observation"
                return Wire(kind, lerobot_pickle(name, state))
        return Wire("observation", pickle.dumps(message, protocol=LEROBOT_PICKLE_PROTOCOL))

    def send(self, wire: Wire) -> str:
        pb = self._pb
        self._num_sent += 1
        if wire.kind == "instructions":
            setup = pb.PolicySetup(data=wire.data)
            outcome = self._call(lambda: self._instructions(setup, timeout=self.timeout_s))
        else:
            pieces = [pb.Observation(transfer_state=s, data=d) for s, d in self._split(wire.data)]
            outcome = self._call(lambda: self._observations(iter(pieces), timeout=self.timeout_s))
        if self._num_sent % self.fetch_every == 0:
            fetched = self._call(lambda: self._actions(pb.Empty(), timeout=self.timeout_s))
            if fetched != "reply" and fetched != "refused":
                return fetched
        return outcome

    def _call(self, call: Callable[[], Any]) -> str:
        grpc = self._grpc
        try:
            call()
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return "no_reply"
            if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
                return "internal"
            return classify_text(exc.details() or "")
        return "reply"

    def close(self) -> None:
        self.channel.close()


def open_door(name: str, port: int, *, timeout_s: float) -> FuzzDoor:
    """The fuzzing client of door ``name`` (one of :data:`DOORS`)."""
    if name == "openpi":
        return OpenpiDoor(port, timeout_s=timeout_s)
    if name == "groot":
        return GrootDoor(port, timeout_s=timeout_s)
    if name == "lerobot":
        return LeRobotDoor(port, timeout_s=timeout_s)
    raise ValueError(f"unknown door {name!r}; valid: {', '.join(DOORS)}")


def random_frame(rng: np.random.Generator) -> bytes:
    """Bytes that are no message at all."""
    return rng.bytes(int(rng.integers(0, 256)))
