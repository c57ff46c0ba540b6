"""A GR00T client written from the protocol (docs/groot.md), for the GR00T door's tests.

A ZeroMQ REQ socket, msgpack frames with arrays as ``.npy`` bytes, the N1.6 call
shapes (``data`` as keyword map, ``[action, info]`` back) or the N1.5 ones (the
observation positionally, the action map back), an optional ``api_token``, and
a receive timeout (upstream's client has none).
"""

from __future__ import annotations

import functools
import io
import json
from typing import Any

import msgpack
import numpy as np
import zmq


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        buffer = io.BytesIO()
        np.save(buffer, obj, allow_pickle=False)
        return {"__ndarray_class__": True, "as_npy": buffer.getvalue()}
    raise TypeError(type(obj).__name__)


def _decode(obj: dict[str, Any], *, encoding: str) -> Any:
    """Upstream's object hook: N1.5 reads a ModalityConfig's ``as_json`` with
    ``json.loads`` (a map fails, TypeError), N1.6 as the fields' map (a str fails)."""
    if obj.get("__ndarray_class__"):
        return np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
    if obj.get("__ModalityConfig_class__"):
        raw = obj["as_json"]
        fields = json.loads(raw) if encoding == "n1.5" else dict(**raw)
        return {"as_json_type": type(raw).__name__, **fields}
    return obj


class GrootClient:
    """One robot: a REQ socket to ``tcp://host:port``."""

    def __init__(
        self,
        port: int,
        *,
        host: str = "127.0.0.1",
        api_token: str | None = None,
        encoding: str = "n1.6",
        timeout_ms: int = 10_000,
    ) -> None:
        self.encoding = encoding
        self.api_token = api_token
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.REQ)
        self.socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(f"tcp://{host}:{port}")

    def call(self, endpoint: str, data: Any = None) -> Any:
        request: dict[str, Any] = {"endpoint": endpoint}
        if data is not None:
            request["data"] = data
        if self.api_token is not None:
            request["api_token"] = self.api_token
        return self.send_raw(msgpack.packb(request, default=_encode, use_bin_type=True))

    def send_raw(self, frame: bytes) -> Any:
        self.socket.send(frame)
        decode = functools.partial(_decode, encoding=self.encoding)
        return msgpack.unpackb(self.socket.recv(), raw=False, object_hook=decode)

    def ping(self) -> Any:
        return self.call("ping")

    def get_action(self, observation: dict[str, Any]) -> Any:
        if self.encoding == "n1.6":
            return self.call("get_action", {"observation": observation, "options": None})
        return self.call("get_action", observation)

    def get_modality_config(self) -> Any:
        return self.call("get_modality_config")

    def reset(self) -> Any:
        return self.call("reset", {"options": None} if self.encoding == "n1.6" else None)

    def close(self) -> None:
        self.socket.close(linger=0)
        self.context.term()

    def __enter__(self) -> GrootClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def groot_observation(
    obs: dict[str, Any], encoding: str, task: str | None = None
) -> dict[str, Any]:
    """The mock policy's observation (two 224x224x3 images, an 8-float state) in GR00T's
    layout: cameras ``front`` and ``wrist``, state split into ``arm`` (6) and ``gripper`` (2)."""
    front, wrist = obs["observation/image"], obs["observation/wrist_image"]
    state = obs["observation/state"]
    if encoding == "n1.6":
        out: dict[str, Any] = {
            "video": {"front": front[None, None], "wrist": wrist[None, None]},
            "state": {"arm": state[None, None, :6], "gripper": state[None, None, 6:]},
        }
        if task is not None:
            out["language"] = {"task": [[task]]}
        return out
    flat: dict[str, Any] = {
        "video.front": front[None],
        "video.wrist": wrist[None],
        "state.arm": state[None, :6],
        "state.gripper": state[None, 6:],
    }
    if task is not None:
        flat["annotation.human.task_description"] = [task]
    return flat


# ---- the upstream clients' own flows, as their sources define them -------------------


def n15_service_flow(client: GrootClient, values: dict[str, Any]) -> dict[str, Any]:
    """Isaac-GR00T N1.5's client flow (scripts/inference_service.py --client): ask the
    modality config first and list its modalities, then one get_action with the flat
    observation; the action map comes back. ``values``: every flat stream the robot has."""
    configs = client.get_modality_config()
    assert set(configs) >= {"video", "state", "action"}
    return client.get_action(values)


def n16_open_loop_flow(client: GrootClient, values: dict[str, Any]) -> tuple[Any, Any]:
    """Isaac-GR00T N1.6's open-loop evaluation (gr00t/eval/open_loop_eval.py): ask the
    modality config first, build the nested observation from its ``modality_keys``
    (streams ``video.<key>`` and ``state.<key>`` given a batch axis, the language key
    as ``[[text]]``), get ``(action, info)`` and read each action key of the config.
    ``values``: every flat stream the robot has, named as N1.5 names them."""
    configs = client.get_modality_config()
    obs: dict[str, dict[str, Any]] = {}
    for modality in ("video", "state", "language"):
        obs[modality] = {}
        for key in configs[modality]["modality_keys"]:
            value = values[key if modality == "language" else f"{modality}.{key}"]
            obs[modality][key] = [value] if modality == "language" else value[None]
    action, info = client.get_action(obs)
    return {key: action[key] for key in configs["action"]["modality_keys"]}, info


def n16_rollout_flow(client: GrootClient, observations: list[dict[str, Any]]) -> list[Any]:
    """Isaac-GR00T N1.6's simulation rollout (gr00t/eval/rollout_policy.py): reset the
    policy, then one get_action per step; the action maps in order."""
    client.reset()
    return [client.get_action(obs)[0] for obs in observations]
