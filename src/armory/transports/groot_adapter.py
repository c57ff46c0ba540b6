"""GR00T observation layout to the policy's declared inputs, and actions back.

A GR00T robot sends camera streams (``video``), state vectors (``state``) and a
task (``language``), in N1.6's nested layout (``{"video": {name: (B, T, H, W, C)},
...}``) or N1.5's flat keys (``video.name``: (T, H, W, C), ``state.name``: (T, D),
``annotation...``: [str]). :class:`GrootLayout` maps them declaratively:

- cameras: ``name=input`` pairs, else the streams in the order sent go to the
  policy's image inputs in declared order (the counts must match);
- state: the named streams, else every state stream in the order sent, concatenated
  into the policy's one float vector input;
- the task: the first language entry goes to the policy's text input, if any.

Time steps: the last frame of T is used. One robot per request: N1.6's batch
dimension B must be 1. Actions go back as one stream, ``action_key``, shaped
(1, horizon, dim) in N1.6 and (horizon, dim) as ``action.<action_key>`` in N1.5.

The door speaks the robot's stream names: errors about an input name the stream it
came from, and ``get_modality_config`` lists the layout's names, else those the robot
sent in its last ``get_action``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from armory.policies.base import InputSpec
from armory.transports.groot_protocol import Encoding, GrootProtocolError, modality_config


@dataclass(frozen=True)
class GrootLayout:
    """How GR00T streams map to the policy's inputs (``--groot.layout.*``)."""

    cameras: tuple[str, ...] = ()
    """``video_name=input_key`` pairs; empty: streams in the order sent, inputs in
    declared order."""
    state: tuple[str, ...] = ()
    """State stream names in the order they are concatenated; empty: the order sent."""
    action_key: str = "joints"
    """Name of the action stream in replies (N1.5: ``action.<name>``)."""

    def __post_init__(self) -> None:
        for pair in self.cameras:
            if pair.count("=") != 1 or not all(pair.split("=")):
                raise ValueError(f"a camera mapping is 'video_name=input_key', got {pair!r}")
        if not self.action_key:
            raise ValueError("action_key must not be empty")


LANGUAGE_KEY = "annotation.human.task_description"
"""The task stream upstream's embodiments name, listed until a robot sends its own."""


@dataclass(frozen=True)
class StreamNames:
    """The stream names of one robot's observation, by modality (without N1.5's prefix)."""

    video: tuple[str, ...] = ()
    state: tuple[str, ...] = ()
    language: tuple[str, ...] = ()


@dataclass(frozen=True)
class MappedObservation:
    """A GR00T observation as the policy takes it, and where each input came from."""

    observation: dict[str, Any]
    """The policy's observation map."""
    sources: dict[str, str]
    """Policy input key -> the GR00T stream(s) it was made of (``video.front``)."""
    streams: StreamNames
    """The streams the robot sent."""

    def in_robot_terms(self, message: str) -> str:
        """``message`` (an error about policy inputs) naming the robot's streams instead."""
        for key, source in self.sources.items():
            message = message.replace(repr(key), f"{source!r} (policy input {key!r})")
        return message


