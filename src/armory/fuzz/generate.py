"""A property-based generator of each door's messages (hypothesis, a dev dependency).

Where the mutator changes a valid message in a few places, the generator draws whole
messages: the door's known keys, each with a value from a wide strategy (extreme
integers and floats, text, bytes, nested containers, arrays of odd dtypes and
shapes), keys left out or added. :func:`generated_feed` hands ``num_inputs`` drawn
messages to a fuzzing run; the property (no failure outcome) is checked by the run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from armory_client.wire import RobotState

from armory.fuzz.doors import FuzzDoor
from armory.fuzz.harness import Feed, Send
from armory.fuzz.messages import JOINTS, lerobot_features

_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)


def _strategies() -> Any:
    """The hypothesis strategies module (imported when a generator is built)."""
    from hypothesis import strategies

    return strategies


def numbers(st: Any, *, int_bits: int = 64) -> Any:
    """Integers across the wire's range and past it, floats including NaN and inf."""
    return st.one_of(
        st.integers(-(2 ** (int_bits - 1)), 2**int_bits - 1),
        st.sampled_from([0, 1, -1, 2**53, 2**53 + 1, 2**63 - 1, 2**63]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
    )


def arrays(st: Any) -> Any:
    """Small numpy arrays of plain dtypes, odd shapes, any values."""
    dtypes = st.sampled_from(["uint8", "float32", "float64", "int64", "bool", "float16"])
    shapes = st.lists(st.integers(0, 9), min_size=0, max_size=5).map(tuple)

    def build(dtype: str, shape: tuple[int, ...], fill: float) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.full(shape, fill).astype(dtype)

    return st.builds(build, dtypes, shapes, st.floats(allow_nan=True, allow_infinity=True))


def values(st: Any, *, int_bits: int = 64) -> Any:
    """Anything a robot could put in a message."""
    leaves = st.one_of(
        st.none(),
        numbers(st, int_bits=int_bits),
        st.text(max_size=40),
        st.binary(max_size=64),
        arrays(st),
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(st.text(max_size=12), children, max_size=5),
        ),
        max_leaves=20,
    )


def message_strategy(door: str) -> Any:
    """Whole messages of ``door``: its known keys, any values, some keys missing or extra."""
    st = _strategies()
    any_value = values(st, int_bits=64 if door != "lerobot" else 80)

    def with_keys(keys: list[str], extra: Any = any_value) -> Any:
        return st.fixed_dictionaries(
            {}, optional={key: st.one_of(extra, any_value) for key in keys}
        ) | st.dictionaries(st.sampled_from(keys) | st.text(max_size=8), any_value, max_size=6)

    numbers_only = numbers(st, int_bits=64 if door != "lerobot" else 80)
    if door == "openpi":
        state = with_keys(
            ["version", *(field.name for field in dataclasses.fields(RobotState))],
            numbers_only,
        )
        obs_keys = ["observation/image", "observation/wrist_image", "observation/state", "prompt"]
        return st.builds(
            lambda obs, armory: {**obs, "__armory__": armory},
            with_keys(obs_keys, arrays(st)),
            state,
        )
    if door == "groot":
        observation = st.fixed_dictionaries(
            {
                "video": with_keys(["front", "wrist"], arrays(st)),
                "state": with_keys(["arm", "gripper"], arrays(st)),
            },
            optional={"language": any_value},
        )
        return st.fixed_dictionaries(
            {
                "endpoint": st.sampled_from(["get_action", "ping", "reset", "get_modality_config"])
                | any_value
            },
            optional={
                "data": st.fixed_dictionaries({"observation": observation | any_value}) | any_value,
                "api_token": any_value,
            },
        )
    if door == "lerobot":
        raw = with_keys([*JOINTS, "front", "wrist", "task"], numbers_only | arrays(st))
        timed = with_keys(["timestamp", "timestep", "must_go"], numbers_only).map(dict)
        observation = st.builds(
            lambda t, r: {"TimedObservation": {**t, "observation": r}}, timed, raw
        )
        config = with_keys(
            ["policy_type", "pretrained_name_or_path", "actions_per_chunk", "device", "rename_map"],
            numbers_only,
        ).map(lambda c: {"RemotePolicyConfig": {**c, "lerobot_features": lerobot_features()}})
        return st.one_of(observation, observation, config)
    raise ValueError(f"unknown door {door!r}")


def generated_feed(num_inputs: int, seed: int = 0) -> Feed:
    """``num_inputs`` messages drawn by :func:`message_strategy` (deterministic per seed)."""

    def feed(door: FuzzDoor, send: Send) -> None:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hypothesis_seed

        @hypothesis_seed(seed)
        @settings(
            max_examples=num_inputs,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(message_strategy(door.name))
        def one(message: Any) -> None:
            try:
                wire = door.encode(message)
            except _ENCODE_ERRORS:
                return
            send(message, wire)

        one()

    return feed
