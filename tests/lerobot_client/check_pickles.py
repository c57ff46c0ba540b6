"""Pickles both ways between Armory and the real LeRobot classes (lerobot 0.6.1, torch).

Runs in the LeRobot environment (scripts/lerobot-env.sh). Reads a JSON map on stdin,
``{"actions": "<hex of a payload from armory's encode_actions>", "observation": ...,
"instructions": ...}`` (the last two from ``encode_observation`` and
``encode_instructions``, as an eval robot sends them), and prints a JSON map: how
LeRobot's client sees the actions (``pickle.loads``, as ``RobotClient`` does), how
LeRobot's policy server sees the observation and instructions, and pickles that
LeRobot and torch write (a ``TimedObservation`` holding tensors and arrays, a
``RemotePolicyConfig`` with ``PolicyFeature`` values, assorted tensors), each with the
values Armory should read from it.
"""

from __future__ import annotations

import json
import pickle
import sys

import numpy as np
import torch
from lerobot.async_inference.helpers import RemotePolicyConfig, TimedAction, TimedObservation
from lerobot.configs.types import FeatureType, PolicyFeature


def read_actions(payload: bytes) -> dict:
    loaded = pickle.loads(payload)  # nosec: the payload is Armory's, written by the test
    return {
        "types": sorted({type(item).__module__ + "." + type(item).__qualname__ for item in loaded}),
        "tensor_types": sorted({type(item.action).__name__ for item in loaded}),
        "dtypes": sorted({str(item.action.dtype) for item in loaded}),
        "devices": sorted({item.action.device.type for item in loaded}),
        "timesteps": [item.get_timestep() for item in loaded],
        "timestamps": [item.get_timestamp() for item in loaded],
        "actions": [item.get_action().tolist() for item in loaded],
        "is_timed_action": all(isinstance(item, TimedAction) for item in loaded),
    }


def read_observation(payload: bytes) -> dict:
    """A TimedObservation as LeRobot's policy server reads it (``pickle.loads``)."""
    loaded = pickle.loads(payload)  # nosec: the payload is Armory's, written by the test
    return {
        "is_timed_observation": isinstance(loaded, TimedObservation),
        "timestamp": loaded.get_timestamp(),
        "timestep": loaded.get_timestep(),
        "must_go": loaded.must_go,
        "observation": {
            key: value.tolist() if isinstance(value, np.ndarray) else value
            for key, value in loaded.get_observation().items()
        },
        "dtypes": {
            key: str(value.dtype)
            for key, value in loaded.get_observation().items()
            if isinstance(value, np.ndarray)
        },
    }


def read_instructions(payload: bytes) -> dict:
    """A RemotePolicyConfig as LeRobot's policy server reads it."""
    loaded = pickle.loads(payload)  # nosec: the payload is Armory's, written by the test
    return {
        "is_remote_policy_config": isinstance(loaded, RemotePolicyConfig),
        "policy_type": loaded.policy_type,
        "pretrained_name_or_path": loaded.pretrained_name_or_path,
        "lerobot_features": loaded.lerobot_features,
        "actions_per_chunk": loaded.actions_per_chunk,
        "device": loaded.device,
    }


def tensors() -> dict[str, torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "float32": base,
        "view": base[1:, 2:5],
        "transposed": base.T,
        "uint8": torch.arange(10, dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "int64": torch.arange(3),
        "float16": torch.ones(2, dtype=torch.float16),
        "float64": torch.linspace(0, 1, 5, dtype=torch.float64),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
    }


def written() -> dict:
    cases = {
        name: (pickle.dumps(t), t.numpy().tobytes(), str(t.numpy().dtype), list(t.shape))
        for name, t in tensors().items()
    }
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    observation = TimedObservation(
        timestamp=12.5,
        timestep=7,
        observation={"a.pos": 0.25, "b.pos": torch.tensor(1.5), "front": image, "task": "t"},
        must_go=True,
    )
    config = RemotePolicyConfig(
        "act",
        "user/model",
        {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(2,))},
        5,
    )
    return {
        "tensors": {
            name: {"payload": p.hex(), "raw": raw.hex(), "dtype": dtype, "shape": shape}
            for name, (p, raw, dtype, shape) in cases.items()
        },
        "observation": pickle.dumps(observation).hex(),
        "instructions": pickle.dumps(config).hex(),
    }


def main() -> int:
    request = json.load(sys.stdin)
    answer = {
        "read": read_actions(bytes.fromhex(request["actions"])),
        "read_observation": read_observation(bytes.fromhex(request["observation"])),
        "read_instructions": read_instructions(bytes.fromhex(request["instructions"])),
        "written": written(),
    }
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