class GrootAdapter:
    """Applies a :class:`GrootLayout` for one policy's declared inputs."""

    def __init__(
        self, layout: GrootLayout, inputs: Mapping[str, InputSpec], action_horizon: int
    ) -> None:
        self.layout = layout
        self.action_horizon = action_horizon
        self.image_inputs = [k for k, s in inputs.items() if s.is_image and s.required]
        vectors = [
            k
            for k, s in inputs.items()
            if s.required and not s.is_text and not s.is_image and len(s.shape) == 1
        ]
        if len(vectors) > 1:
            raise ValueError(f"the GR00T door maps state to one vector input; policy has {vectors}")
        self.state_input = vectors[0] if vectors else None
        texts = [k for k, s in inputs.items() if s.is_text]
        self.text_input = texts[0] if texts else None
        self.cameras = dict(pair.split("=") for pair in layout.cameras)
        unknown = set(self.cameras.values()) - set(self.image_inputs)
        if unknown:
            raise ValueError(
                f"camera mapping names inputs {sorted(unknown)} that are not the policy's "
                f"image inputs {self.image_inputs}"
            )

    # ---- requests ----------------------------------------------------------

    def observation(self, obs: Mapping[str, Any], encoding: Encoding) -> MappedObservation:
        """The policy's observation map from a GR00T observation."""
        video, state, language = _split(obs, encoding)
        out: dict[str, Any] = {}
        sources: dict[str, str] = {}
        names = list(video)
        if self.cameras:
            missing = sorted(set(self.cameras) - set(names))
            if missing:
                raise GrootProtocolError(f"observation lacks video streams {missing}")
            pairs = list(self.cameras.items())
        else:
            if len(names) != len(self.image_inputs):
                raise GrootProtocolError(
                    f"observation has {len(names)} video streams {names}; the policy takes "
                    f"{len(self.image_inputs)} images {self.image_inputs}"
                )
            pairs = list(zip(names, self.image_inputs, strict=True))
        for name, key in pairs:
            out[key] = _last_step(f"video.{name}", video[name], frame_ndim=3, nested=encoding)
            sources[key] = f"video.{name}"
        if self.state_input is not None:
            order = list(self.layout.state) or list(state)
            missing = sorted(set(order) - set(state))
            if missing or not order:
                raise GrootProtocolError(f"observation lacks state streams {missing or ['any']}")
            parts = [
                np.ravel(_last_step(f"state.{n}", state[n], frame_ndim=1, nested=encoding))
                for n in order
            ]
            out[self.state_input] = np.concatenate(parts)
            sources[self.state_input] = " + ".join(f"state.{n}" for n in order)
        if self.text_input is not None and language:
            item = next(iter(language.items()))
            out[self.text_input] = _text(item, encoding)
            sources[self.text_input] = item[0]
        streams = StreamNames(tuple(video), tuple(state), tuple(language))
        return MappedObservation(observation=out, sources=sources, streams=streams)

    # ---- replies -----------------------------------------------------------

    def actions(self, actions: np.ndarray, encoding: Encoding) -> dict[str, np.ndarray]:
        """The action map of a reply."""
        if encoding == "n1.6":
            return {self.layout.action_key: np.asarray(actions, np.float32)[None]}
        return {f"action.{self.layout.action_key}": np.asarray(actions, np.float32)}

    def modality_configs(
        self, encoding: Encoding, sent: StreamNames | None = None
    ) -> dict[str, Any]:
        """``get_modality_config``: one ModalityConfig per modality, in the robot's stream
        names: the layout's where it names them, else those the robot ``sent`` in its last
        ``get_action``, else names made from the policy's inputs. N1.5 prefixes them
        (``video.front``), as its data configs do."""
        sent = sent or StreamNames()
        cameras = list(self.cameras) or list(sent.video)
        cameras = cameras or [key.rsplit("/", 1)[-1] for key in self.image_inputs]
        states = list(self.layout.state) or list(sent.state) or ["state"]
        configs = {
            "video": {"delta_indices": [0], "modality_keys": _keys("video", cameras, encoding)},
            "state": {"delta_indices": [0], "modality_keys": _keys("state", states, encoding)},
            "action": {
                "delta_indices": list(range(self.action_horizon)),
                "modality_keys": _keys("action", [self.layout.action_key], encoding),
            },
        }
        if self.text_input is not None:
            language = list(sent.language[:1]) or [LANGUAGE_KEY]
            configs["language"] = {"delta_indices": [0], "modality_keys": language}
        for config in configs.values():
            config.update(
                sin_cos_embedding_keys=None, mean_std_embedding_keys=None, action_configs=None
            )
        return {name: modality_config(config, encoding) for name, config in configs.items()}


def _keys(group: str, names: Sequence[str], encoding: Encoding) -> list[str]:
    """Stream names as ModalityConfig lists them: bare in N1.6, ``group.name`` in N1.5."""
    return list(names) if encoding == "n1.6" else [f"{group}.{name}" for name in names]


def _split(
    obs: Mapping[str, Any], encoding: Encoding
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(video, state, language) maps by stream name."""
    if encoding == "n1.6":
        parts = []
        for group in ("video", "state", "language"):
            value = obs.get(group, {})
            if not isinstance(value, Mapping):
                raise GrootProtocolError(f"observation[{group!r}] must be a map of streams")
            parts.append(dict(value))
        return parts[0], parts[1], parts[2]
    video, state, language = {}, {}, {}
    for key, value in obs.items():
        group, _, name = str(key).partition(".")
        if group == "video" and name:
            video[name] = value
        elif group == "state" and name:
            state[name] = value
        elif group in ("annotation", "language"):
            language[key] = value
    return video, state, language


def _last_step(key: str, value: Any, *, frame_ndim: int, nested: Encoding) -> np.ndarray:
    """The last time step of one stream: (B=1, T, ...) in N1.6, (T, ...) or a frame in N1.5."""
    if not isinstance(value, np.ndarray):
        raise GrootProtocolError(f"{key}: expected an array, got {type(value).__name__}")
    if nested == "n1.6":
        if value.ndim != frame_ndim + 2:
            raise GrootProtocolError(
                f"{key}: expected (B, T, ...) with {frame_ndim + 2} dimensions, got {value.shape}"
            )
        if value.shape[0] != 1:
            raise GrootProtocolError(
                f"{key}: batch dimension {value.shape[0]}; send one robot (B=1) per request"
            )
        value = value[0]
    elif value.ndim == frame_ndim:
        return value
    if value.ndim != frame_ndim + 1 or value.shape[0] < 1:
        raise GrootProtocolError(
            f"{key}: expected (T, ...) with {frame_ndim + 1} dimensions, got {value.shape}"
        )
    return value[-1]


def _text(item: tuple[str, Any], encoding: Encoding) -> str:
    """The task string: ``[[str]]`` per robot in N1.6, ``[str]`` (or a str) in N1.5."""
    key, value = item
    while isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0:
        value = value[0]
    if not isinstance(value, str):
        raise GrootProtocolError(f"language {key!r}: expected text, got {type(value).__name__}")
    return value
