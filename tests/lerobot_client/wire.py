"""Armory-side test helpers for the LeRobot door (they run in Armory's venv, not LeRobot's).

- :func:`install_upstream_classes` puts stand-ins of LeRobot's async-inference data
  classes under upstream's module path (``lerobot.async_inference.helpers``), so that
  the standard pickler writes the same pickles LeRobot's ``RobotClient`` writes.
- :class:`AsyncInferenceClient` is a minimal synchronous gRPC client of
  ``transport.AsyncInference`` (LeRobot's client calls, without LeRobot).
"""

from __future__ import annotations

import pickle
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import pytest

from armory.transports.lerobot_proto import services_pb2 as pb
from armory.transports.lerobot_protocol import MAX_MESSAGE_BYTES, split_payload

HELPERS = "lerobot.async_inference.helpers"


@dataclass
class TimedObservation:
    timestamp: float
    timestep: int
    observation: dict[str, Any]
    must_go: bool = False


@dataclass
class RemotePolicyConfig:
    policy_type: str
    pretrained_name_or_path: str
    lerobot_features: dict[str, Any]
    actions_per_chunk: int
    device: str = "cpu"
    rename_map: dict[str, str] = field(default_factory=dict)


def install_upstream_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the stand-ins importable as upstream's classes for this test."""
    for name in ("lerobot", "lerobot.async_inference"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    helpers = types.ModuleType(HELPERS)
    for cls in (TimedObservation, RemotePolicyConfig):
        monkeypatch.setattr(cls, "__module__", HELPERS)
        setattr(helpers, cls.__name__, cls)
    monkeypatch.setitem(sys.modules, HELPERS, helpers)


def robot_features(joints: list[str], cameras: dict[str, tuple[int, int, int]]) -> dict:
    """``lerobot_features`` as LeRobot's client builds them (``hw_to_dataset_features``)."""
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": (len(joints),), "names": joints}
    }
    for name, shape in cameras.items():
        features[f"observation.images.{name}"] = {
            "dtype": "image",
            "shape": shape,
            "names": ["height", "width", "channels"],
            "info": {"is_depth_map": False},
        }
    return features


def instructions(
    features: dict,
    *,
    actions_per_chunk: int = 10,
    policy_type: str = "act",
    pretrained_name_or_path: str = "user/model",
) -> bytes:
    config = RemotePolicyConfig(policy_type, pretrained_name_or_path, features, actions_per_chunk)
    return pickle.dumps(config)


def raw_observation(
    seed: int, joints: list[str], cameras: dict[str, tuple[int, int, int]], task: str = "pick"
) -> dict[str, Any]:
    """A robot's raw observation: joint floats, uint8 camera frames, the task."""
    rng = np.random.default_rng(seed)
    raw: dict[str, Any] = {name: float(rng.standard_normal()) for name in joints}
    for name, shape in cameras.items():
        raw[name] = rng.integers(0, 256, size=shape, dtype=np.uint8)
    raw["task"] = task
    return raw


class AsyncInferenceClient:
    """LeRobot's four calls over one channel of its own (one robot: one gRPC peer)."""

    def __init__(
        self,
        port: int,
        *,
        timeout_s: float = 10.0,
        api_key: str | None = None,
        root_certificates: bytes | None = None,
    ) -> None:
        """``api_key`` goes in every call's metadata (LeRobot's own client sends none);
        ``root_certificates`` (PEM) opens a TLS channel trusting them."""
        target = f"127.0.0.1:{port}"
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # Its own connection: channels of one process otherwise share one, and the
            # door tells robots apart by their connection (gRPC peer).
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if root_certificates is None:
            self.channel = grpc.insecure_channel(target, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self.channel = grpc.secure_channel(target, credentials, options=options)
        self.metadata = None if api_key is None else (("authorization", f"Api-Key {api_key}"),)
        self.timeout_s = timeout_s
        service = "/transport.AsyncInference/"
        empty = pb.Empty.SerializeToString
        self._ready = self.channel.unary_unary(
            service + "Ready", request_serializer=empty, response_deserializer=pb.Empty.FromString
        )
        self._instructions = self.channel.unary_unary(
            service + "SendPolicyInstructions",
            request_serializer=pb.PolicySetup.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )
        self._observations = self.channel.stream_unary(
            service + "SendObservations",
            request_serializer=pb.Observation.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )
        self._actions = self.channel.unary_unary(
            service + "GetActions",
            request_serializer=empty,
            response_deserializer=pb.Actions.FromString,
        )

    def ready(self) -> None:
        self._ready(pb.Empty(), timeout=self.timeout_s, metadata=self.metadata)

    def send_instructions(self, payload: bytes) -> None:
        self._instructions(
            pb.PolicySetup(data=payload), timeout=self.timeout_s, metadata=self.metadata
        )

    def send_payload(self, payload: bytes, chunk_bytes: int | None = None) -> None:
        """Stream ``payload`` as upstream does (BEGIN/MIDDLE/END, 2 MiB chunks)."""
        pieces = (
            split_payload(payload) if chunk_bytes is None else split_payload(payload, chunk_bytes)
        )
        messages = [pb.Observation(transfer_state=s, data=d) for s, d in pieces]
        self._observations(iter(messages), timeout=self.timeout_s, metadata=self.metadata)

    def send_messages(self, messages: list[tuple[int, bytes]]) -> None:
        """Stream raw (transfer_state, data) messages (for malformed streams)."""
        self._observations(
            iter([pb.Observation(transfer_state=s, data=d) for s, d in messages]),
            timeout=self.timeout_s,
            metadata=self.metadata,
        )

    def send_observation(self, obs: TimedObservation) -> None:
        self.send_payload(pickle.dumps(obs))

    def get_actions(self) -> bytes:
        return self._actions(pb.Empty(), timeout=self.timeout_s, metadata=self.metadata).data

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AsyncInferenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
