"""The Policy interface: a batch of observations in, one action chunk per observation out.

A policy declares its inputs (name, shape, dtype); the server checks every
observation against them before it enters a batch, so ``infer_batch`` only ever
sees observations that match. An image input (uint8, ``[height, width, 1 or 3]``)
may arrive as JPEG bytes (the metadata frame marks it ``"jpeg": true``); it is
decoded before the check, so the policy sees the same uint8 array. Observation
arrays are read-only views of the received bytes: a policy must not write to them.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from armory.core.errors import ObservationError
from armory.policies.jpeg import decode_jpeg

__all__ = [
    "CONTEXT_CHUNK_START",
    "CONTEXT_KEYS",
    "CONTEXT_ROBOT",
    "InputSpec",
    "ObservationError",
    "Policy",
    "PolicyMetadata",
    "conform_observation",
    "decode_jpeg_inputs",
    "validate_observation",
]

STR_DTYPE = "str"
"""``InputSpec.dtype`` of a text input (e.g. a prompt): a Python str."""

CONTEXT_CHUNK_START = "armory/chunk_start"
"""Context entry: the action index (int) the requested chunk starts at: the robot's
``action_index`` (Armory clients), the server's count for a plain client, the
observation's own index over the LeRobot door (which numbers the rows from it)."""
CONTEXT_ROBOT = "armory/robot"
"""Context entry: the session's robot name (str): the Armory ``robot_id``, else
``conn-<n>`` for a plain client's connection."""
CONTEXT_KEYS = (CONTEXT_CHUNK_START, CONTEXT_ROBOT)
"""Entries the engine can add to an observation for a policy that asks for them in
:attr:`PolicyMetadata.context_keys`; a robot cannot send them."""

# Dtype kinds whose bytes are not plain values; never declared, never accepted.
_REFUSED_KINDS = {"O": "object", "V": "void/structured"}


@functools.cache
def _dtype(name: str) -> np.dtype:
    """``np.dtype(name)``, built once per name (it is looked up for every input of every
    request)."""
    return np.dtype(name)


@dataclass(frozen=True)
class InputSpec:
    """One declared observation input."""

    shape: tuple[int | None, ...] = ()
    """Expected shape; ``None`` for a dimension of any size. Ignored for str inputs."""
    dtype: str = "float32"
    """numpy dtype name (``uint8``, ``float32``, ...) or ``"str"`` for a text input."""
    required: bool = True
    """A missing required input is an error; a missing optional one is fine."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))  # a list from a config file
        if self.dtype == STR_DTYPE:
            return
        try:
            dtype = np.dtype(self.dtype)
        except TypeError as exc:
            raise ValueError(f"InputSpec.dtype {self.dtype!r} is not a numpy dtype") from exc
        if dtype.kind in _REFUSED_KINDS:
            raise ValueError(f"InputSpec.dtype {self.dtype!r} ({_REFUSED_KINDS[dtype.kind]})")
        for dim in self.shape:
            if dim is not None and (not isinstance(dim, int) or dim < 0):
                raise ValueError(f"InputSpec.shape must hold ints >= 0 or None, got {self.shape}")

    @property
    def is_text(self) -> bool:
        return self.dtype == STR_DTYPE

    @property
    def is_image(self) -> bool:
        """A uint8 ``[height, width, channels]`` input, channels 1, 3 or any: it may be
        sent as JPEG bytes."""
        return self.dtype == "uint8" and len(self.shape) == 3 and self.shape[2] in (1, 3, None)

    def describe(self) -> str:
        """E.g. ``uint8 (224, 224, 3)`` or ``str``."""
        if self.is_text:
            return STR_DTYPE
        return f"{np.dtype(self.dtype).name} {_shape_text(self.shape)}"

    def to_wire(self) -> dict[str, Any]:
        """Plain map for the server's metadata frame."""
        shape = None if self.is_text else list(self.shape)
        wire: dict[str, Any] = {"shape": shape, "dtype": self.dtype, "required": self.required}
        if self.is_image:
            wire["jpeg"] = True
        return wire


@dataclass(frozen=True)
class PolicyMetadata:
    """What a policy declares once; the server reads it when it starts."""

    name: str
    """Short name, shown in the metadata frame and logs."""
    action_horizon: int
    """Actions per returned chunk (rows)."""
    action_dim: int
    """Values per action (columns)."""
    inputs: Mapping[str, InputSpec]
    """Declared observation inputs by key."""
    latency_points: Mapping[int, float] | None = None
    """Expected forward-pass seconds per batch size; seeds the server's learned profile."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Policy-specific entries of the metadata frame (e.g. openpi's ``reset_pose``)."""
    noise_sha256: str | None = None
    """SHA-256 of the action noise fixed for the run (a noise ticket, see
    :mod:`armory.policies.noise`); None when the noise is not fixed. Sent in the
    metadata frame and with every reply."""
    context_keys: tuple[str, ...] = ()
    """Entries of :data:`CONTEXT_KEYS` the engine adds to each observation before
    ``infer_batch`` (e.g. a replay policy needs each request's chunk start); a policy
    never sees one it did not ask for."""

    def __post_init__(self) -> None:
        if self.action_horizon < 1 or self.action_dim < 1:
            raise ValueError(
                f"action_horizon and action_dim must be >= 1, got {self.action_horizon} "
                f"and {self.action_dim}"
            )
        unknown = sorted(set(self.context_keys) - set(CONTEXT_KEYS))
        if unknown:
            raise ValueError(
                f"unknown context keys {unknown}; valid keys: {', '.join(CONTEXT_KEYS)}"
            )
        clash = sorted(set(CONTEXT_KEYS) & set(self.inputs))
        if clash:
            raise ValueError(f"inputs {clash} use names reserved for engine context")


