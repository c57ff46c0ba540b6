"""A robot's LeRobot async-inference client for ``armory eval --door lerobot``: the
runtime's `InferClient` over LeRobot's gRPC protocol (``transport.AsyncInference``),
speaking as LeRobot's ``RobotClient`` does (lerobot 0.6.1, docs/lerobot.md).

- **connect**: ``Ready``, then ``SendPolicyInstructions`` with the robot's
  ``lerobot_features`` (its state names and cameras), on a channel of its own (the door
  tells robots apart by their connection).
- **infer**: one ``TimedObservation`` (the raw observation, the timestep of the newest
  executed action, ``must_go`` when the queue is empty) streamed in 2 MiB chunks, then
  ``GetActions`` until the chunk answering it comes (:func:`answers`). As LeRobot's
  client does, the actions whose timestep the robot has already executed are dropped;
  the rest land at the robot's current action index.

The environment's observation, keyed by the policy's input names, travels as a LeRobot
robot's raw observation (:class:`LeRobotLayout`): image inputs as cameras of the same
name, the policy's one state vector as named floats, other numeric inputs as arrays the
door passes through, the task as ``task``. The door must map it back the same way
(:meth:`LeRobotLayout.door_mapping`; the in-process server's door does).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from armory_client import ConnectTimeout, RequestTimeout, ServerError, detach

from armory.eval.mapping import MappingError
from armory.transports.lerobot_protocol import (
    IMAGE_FEATURE_PREFIX,
    MAX_MESSAGE_BYTES,
    STATE_FEATURE,
    TASK_KEY,
    ObservationMapping,
    PolicyInstructions,
    TimedAction,
    TimedObservation,
    decode_actions,
    encode_instructions,
    encode_observation,
    split_payload,
)

SERVICE_PATH = "/transport.AsyncInference/"


@dataclass(frozen=True)
class LeRobotLayout:
    """Where each of the policy's inputs travels in a LeRobot raw observation."""

    cameras: tuple[str, ...]
    """Image inputs, each sent as a camera of the same name."""
    state_input: str
    """The vector input sent as named floats ``<state_input>.<i>`` (the robot's joints)."""
    pass_through: tuple[str, ...]
    """Other numeric inputs, sent as arrays under their own names."""

    def door_mapping(self) -> ObservationMapping:
        """The door's mapping that reads this layout back into the policy's inputs."""
        return ObservationMapping(
            images=tuple(f"{camera}={camera}" for camera in self.cameras),
            state_input=self.state_input,
            pass_through=self.pass_through,
        )

    def state_names(self, obs: Mapping[str, Any]) -> list[str]:
        width = np.asarray(obs[self.state_input]).size
        return [f"{self.state_input}.{i}" for i in range(width)]

    def features(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """``lerobot_features`` of a robot whose observations look like ``obs``."""
        names = self.state_names(obs)
        features: dict[str, Any] = {
            STATE_FEATURE: {"dtype": "float32", "shape": (len(names),), "names": names}
        }
        for camera in self.cameras:
            if camera in obs:
                features[IMAGE_FEATURE_PREFIX + camera] = {
                    "dtype": "image",
                    "shape": tuple(np.asarray(obs[camera]).shape),
                    "names": ["height", "width", "channels"],
                }
        return features

    def raw(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """The raw LeRobot observation of ``obs`` (keyed by the policy's input names)."""
        state = np.asarray(obs[self.state_input], dtype=np.float64).reshape(-1)
        raw: dict[str, Any] = dict(zip(self.state_names(obs), map(float, state), strict=True))
        for key in (*self.cameras, *self.pass_through):
            if key in obs:
                raw[key] = np.asarray(obs[key])
        task = next((value for value in obs.values() if isinstance(value, str)), None)
        if task is not None:
            raw[TASK_KEY] = task
        return raw


def lerobot_layout(inputs: Mapping[str, Any], *, env: str) -> LeRobotLayout:
    """The layout for a policy declaring ``inputs`` (metadata-frame form: ``shape``,
    ``dtype``, ``required``); raises MappingError unless it declares exactly one required
    numeric vector input (the door's state vector)."""
    cameras, vectors, others = [], [], []
    for key, spec in inputs.items():
        spec = spec if isinstance(spec, Mapping) else {}
        dtype, shape = spec.get("dtype"), spec.get("shape") or []
        if dtype == "str":
            continue
        if dtype == "uint8" and len(shape) == 3:
            cameras.append(key)
        elif len(shape) == 1 and spec.get("required", True):
            vectors.append(key)
        else:
            others.append(key)
    if len(vectors) != 1:
        raise MappingError(
            f"--door lerobot: a LeRobot robot sends one state vector (its joints); the "
            f"policy declares {len(vectors)} required vector inputs "
            f"({', '.join(vectors) or 'none'}), so env:{env}'s observation cannot travel "
            "through the LeRobot door"
        )
    return LeRobotLayout(cameras=tuple(cameras), state_input=vectors[0], pass_through=tuple(others))


class LeRobotInferClient:
    """One robot's gRPC channel to ``host:port``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        layout: LeRobotLayout,
        features: Mapping[str, Any],
        policy_type: str,
        actions_per_chunk: int,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        """``features``: the robot's ``lerobot_features`` (:meth:`LeRobotLayout.features`);
        ``policy_type``: what it asks for (the served policy's name: the door serves its one
        policy and never loads another); ``api_key`` goes in every call's metadata
        (LeRobot's own client sends none)."""
        self.target = f"{host}:{port}"
        self._layout = layout
        self._instructions = PolicyInstructions(
            policy_type=policy_type,
            pretrained_name_or_path=policy_type,
            features=dict(features),
            actions_per_chunk=actions_per_chunk,
            device="cpu",
            rename_map={},
        )
        self._metadata = None if api_key is None else (("authorization", f"Api-Key {api_key}"),)
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._channel: Any = None
        self._calls: dict[str, Any] = {}
        """The four RPCs by name (set by :meth:`connect`)."""
        self._pb: Any = None
        """The door's protobuf messages (imported by :meth:`connect`: grpc is optional)."""

    @property
    def metadata(self) -> dict[str, Any]:
        """LeRobot's door sends no metadata."""
        return {}

    async def connect(self) -> None:
        """Open the channel, ``Ready`` and send the policy instructions; a door that does
        not answer raises ConnectTimeout, one that refuses the robot ServerError."""
        import grpc
        import grpc.aio

        from armory.transports.lerobot_proto import services_pb2 as pb

        self._channel = grpc.aio.insecure_channel(
            self.target,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # A connection of its own: the door tells robots apart by it.
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        empty = pb.Empty
        for name, kind, request, response in (
            ("Ready", "unary_unary", empty, empty),
            ("SendPolicyInstructions", "unary_unary", pb.PolicySetup, empty),
            ("SendObservations", "stream_unary", pb.Observation, empty),
            ("GetActions", "unary_unary", empty, pb.Actions),
        ):
            self._calls[name] = getattr(self._channel, kind)(
                SERVICE_PATH + name,
                request_serializer=request.SerializeToString,
                response_deserializer=response.FromString,
            )
        self._pb = pb
        try:
            await self._calls["Ready"](
                empty(),
                timeout=self._connect_timeout_s,
                metadata=self._metadata,
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ConnectTimeout(
                    f"no LeRobot door answered at {self.target}: {exc.details()}"
                ) from None
            raise ServerError(f"{exc.code().name}: {exc.details()}") from None
        await self._call(
            "SendPolicyInstructions", pb.PolicySetup(data=encode_instructions(self._instructions))
        )

    async def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """One observation; returns ``{"actions": (n, dim) float32}``: its chunk from the
        robot's current action index on."""
        observation, state = detach(dict(obs))
        action_index = 0 if state is None else state.action_index
        timestep = max(action_index - 1, 0)  # the newest executed action (LeRobot's)
        timed = TimedObservation(
            timestamp_s=time.time(),
            timestep=timestep,
            observation=self._layout.raw(observation),
            must_go=state is None or state.actions_left == 0,
        )
        messages = [
            self._pb.Observation(transfer_state=transfer, data=data)
            for transfer, data in split_payload(encode_observation(timed))
        ]
        await self._call("SendObservations", iter(messages))
        deadline_s = time.monotonic() + self._request_timeout_s
        while (left_s := deadline_s - time.monotonic()) > 0:
            reply = await self._call("GetActions", self._pb.Empty(), timeout_s=left_s)
            if not reply.data:
                continue  # the door answers empty after its wait; ask again
            actions = decode_actions(reply.data)
            if not answers(actions, timed):
                continue  # a chunk for an older observation
            # LeRobot's client keeps the actions past the newest one it executed.
            rows = [a.action for a in actions if a.timestep >= action_index]
            if not rows:
                raise ServerError(f"the chunk for timestep {timestep} holds no new action")
            return {"actions": np.stack(rows).astype(np.float32)}
        raise RequestTimeout(
            f"no chunk from {self.target} for timestep {timestep} in {self._request_timeout_s} s"
        )

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _call(self, name: str, request: Any, *, timeout_s: float | None = None) -> Any:
        """One RPC; a refusal is a ServerError naming the status and the door's reason."""
        import grpc.aio

        try:
            return await self._calls[name](
                request,
                timeout=timeout_s or self._request_timeout_s,
                metadata=self._metadata,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RequestTimeout(f"{name} to {self.target}: {exc.details()}") from None
            raise ServerError(f"{name}: {exc.code().name}: {exc.details()}") from None


ANSWER_TOLERANCE_S = 1e-4
"""How far the time a chunk's rows count back to may be from its observation's timestamp
(rounding of the door's arithmetic; one robot's observations lie far further apart)."""


def answers(actions: list[TimedAction], observation: TimedObservation) -> bool:
    """Whether a chunk answers ``observation``: the door numbers its rows from the
    observation's timestep, or from the next one (a policy planning from the chunk start
    it is told), and times each row at the observation's timestamp plus a tick per step
    past the observation's timestep."""
    if not actions or actions[0].timestep - observation.timestep not in (0, 1):
        return False
    first = actions[0]
    if first.timestep == observation.timestep:
        return abs(first.timestamp_s - observation.timestamp_s) <= ANSWER_TOLERANCE_S
    if len(actions) < 2:
        return first.timestamp_s > observation.timestamp_s  # one row: no tick to count back
    tick_s = actions[1].timestamp_s - first.timestamp_s
    return abs(first.timestamp_s - tick_s - observation.timestamp_s) <= ANSWER_TOLERANCE_S
