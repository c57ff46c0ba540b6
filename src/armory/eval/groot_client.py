"""A robot's GR00T client for ``armory eval --door groot``: the runtime's `InferClient`
over GR00T's ZeroMQ REQ/REP protocol (N1.6 shapes, docs/groot.md).

Each observation goes out as one ``get_action`` request: camera images as video
streams ``(1, 1, H, W, C)``, numeric entries as state streams ``(1, 1, D)`` in the
order the environment lists them (the door concatenates them into the policy's
state vector), the task as the language entry; privileged entries and the Armory
queue state are left out (a GR00T robot is a plain client to the server). The reply
``[action_map, info]`` becomes ``{"actions": (horizon, dim)}``. A REQ socket that
timed out is replaced, since it cannot send again before its reply.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Mapping
from typing import Any

import numpy as np
from armory_client import ConnectTimeout, RequestTimeout, ServerError, detach
from armory_client.wire.codec import unpackb

from armory.eval.environment import PRIVILEGED_PREFIX
from armory.eval.mapping import MappingError
from armory.transports.groot_adapter import LANGUAGE_KEY
from armory.transports.groot_protocol import encode_reply


def stream_name(key: str) -> str:
    """The GR00T stream name of an environment entry (``observation.state`` -> ``state``)."""
    return key.removeprefix("observation.").replace("/", "_")


def to_groot(obs: Mapping[str, Any]) -> dict[str, Any]:
    """The N1.6 observation map of an environment observation."""
    video: dict[str, np.ndarray] = {}
    state: dict[str, np.ndarray] = {}
    language: dict[str, list[list[str]]] = {}
    for key, value in obs.items():
        if key.startswith(PRIVILEGED_PREFIX):
            continue
        if isinstance(value, str):
            language[LANGUAGE_KEY] = [[value]]
            continue
        array = np.asarray(value)
        if array.dtype == np.uint8 and array.ndim == 3:
            video[stream_name(key)] = array[None, None]
        else:
            state[stream_name(key)] = array.astype(np.float32).reshape(1, 1, -1)
    return {"video": video, "state": state, "language": language}


def state_width(obs: Mapping[str, Any]) -> int:
    """Values the door concatenates into the policy's state vector from ``obs``."""
    streams = to_groot(obs)["state"]
    return sum(int(array.shape[-1]) for array in streams.values())


def check_groot_inputs(obs: Mapping[str, Any], inputs: Mapping[str, Any], *, env: str) -> None:
    """Raise MappingError unless the door can fill ``inputs`` from ``obs``: the policy
    declares one float state vector as wide as the environment's state streams
    together (cameras and the task are matched by the door's layout)."""
    vectors = {
        key: spec
        for key, spec in inputs.items()
        if isinstance(spec, Mapping)
        and spec.get("dtype") not in ("str", "uint8")
        and spec.get("required", True)
    }
    width = state_width(obs)
    shapes = [spec.get("shape") for spec in vectors.values()]
    if len(vectors) != 1 or shapes[0] != [width]:
        declared = ", ".join(f"{k} {s.get('dtype')} {s.get('shape')}" for k, s in vectors.items())
        raise MappingError(
            f"--door groot: env:{env}'s state streams hold {width} values, concatenated into "
            f"the policy's one state vector; the policy declares required numeric inputs: "
            f"{declared or 'none'}"
        )


def _decode(obj: dict[str, Any]) -> Any:
    if obj.get("__ndarray_class__") is True:
        return np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
    return obj


class GrootInferClient:
    """One robot's REQ socket to ``tcp://host:port``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        api_token: str | None = None,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.address = f"tcp://{host}:{port}"
        self._api_token = api_token
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._context: Any = None
        self._socket: Any = None

    @property
    def metadata(self) -> dict[str, Any]:
        """GR00T sends no metadata frame."""
        return {}

    async def connect(self) -> None:
        """Open the socket and ``ping`` the door (raises ConnectTimeout without a reply)."""
        import zmq.asyncio

        self._context = zmq.asyncio.Context()
        self._open()
        try:
            reply = await self._call({"endpoint": "ping"}, self._connect_timeout_s)
        except RequestTimeout as exc:
            raise ConnectTimeout(f"no GR00T door answered at {self.address}: {exc}") from None
        if not (isinstance(reply, Mapping) and reply.get("status") == "ok"):
            raise ConnectTimeout(f"{self.address} answered ping with {reply!r}")

    async def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """One ``get_action``; returns ``{"actions": (horizon, dim) float32}``."""
        observation, _ = detach(dict(obs))
        request = {"endpoint": "get_action", "data": {"observation": to_groot(observation)}}
        reply = await self._call(request, self._request_timeout_s)
        if isinstance(reply, Mapping) and "error" in reply:
            raise ServerError(str(reply["error"]))
        if not (isinstance(reply, list | tuple) and len(reply) == 2):
            raise ServerError(f"get_action answered {type(reply).__name__}, not [action, info]")
        streams = reply[0]
        if not (isinstance(streams, Mapping) and len(streams) == 1):
            raise ServerError("get_action's action map must hold one stream")
        (actions,) = streams.values()
        return {"actions": np.asarray(actions, dtype=np.float32)[0]}

    async def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._context is not None:
            self._context.term()
            self._context = None

    def _open(self) -> None:
        import zmq

        if self._socket is not None:
            self._socket.close(linger=0)
        self._socket = self._context.socket(zmq.REQ)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(self.address)

    async def _call(self, request: dict[str, Any], timeout_s: float) -> Any:
        if self._api_token is not None:
            request = {**request, "api_token": self._api_token}
        await self._socket.send(encode_reply(request))
        try:
            frame = await asyncio.wait_for(self._socket.recv(), timeout_s)
        except TimeoutError:
            self._open()  # a REQ socket cannot send again before its reply
            raise RequestTimeout(f"no reply from {self.address} in {timeout_s} s") from None
        return unpackb(frame, object_hook=_decode)