class Policy(abc.ABC):
    """A batched policy: the server calls it from one worker thread, one batch at a time."""

    @property
    @abc.abstractmethod
    def metadata(self) -> PolicyMetadata:
        """Read when the server starts (and for each new connection's metadata frame)."""

    @abc.abstractmethod
    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        """Called in the worker thread with 1..max_batch_size validated observations; returns
        one (action_horizon, action_dim) float32 array per observation, in order."""

    def check_observation(self, obs: Mapping[str, Any]) -> None:  # noqa: B027
        """Called on the server's event loop for each observation as it is accepted, after
        it matched the declared inputs: raise ValueError naming what is wrong with entries
        the declared inputs cannot describe (e.g. real-time-chunking entries), so that the
        robot concerned is refused before its observation joins a batch. Keep it cheap."""

    def close(self) -> None:  # noqa: B027
        """Called once when the server stops."""


def validate_observation(obs: Mapping[str, Any], inputs: Mapping[str, InputSpec]) -> None:
    """Raise an :class:`ObservationError` naming the key unless ``obs`` matches ``inputs``.

    Keys the policy does not declare are allowed and passed on untouched. A float
    input accepts any bool, integer or float array of its shape (converted by
    :func:`conform_observation`); every other input needs its exact dtype.
    """
    for key, spec in inputs.items():
        if key not in obs:
            if spec.required:
                raise ObservationError(
                    f"observation lacks required input {key!r} (expected {spec.describe()})"
                )
            continue
        _check_value(key, obs[key], spec)


def conform_observation(obs: Mapping[str, Any], inputs: Mapping[str, InputSpec]) -> dict[str, Any]:
    """Decode JPEG images (:func:`decode_jpeg_inputs`), validate ``obs`` and return a new
    map whose float inputs have the declared dtype."""
    out = decode_jpeg_inputs(obs, inputs)
    validate_observation(out, inputs)
    for key, spec in inputs.items():
        value = out.get(key)
        if isinstance(value, np.generic):
            value = out[key] = np.asarray(value)
        if isinstance(value, np.ndarray) and not spec.is_text:
            dtype = _dtype(spec.dtype)
            if value.dtype != dtype:
                out[key] = value.astype(dtype)
    return out


def decode_jpeg_inputs(obs: Mapping[str, Any], inputs: Mapping[str, InputSpec]) -> dict[str, Any]:
    """A new map in which every image input sent as bytes is decoded from JPEG (other
    values are left to validation).

    Raises an :class:`ObservationError` naming the key for bytes that are not a JPEG
    image, or one larger than the declared size.
    """
    out = dict(obs)
    for key, spec in inputs.items():
        value = out.get(key)
        if not spec.is_image or not isinstance(value, bytes | bytearray):
            continue
        height, width, _ = spec.shape
        limit = {} if height is None or width is None else {"max_pixels": height * width}
        try:
            out[key] = decode_jpeg(bytes(value), **limit)
        except (ValueError, ImportError) as exc:
            raise ObservationError(
                f"observation input {key!r}: {len(value)} bytes that are not a usable JPEG "
                f"image (expected {spec.describe()} or its JPEG): {exc}"
            ) from None
    return out


def _check_value(key: str, value: Any, spec: InputSpec) -> None:
    if spec.is_text:
        if not isinstance(value, str):
            raise ObservationError(
                f"observation input {key!r}: expected str, received {_describe(value)}"
            )
        return
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise ObservationError(
            f"observation input {key!r}: expected an ndarray {spec.describe()}, "
            f"received {_describe(value)}"
        )
    expected = _dtype(spec.dtype)
    received = value.dtype
    if received.kind in _REFUSED_KINDS or received.hasobject:
        kind = _REFUSED_KINDS.get(received.kind, "object")
        raise ObservationError(
            f"observation input {key!r}: dtype {received.str!r} ({kind}) is not allowed; "
            f"expected {spec.describe()}"
        )
    castable = expected.kind == "f" and received.kind in "biuf"
    if received != expected and not castable:
        raise ObservationError(
            f"observation input {key!r}: expected dtype {expected.name}, received "
            f"{received.name} (shape {value.shape})"
        )
    if not _shape_matches(value.shape, spec.shape):
        raise ObservationError(
            f"observation input {key!r}: expected shape {_shape_text(spec.shape)}, "
            f"received {value.shape} ({received.name})"
        )
    if received.kind == "f" and not np.isfinite(value).all():
        raise ObservationError(
            f"observation input {key!r}: holds NaN or inf values; every value must be finite"
        )
    if value.size and not np.can_cast(received, expected, "safe"):
        # Converted to the declared dtype: a value beyond its range would become inf (a
        # safe cast, e.g. of uint8 images to float32, cannot overflow: not checked).
        largest = max(abs(float(value.max())), abs(float(value.min())))
        limit = float(np.finfo(expected).max)
        if largest > limit:
            raise ObservationError(
                f"observation input {key!r}: holds {largest:g}, beyond the range of the "
                f"declared {expected.name} (+-{limit:g})"
            )


def _shape_matches(shape: tuple[int, ...], declared: tuple[int | None, ...]) -> bool:
    """Whether ``shape`` has the declared rank and size wherever one is declared."""
    if None not in declared:
        return shape == declared
    if len(shape) != len(declared):
        return False
    return all(want is None or got == want for got, want in zip(shape, declared, strict=True))


def _shape_text(shape: tuple[int | None, ...]) -> str:
    """``(224, 224, 3)``, ``(8,)``, ``(*, 8)``: a tuple's repr with ``*`` for any size."""
    dims = ", ".join("*" if d is None else str(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"ndarray {value.dtype.name} {value.shape}"
    return type(value).__name__
