"""LeRobot async inference, pure: payload framing, pickled messages, observation mapping.

No I/O here; the gRPC front door (``lerobot_grpc.py``) is a thin adapter over these
functions. LeRobot's wire (lerobot 0.6.1, ``lerobot.async_inference``):

- payloads are pickles: a ``RemotePolicyConfig`` (policy instructions), a
  ``TimedObservation`` (the robot's raw observation dict with its timestep) and a list
  of ``TimedAction`` (one per action of a chunk, holding a torch tensor);
- a payload travels in chunks of at most 2 MiB marked BEGIN / MIDDLE / END; one
  that fits in a chunk is a single END.

Incoming pickles are read only by :func:`~armory.transports.safe_unpickle.safe_loads`
with the allowlist below: LeRobot's plain data classes become Armory records, numpy
arrays and torch tensors become numpy arrays. Outgoing action lists are written
opcode by opcode (:func:`encode_actions`): the robot's standard ``pickle.loads`` builds
``lerobot.async_inference.helpers.TimedAction`` objects holding ``torch.tensor``
float32 vectors, without the server importing either.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from armory_client.image_prep import resize_with_pad
from armory_client.wire.queue_state import MAX_EXECUTION_HORIZON, MAX_INDEX, MIN_CONTROL_HZ

from armory.core.errors import ObservationError
from armory.policies.base import InputSpec
from armory.transports.safe_unpickle import (
    NUMPY_GLOBALS,
    TORCH_GLOBALS,
    PickledRecord,
    PickleRefused,
    safe_loads,
)

CHUNK_BYTES = 2 * 2**20
"""Largest ``data`` of one streamed message (upstream's ``CHUNK_SIZE``)."""
MAX_MESSAGE_BYTES = 4 * 2**20
"""Largest gRPC message either side sends or accepts (upstream's ``MAX_MESSAGE_SIZE``)."""
DEFAULT_PORT = 8080
"""Upstream's policy-server port."""

TRANSFER_UNKNOWN, TRANSFER_BEGIN, TRANSFER_MIDDLE, TRANSFER_END = 0, 1, 2, 3
"""``transport.TransferState`` values."""

HELPERS = "lerobot.async_inference.helpers"
"""Module of LeRobot's async-inference data classes."""
STATE_FEATURE = "observation.state"
"""Key of the joint-state feature in the instructions' ``lerobot_features``."""
IMAGE_FEATURE_PREFIX = "observation.images."
"""Prefix of a camera feature in ``lerobot_features``; the rest is the camera's name."""
TASK_KEY = "task"
"""Key of the task text in a raw observation."""
MAX_CONTROL_HZ = 1000.0
"""Fastest control rate a LeRobot robot is believed to run at: the rate estimate is
capped here, and a timestep may advance at most this many actions per second between
two observations (plus :data:`TIMESTEP_SLACK_S` worth)."""
TIMESTEP_SLACK_S = 1.0
"""Seconds of motion at :data:`MAX_CONTROL_HZ` a timestep may jump beyond the time
between two observations' arrivals (network jitter, a burst after a stall)."""
MAX_ACTIONS_PER_CHUNK = MAX_EXECUTION_HORIZON
"""Most actions per chunk a robot's instructions may ask for."""


# ---- framing -------------------------------------------------------------------


def split_payload(payload: bytes, chunk_bytes: int = CHUNK_BYTES) -> list[tuple[int, bytes]]:
    """``(transfer_state, data)`` messages as upstream's client streams ``payload``: BEGIN,
    MIDDLE..., END; a payload of at most ``chunk_bytes`` is a single END."""
    pieces = [payload[i : i + chunk_bytes] for i in range(0, len(payload), chunk_bytes)]
    states = [TRANSFER_MIDDLE] * len(pieces)
    if len(pieces) > 1:
        states[0] = TRANSFER_BEGIN
    if pieces:
        states[-1] = TRANSFER_END
    return list(zip(states, pieces, strict=True))


class PayloadTooLarge(ValueError):
    """A streamed payload grew past the assembler's limit."""


class PayloadAssembler:
    """Joins streamed ``(transfer_state, data)`` messages into one payload."""

    def __init__(self, *, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        """Largest payload accepted; a longer one is refused as it arrives."""
        self._parts: list[bytes] = []
        self._size = 0

    def add(self, transfer_state: int, data: bytes) -> bytes | None:
        """Take one message; returns the payload once an END arrives, else None.

        Raises ValueError for an unknown transfer state or a payload over ``max_bytes``.
        """
        if transfer_state not in (TRANSFER_BEGIN, TRANSFER_MIDDLE, TRANSFER_END):
            raise ValueError(f"unknown transfer_state {transfer_state} (expected 1, 2 or 3)")
        if transfer_state == TRANSFER_BEGIN:
            self._parts, self._size = [], 0
        self._size += len(data)
        if self._size > self.max_bytes:
            raise PayloadTooLarge(f"payload exceeds the limit of {self.max_bytes} bytes")
        self._parts.append(data)
        if transfer_state != TRANSFER_END:
            return None
        payload = b"".join(self._parts)
        self._parts, self._size = [], 0
        return payload


# ---- messages ------------------------------------------------------------------


class _TimedObservationRecord(PickledRecord):
    FIELDS = frozenset({"timestamp", "timestep", "observation", "must_go"})
    UPSTREAM = f"{HELPERS}.TimedObservation"


class _TimedActionRecord(PickledRecord):
    FIELDS = frozenset({"timestamp", "timestep", "action"})
    UPSTREAM = f"{HELPERS}.TimedAction"


class _RemotePolicyConfigRecord(PickledRecord):
    FIELDS = frozenset(
        {
            "policy_type",
            "pretrained_name_or_path",
            "lerobot_features",
            "actions_per_chunk",
            "device",
            "rename_map",
        }
    )
    UPSTREAM = f"{HELPERS}.RemotePolicyConfig"


class _PolicyFeatureRecord(PickledRecord):
    FIELDS = frozenset({"type", "shape"})
    UPSTREAM = "lerobot.configs.types.PolicyFeature"


def _feature_type(value: Any) -> str:
    """``lerobot.configs.types.FeatureType(value)``: kept as its string value."""
    if not isinstance(value, str):
        raise PickleRefused(f"FeatureType {value!r:.40} is not a string")
    return value


def _float32_tensor(values: Any) -> np.ndarray:
    """``torch.tensor(values)`` of floats, as :func:`encode_actions` writes it."""
    return np.asarray(values, dtype=np.float32)


_MESSAGE_GLOBALS: dict[tuple[str, str], Any] = {
    **NUMPY_GLOBALS,
    **TORCH_GLOBALS,
    (HELPERS, "TimedObservation"): _TimedObservationRecord,
    (HELPERS, "RemotePolicyConfig"): _RemotePolicyConfigRecord,
    ("lerobot.configs.types", "PolicyFeature"): _PolicyFeatureRecord,
    ("lerobot.configs.types", "FeatureType"): _feature_type,
}
"""Everything a robot's payload may build: plain data, arrays, tensors, LeRobot records."""


@dataclass(frozen=True)
class TimedObservation:
    """A robot's ``TimedObservation``, as Armory reads it."""

    timestamp_s: float
    """The robot's wall clock when it took the observation (only differences are used)."""
    timestep: int
    """Index of the newest action the robot executed (0 before any)."""
    observation: Mapping[str, Any]
    """Raw robot observation: joint values by name, camera images, ``task`` text."""
    must_go: bool
    """The robot's queue was empty and it asks for this one to be served."""


@dataclass(frozen=True)
class PolicyInstructions:
    """A robot's ``RemotePolicyConfig``: what it asks the server to run, and its features."""

    policy_type: str
    pretrained_name_or_path: str
    features: Mapping[str, Any]
    """``lerobot_features``: LeRobot dataset features of the robot (state names, cameras)."""
    actions_per_chunk: int
    """Most actions the robot wants per chunk."""
    device: str
    rename_map: Mapping[str, str]


@dataclass(frozen=True)
class TimedAction:
    """One action of a chunk as the robot reads it (for tests and Armory-side clients)."""

    timestamp_s: float
    timestep: int
    action: np.ndarray


def decode_observation(payload: bytes) -> TimedObservation:
    """Read a pickled ``TimedObservation``; raises PickleRefused or ValueError naming the
    bad field."""
    fields = _record(safe_loads(payload, _MESSAGE_GLOBALS), _TimedObservationRecord)
    observation = fields.get("observation")
    if not isinstance(observation, dict) or not all(isinstance(k, str) for k in observation):
        raise ValueError("TimedObservation.observation must be a dict with str keys")
    return TimedObservation(
        timestamp_s=_number(fields, "timestamp", "TimedObservation"),
        timestep=_count(fields, "timestep", "TimedObservation"),
        observation=observation,
        must_go=bool(fields.get("must_go", False)),
    )


def decode_instructions(payload: bytes) -> PolicyInstructions:
    """Read a pickled ``RemotePolicyConfig``; raises PickleRefused or ValueError."""
    fields = _record(safe_loads(payload, _MESSAGE_GLOBALS), _RemotePolicyConfigRecord)
    features = fields.get("lerobot_features", {})
    rename_map = fields.get("rename_map", {})
    if not isinstance(features, dict) or not isinstance(rename_map, dict):
        raise ValueError("RemotePolicyConfig.lerobot_features and rename_map must be dicts")
    actions_per_chunk = _count(
        fields, "actions_per_chunk", "RemotePolicyConfig", low=1, high=MAX_ACTIONS_PER_CHUNK
    )
    return PolicyInstructions(
        policy_type=_text(fields, "policy_type"),
        pretrained_name_or_path=_text(fields, "pretrained_name_or_path"),
        features={key: _plain_feature(value) for key, value in features.items()},
        actions_per_chunk=actions_per_chunk,
        device=_text(fields, "device", default="cpu"),
        rename_map=rename_map,
    )


def decode_actions(payload: bytes) -> list[TimedAction]:
    """Read an action list written by :func:`encode_actions` (tests, Armory clients)."""
    allowed = {(HELPERS, "TimedAction"): _TimedActionRecord, ("torch", "tensor"): _float32_tensor}
    loaded = safe_loads(payload, allowed)
    if not isinstance(loaded, list):
        raise ValueError("an action payload must be a list of TimedAction")
    out = []
    for item in loaded:
        fields = _record(item, _TimedActionRecord)
        out.append(
            TimedAction(
                timestamp_s=_number(fields, "timestamp", "TimedAction"),
                timestep=_count(fields, "timestep", "TimedAction"),
                action=fields["action"],
            )
        )
    return out


def encode_actions(
    actions: np.ndarray, *, first_timestep: int, timestamp_s: float, step_s: float
) -> bytes:
    """A pickled ``list[TimedAction]``, one per row of ``actions`` (n, action_dim): row
    ``i`` gets timestep ``first_timestep + i`` and timestamp ``timestamp_s + i * step_s``
    (upstream's convention), its values a float32 ``torch.tensor``.

    Written opcode by opcode (pickle protocol 2), so that the robot's ``pickle.loads``
    builds upstream's classes while this process imports neither lerobot nor torch.
    """
    rows = np.asarray(actions, dtype=np.float32)
    if rows.ndim != 2:
        raise ValueError(f"actions must be (n, action_dim), got shape {rows.shape}")
    out = bytearray(b"\x80\x02]q\x00(")  # PROTO 2, EMPTY_LIST, BINPUT 0, MARK
    for i, row in enumerate(rows):
        out += _global(f"{HELPERS}\nTimedAction\n", memo=1, first=i == 0)
        out += b")\x81}("  # EMPTY_TUPLE, NEWOBJ, EMPTY_DICT, MARK
        out += _text_op("timestamp") + b"G" + struct.pack(">d", timestamp_s + i * step_s)
        out += _text_op("timestep") + _int_op(first_timestep + i)
        out += _text_op("action") + _global("torch\ntensor\n", memo=2, first=i == 0)
        out += b"(](" + b"".join(b"G" + struct.pack(">d", float(v)) for v in row)
        out += b"etRub"  # APPENDS, TUPLE, REDUCE, SETITEMS, BUILD
    out += b"e."  # APPENDS, STOP
    return bytes(out)


def encode_observation(obs: TimedObservation) -> bytes:
    """A pickled ``TimedObservation`` as LeRobot's client sends it (an Armory robot that
    speaks the door's protocol; tests)."""
    state = {
        "timestamp": float(obs.timestamp_s),
        "timestep": int(obs.timestep),
        "observation": dict(obs.observation),
        "must_go": bool(obs.must_go),
    }
    return _pickled_instance(_TimedObservationRecord.UPSTREAM, state)


def encode_instructions(instructions: PolicyInstructions) -> bytes:
    """A pickled ``RemotePolicyConfig`` as LeRobot's client sends it."""
    state = {
        "policy_type": instructions.policy_type,
        "pretrained_name_or_path": instructions.pretrained_name_or_path,
        "lerobot_features": dict(instructions.features),
        "actions_per_chunk": int(instructions.actions_per_chunk),
        "device": instructions.device,
        "rename_map": dict(instructions.rename_map),
    }
    return _pickled_instance(_RemotePolicyConfigRecord.UPSTREAM, state)


def _pickled_instance(upstream: str, state: dict[str, Any]) -> bytes:
    """The pickle (protocol 3) of an instance of the class ``upstream`` (``module.Name``)
    whose ``__dict__`` is ``state``, as the standard pickler writes a dataclass instance,
    without importing the class: GLOBAL, EMPTY_TUPLE, NEWOBJ, the state, BUILD."""
    module, _, name = upstream.rpartition(".")
    inner = pickle.dumps(state, protocol=3)  # PROTO 3 ... STOP; its memo starts at 0
    return b"\x80\x03c" + f"{module}\n{name}\n".encode() + b")\x81" + inner[2:-1] + b"b."


def _global(path: str, *, memo: int, first: bool) -> bytes:
    """GLOBAL once (remembered in memo slot ``memo``), BINGET afterwards."""
    if first:
        return b"c" + path.encode() + b"q" + bytes([memo])
    return b"h" + bytes([memo])


def _text_op(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def _int_op(value: int) -> bytes:
    if -(2**31) <= value < 2**31:
        return b"J" + struct.pack("<i", value)  # BININT
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1


def _record(value: Any, kind: type[PickledRecord]) -> dict[str, Any]:
    if not isinstance(value, kind):
        raise ValueError(f"expected a pickled {kind.UPSTREAM}, got {type(value).__name__}")
    return value.fields


def _number(fields: Mapping[str, Any], name: str, owner: str) -> float:
    value = fields.get(name)
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be a finite number, got {value!r:.40}")
    return float(value)


def _count(
    fields: Mapping[str, Any], name: str, owner: str, *, low: int = 0, high: int = MAX_INDEX
) -> int:
    """An int field in ``[low, high]`` (by default, an index: below 2**53)."""
    value = fields.get(name)
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{owner}.{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        shown = f"an int of {value.bit_length()} bits" if abs(value) > MAX_INDEX else value
        raise ValueError(f"{owner}.{name} must be in [{low}, {high}], got {shown}")
    return value


def _text(fields: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = fields.get(name, default)
    if not isinstance(value, str):
        raise ValueError(f"RemotePolicyConfig.{name} must be a str, got {value!r:.40}")
    return value


def _plain_feature(value: Any) -> Any:
    """A ``PolicyFeature`` record as ``{"type": ..., "shape": ...}``; dicts unchanged."""
    if isinstance(value, _PolicyFeatureRecord):
        return dict(value.fields)
    return value


# ---- observation mapping -------------------------------------------------------


@dataclass(frozen=True)
class ObservationMapping:
    """How a LeRobot robot's raw observation becomes the policy's declared inputs.

    The defaults fit a robot whose instructions list its joints and cameras (every
    LeRobot ``RobotClient``'s do) and a policy with image inputs, one float vector input
    and at most one text input (``policy:mock``'s ``prompt``, ``policy:lerobot``'s
    ``task``).
    """

    images: tuple[str, ...] = ()
    """``camera=input`` pairs, e.g. ``front=observation/image``. Empty: the robot's cameras
    in the order its instructions list them, onto the policy's image inputs in declared
    order (extra cameras are left out)."""
    state_keys: tuple[str, ...] = ()
    """Raw observation keys, in order, that make the state vector. Empty: the names of
    ``observation.state`` in the robot's instructions."""
    state_input: str | None = None
    """Policy input that receives the state vector. None: the policy's only float vector."""
    prompt_input: str | None = None
    """Policy input that receives the robot's ``task`` text. None: the policy's only text
    input (none if it declares no text input)."""
    resize_images: bool = True
    """Resize (keeping the aspect ratio, zero padding) a camera image whose size differs
    from its input's; False: such an image is a bad observation."""
    pass_through: tuple[str, ...] = ()
    """Raw observation entries (numbers or arrays) handed to the policy as they are, under
    their own names, which must be declared inputs of the policy (e.g. a simulated
    robot's ``privileged/episode`` for ``policy:expert``); checked like every input."""

    def __post_init__(self) -> None:
        for pair in self.images:
            camera, sep, target = pair.partition("=")
            if not sep or not camera or not target:
                raise ValueError(f"image mapping {pair!r} is not of the form camera=input")
        if len(set(self.state_keys)) != len(self.state_keys):
            raise ValueError(f"state_keys must be distinct, got {self.state_keys}")
        if len(set(self.pass_through)) != len(self.pass_through):
            raise ValueError(f"pass_through must be distinct, got {self.pass_through}")


@dataclass(frozen=True)
class ResolvedMapping:
    """An :class:`ObservationMapping` applied to one robot's features and the policy."""

    images: tuple[tuple[str, str, InputSpec], ...]
    """(camera key in the raw observation, policy input, its spec)."""
    state_keys: tuple[str, ...]
    state_input: str
    state_spec: InputSpec
    prompt_input: str | None
    resize_images: bool
    pass_through: tuple[tuple[str, InputSpec], ...] = ()
    """Raw entries handed to the policy under their own names, with their specs (a
    missing optional one is left out)."""


def resolve_mapping(
    mapping: ObservationMapping, features: Mapping[str, Any], inputs: Mapping[str, InputSpec]
) -> ResolvedMapping:
    """Check ``mapping`` against the robot's ``lerobot_features`` and the policy's inputs.

    Raises ValueError naming what does not fit (e.g. a policy image input left without a
    camera, or a state vector of the wrong length).
    """
    state_input = mapping.state_input or _only_vector_input(inputs)
    state_spec = inputs.get(state_input)
    if state_spec is None or state_spec.is_text or len(state_spec.shape) != 1:
        raise ValueError(f"state_input {state_input!r} is not a vector input of the policy")
    state_keys = mapping.state_keys or _feature_names(features)
    want = state_spec.shape[0]
    if want is not None and len(state_keys) != want:
        raise ValueError(
            f"the robot's state has {len(state_keys)} values ({', '.join(state_keys)}); the "
            f"policy's input {state_input!r} wants {want}: set the mapping's state_keys"
        )
    images = _resolve_images(mapping, features, inputs)
    prompt = mapping.prompt_input
    texts = [key for key, spec in inputs.items() if spec.is_text]
    if prompt is None:
        if len(texts) > 1:
            raise ValueError(
                f"the policy has {len(texts)} text inputs ({', '.join(texts)}): name the one "
                "for the robot's task in the mapping's prompt_input"
            )
        prompt = texts[0] if texts else None
    elif prompt not in texts:
        raise ValueError(
            f"prompt_input {prompt!r} is not a text input of the policy; its text inputs: "
            f"{', '.join(texts) or 'none'}"
        )
    _check_pass_through(
        mapping.pass_through, inputs, taken={state_input, prompt, *_image_targets(images)}
    )
    return ResolvedMapping(
        images=images,
        state_keys=tuple(state_keys),
        state_input=state_input,
        state_spec=state_spec,
        prompt_input=prompt,
        resize_images=mapping.resize_images,
        pass_through=tuple((key, inputs[key]) for key in mapping.pass_through),
    )


def _image_targets(images: Sequence[tuple[str, str, InputSpec]]) -> list[str]:
    """The policy inputs that resolved image pairs fill."""
    return [target for _, target, _ in images]


def _check_pass_through(
    keys: Sequence[str], inputs: Mapping[str, InputSpec], *, taken: set[str | None]
) -> None:
    """Raise ValueError unless each pass-through key is a numeric input of the policy that
    the state, the images and the prompt leave free."""
    for key in keys:
        spec = inputs.get(key)
        if spec is None or spec.is_text:
            numeric = [k for k, s in inputs.items() if not s.is_text]
            raise ValueError(
                f"pass_through names {key!r}, which is not a numeric input of the policy "
                f"({', '.join(numeric) or 'none'})"
            )
        if key in taken:
            raise ValueError(
                f"pass_through names {key!r}, which the state, an image or the prompt fills"
            )


def map_observation(raw: Mapping[str, Any], mapping: ResolvedMapping) -> dict[str, Any]:
    """The policy's inputs from a raw LeRobot observation; ObservationError names the
    missing or malformed key."""
    obs: dict[str, Any] = {}
    for camera, target, spec in mapping.images:
        obs[target] = _image(raw, camera, target, spec, resize=mapping.resize_images)
    obs[mapping.state_input] = _state(raw, mapping.state_keys, mapping.state_spec.dtype)
    task = raw.get(TASK_KEY)
    if mapping.prompt_input is not None and isinstance(task, str) and task:
        obs[mapping.prompt_input] = task
    for key, spec in mapping.pass_through:
        value = raw.get(key)
        if value is None and not spec.required:
            continue
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray | int | float) or isinstance(value, bool):
            got = "nothing" if value is None else type(value).__name__
            raise ObservationError(f"entry {key!r}: expected a number or an array, received {got}")
        obs[key] = value
    return obs


def _only_vector_input(inputs: Mapping[str, InputSpec]) -> str:
    vectors = [
        key
        for key, spec in inputs.items()
        if spec.required and not spec.is_text and len(spec.shape) == 1
    ]
    if len(vectors) != 1:
        raise ValueError(
            f"the policy has {len(vectors)} required vector inputs ({', '.join(vectors)}): "
            "name the state's in the mapping's state_input"
        )
    return vectors[0]


def _feature_names(features: Mapping[str, Any]) -> tuple[str, ...]:
    feature = features.get(STATE_FEATURE)
    names = feature.get("names") if isinstance(feature, Mapping) else None
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"the robot's instructions list no joint names under {STATE_FEATURE!r}: set the "
            "mapping's state_keys"
        )
    return tuple(names)


def _cameras(features: Mapping[str, Any]) -> list[str]:
    return [k[len(IMAGE_FEATURE_PREFIX) :] for k in features if k.startswith(IMAGE_FEATURE_PREFIX)]


def _resolve_images(
    mapping: ObservationMapping, features: Mapping[str, Any], inputs: Mapping[str, InputSpec]
) -> tuple[tuple[str, str, InputSpec], ...]:
    image_inputs = [key for key, spec in inputs.items() if spec.is_image]
    if mapping.images:
        pairs = [tuple(pair.split("=", 1)) for pair in mapping.images]
    else:
        pairs = list(zip(_cameras(features), image_inputs, strict=False))
    for _, target in pairs:
        if target not in image_inputs:
            raise ValueError(
                f"image mapping names input {target!r}, which is not an image input of the "
                f"policy ({', '.join(image_inputs) or 'none'})"
            )
    mapped = {target for _, target in pairs}
    unmapped = [key for key in image_inputs if inputs[key].required and key not in mapped]
    if unmapped:
        raise ValueError(
            f"the policy's image inputs {unmapped} get no camera (the robot's cameras: "
            f"{', '.join(_cameras(features)) or 'none'}): set the mapping's images as "
            "camera=input pairs"
        )
    return tuple((camera, target, inputs[target]) for camera, target in pairs)


def _image(
    raw: Mapping[str, Any], camera: str, target: str, spec: InputSpec, *, resize: bool
) -> np.ndarray:
    value = raw.get(camera)
    if not isinstance(value, np.ndarray):
        got = "nothing" if value is None else type(value).__name__
        raise ObservationError(
            f"camera {camera!r} (for input {target!r}): expected an (H, W, C) uint8 image, "
            f"received {got}"
        )
    height, width, channels = spec.shape
    if value.dtype != np.uint8 or value.ndim != 3 or (channels and value.shape[2] != channels):
        raise ObservationError(
            f"camera {camera!r} (for input {target!r}): expected uint8 (H, W, {channels}), "
            f"received {value.dtype} {value.shape}"
        )
    if height is None or width is None or value.shape[:2] == (height, width):
        return value
    if not resize:
        raise ObservationError(
            f"camera {camera!r} (for input {target!r}): expected {height}x{width}, received "
            f"{value.shape[0]}x{value.shape[1]} (resizing is off)"
        )
    try:
        return resize_with_pad(value, height, width)
    except ValueError as exc:
        raise ObservationError(f"camera {camera!r} (for input {target!r}): {exc}") from None


def _state(raw: Mapping[str, Any], keys: Sequence[str], dtype: str) -> np.ndarray:
    values = []
    for key in keys:
        value = raw.get(key)
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(()).item()
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, int | float) or isinstance(value, bool):
            got = "nothing" if value is None else type(value).__name__
            raise ObservationError(f"joint {key!r}: expected a number, received {got}")
        if not math.isfinite(value) or abs(value) > _MAX_JOINT_VALUE:
            shown = f"an int of {value.bit_length()} bits" if isinstance(value, int) else value
            raise ObservationError(
                f"joint {key!r}: expected a finite number of at most {_MAX_JOINT_VALUE:g} in "
                f"magnitude, received {shown}"
            )
        values.append(value)
    return np.asarray(values, dtype=dtype)


_MAX_JOINT_VALUE = 1e30
"""Largest joint value in magnitude (float32 holds it; no joint is anywhere near)."""


# ---- the robot's queue, as the scheduler sees it -------------------------------


@dataclass(frozen=True)
class QueueReport:
    """What the server infers about a LeRobot robot's queue when an observation arrives
    (indices and durations only; the robot's clock is never compared with the server's)."""

    timestep: int
    """The observation's LeRobot timestep: its chunk's actions get timesteps from here."""
    action_index: int
    """Actions the robot has executed (the engine's index): ``timestep + 1`` once it has
    executed any, else 0."""
    actions_left: int
    """Actions estimated to be queued on the robot."""
    chunk_start: int | None
    """Engine index of the newest chunk the robot had received; None before the first."""

    def aged(self, elapsed_s: float, control_hz: float) -> QueueReport:
        """The report ``elapsed_s`` later: the robot kept executing its queued actions."""
        executed = min(max(int(elapsed_s * control_hz), 0), self.actions_left)
        return dataclasses.replace(
            self,
            action_index=self.action_index + executed,
            actions_left=self.actions_left - executed,
        )

    def not_before(self, action_index: int) -> QueueReport:
        """The report with its index raised to at least ``action_index`` (the actions it
        moves past leave the queue): reports to the engine never go back."""
        gap = action_index - self.action_index
        if gap <= 0:
            return self
        return dataclasses.replace(
            self, action_index=action_index, actions_left=max(self.actions_left - gap, 0)
        )


class QueueEstimator:
    """Infers a LeRobot robot's queue from its observations and the chunks it fetched.

    LeRobot's client never reports its queue. It sends an observation at every control
    tick while ``queue / chunk_size <= chunk_size_threshold``, with the timestep of the
    newest action it executed. From that and from the chunks it fetched:

    - rate: ``max(Δtimestep, 1) / Δtimestamp`` between consecutive observations (one
      action per tick while the queue holds any, one observation per tick while it
      starves), each sample within ``[MIN_CONTROL_HZ, MAX_CONTROL_HZ]``, smoothed;
      ``default_control_hz`` until measured;
    - a timestep that jumps ahead by more than a robot at ``MAX_CONTROL_HZ`` could
      execute between the two arrivals (plus ``TIMESTEP_SLACK_S``) is refused;
    - actions left: the newest timestep fetched minus the observation's timestep, at
      most ``chunk_size_threshold`` of the longest chunk fetched (the client would not
      have sent otherwise), 0 when ``must_go`` says the queue is empty.
    """

    def __init__(
        self, *, default_control_hz: float, chunk_size_threshold: float, smoothing: float = 0.25
    ) -> None:
        self.control_hz = default_control_hz
        """Estimated actions per second (the robot's fps)."""
        self.chunk_size_threshold = chunk_size_threshold
        self.smoothing = smoothing
        """Weight of the newest rate sample in the moving average."""
        self.num_observations = 0
        self._previous: tuple[int, float, float] | None = None
        """(timestep, robot timestamp, server arrival) of the last observation."""
        self._fetched_end: int | None = None
        """Newest LeRobot timestep in a chunk the robot fetched."""
        self._fetched_start: int | None = None
        """Engine index of the newest chunk the robot fetched."""
        self._longest_chunk = 0
        self._newest_start: int | None = None
        """Engine index of the newest chunk computed for the robot (fetched or not)."""

    def observe(self, obs: TimedObservation, received_s: float) -> QueueReport:
        """Called for each observation, in arrival order (``received_s``: its arrival on
        the server's clock). Raises ValueError, changing nothing, for a timestep jump no
        robot could make."""
        if self._previous is not None:
            steps = obs.timestep - self._previous[0]
            arrived_after_s = max(received_s - self._previous[2], 0.0)
            most = math.ceil((arrived_after_s + TIMESTEP_SLACK_S) * MAX_CONTROL_HZ)
            if steps > most:
                raise ValueError(
                    f"TimedObservation.timestep jumped from {self._previous[0]} by {steps} in "
                    f"{arrived_after_s:.3f} s; a robot at most {MAX_CONTROL_HZ:g} Hz executes "
                    f"at most {most} actions in that time"
                )
            elapsed_s = obs.timestamp_s - self._previous[1]
            if steps >= 0 and elapsed_s > 1e-3:
                sample_hz = min(max(max(steps, 1) / elapsed_s, MIN_CONTROL_HZ), MAX_CONTROL_HZ)
                self.control_hz += self.smoothing * (sample_hz - self.control_hz)
        self.num_observations += 1
        self._previous = (obs.timestep, obs.timestamp_s, received_s)
        executed_any = obs.timestep > 0 or self._fetched_end is not None
        left = 0
        if self._fetched_end is not None and not obs.must_go:
            cap = math.floor(self.chunk_size_threshold * self._longest_chunk)
            left = min(max(self._fetched_end - obs.timestep, 0), cap)
        return QueueReport(
            timestep=obs.timestep,
            action_index=obs.timestep + 1 if executed_any else 0,
            actions_left=left,
            chunk_start=self._fetched_start,
        )

    def servable(self, report: QueueReport) -> bool:
        """False when a chunk at least as new as the observation was already computed (the
        engine could not serve it: it is less than one action past that chunk's start)."""
        return self._newest_start is None or report.action_index > self._newest_start

    def computed(self, chunk_start: int) -> None:
        """Called when a chunk (engine index ``chunk_start``) was computed for the robot."""
        if self._newest_start is None or chunk_start > self._newest_start:
            self._newest_start = chunk_start

    def fetched(self, chunk_start: int, first_timestep: int, num_actions: int) -> None:
        """Called when the robot fetched a chunk of ``num_actions`` actions."""
        last = first_timestep + num_actions - 1
        if self._fetched_end is None or last > self._fetched_end:
            self._fetched_end = last
        if self._fetched_start is None or chunk_start > self._fetched_start:
            self._fetched_start = chunk_start
        self._longest_chunk = max(self._longest_chunk, num_actions)

    @property
    def tick_s(self) -> float:
        """Seconds between two of the robot's control ticks (estimated)."""
        return 1.0 / self.control_hz
