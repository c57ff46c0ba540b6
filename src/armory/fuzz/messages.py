"""A valid message of each door, for the mock policy the fuzzing server runs.

The policy is ``policy:mock`` with small images (:data:`IMAGE_SHAPE`) so that a
million inputs fit in hours, not days; the checks that matter (numbers, types,
containers, arrays) do not depend on the image size.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from armory_client.wire import ARMORY_KEY, RobotState

from armory.core.latency_profile import LinearProfileConfig
from armory.policies.mock import MockPolicyConfig
from armory.transports.lerobot_protocol import HELPERS

IMAGE_SHAPE = (8, 8, 3)
"""Camera frames of the fuzzing server's mock policy."""
JOINTS = tuple(f"joint_{i}.pos" for i in range(8))
"""LeRobot joint names: the mock's 8-value state."""
CAMERAS = ("front", "wrist")


def policy_config() -> MockPolicyConfig:
    """The mock the fuzzing server serves: small images, a fast linear latency."""
    return MockPolicyConfig(
        image_shape=IMAGE_SHAPE,
        action_dim=len(JOINTS),  # a LeRobot robot plays one action value per joint
        latency_profile="linear",
        linear=LinearProfileConfig(intercept_s=0.002, slope_s=0.0005),
    )


def observation(seed: int) -> dict[str, Any]:
    """The mock's inputs: two images, an 8-float state, a prompt."""
    rng = np.random.default_rng(seed)
    return {
        "observation/image": rng.integers(0, 256, IMAGE_SHAPE, dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, IMAGE_SHAPE, dtype=np.uint8),
        "observation/state": rng.standard_normal(8).astype(np.float32),
        "prompt": "pick",
    }


def openpi_observation(seed: int, robot_id: str) -> dict[str, Any]:
    """An Armory client's observation (``__armory__`` state included)."""
    state = RobotState(
        robot_id=robot_id,
        action_index=seed,
        actions_left=0,
        chunk_start=None,
        control_hz=20.0,
        min_execution_horizon=1,
        max_execution_horizon=10,
    )
    return {**observation(seed), ARMORY_KEY: state.to_wire()}


def groot_request(seed: int) -> dict[str, Any]:
    """An N1.6 ``get_action`` request: cameras ``front``/``wrist``, state ``arm``/``gripper``."""
    obs = observation(seed)
    state = obs["observation/state"]
    return {
        "endpoint": "get_action",
        "data": {
            "observation": {
                "video": {
                    "front": obs["observation/image"][None, None],
                    "wrist": obs["observation/wrist_image"][None, None],
                },
                "state": {"arm": state[None, None, :6], "gripper": state[None, None, 6:]},
                "language": {"task": [["pick"]]},
            },
            "options": None,
        },
    }


def lerobot_features() -> dict[str, Any]:
    """``lerobot_features`` of a robot with :data:`JOINTS` and :data:`CAMERAS`."""
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": (len(JOINTS),), "names": list(JOINTS)}
    }
    for name in CAMERAS:
        features[f"observation.images.{name}"] = {"dtype": "image", "shape": IMAGE_SHAPE}
    return features


def lerobot_instructions_state(actions_per_chunk: int = 10) -> dict[str, Any]:
    """The fields of a ``RemotePolicyConfig``."""
    return {
        "policy_type": "act",
        "pretrained_name_or_path": "user/model",
        "lerobot_features": lerobot_features(),
        "actions_per_chunk": actions_per_chunk,
        "device": "cpu",
        "rename_map": {},
    }


def lerobot_observation_state(seed: int, timestep: int, timestamp_s: float) -> dict[str, Any]:
    """The fields of a ``TimedObservation``."""
    obs = observation(seed)
    raw: dict[str, Any] = {
        name: float(v) for name, v in zip(JOINTS, obs["observation/state"], strict=True)
    }
    raw["front"] = obs["observation/image"]
    raw["wrist"] = obs["observation/wrist_image"]
    raw["task"] = "pick"
    return {"timestamp": timestamp_s, "timestep": timestep, "observation": raw, "must_go": True}


LEROBOT_PICKLE_PROTOCOL = 4
"""The protocol of LeRobot's ``pickle.dumps`` (Python 3.12's default): arrays' bytes as
BINBYTES (protocol 2 would send them as text to re-encode)."""


def lerobot_pickle(class_name: str, state: Any) -> bytes:
    """A pickle of ``lerobot.async_inference.helpers.<class_name>`` filled with ``state``
    as LeRobot's ``pickle.dumps`` writes a dataclass (protocol 4: the class by
    STACK_GLOBAL, NEWOBJ, then BUILD), without LeRobot."""
    inner = pickle.dumps(state, protocol=LEROBOT_PICKLE_PROTOCOL)
    names = b"".join(
        b"\x8c" + bytes([len(text)]) + text  # SHORT_BINUNICODE
        for text in (HELPERS.encode(), class_name.encode())
    )
    head = b"\x80\x04" + names + b"\x93)\x81"  # PROTO 4, STACK_GLOBAL, EMPTY_TUPLE, NEWOBJ
    return head + inner[2:-1] + b"b."  # the state (its frame kept), BUILD, STOP
