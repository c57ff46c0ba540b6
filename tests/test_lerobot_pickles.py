"""Pickles both ways between Armory's LeRobot door and the real LeRobot 0.6.1 classes.

``lerobot_client/check_pickles.py`` runs under LeRobot's interpreter: it reads an
action payload Armory wrote the way LeRobot's ``RobotClient`` does (``pickle.loads``)
and writes the pickles LeRobot and torch produce (tensors of several dtypes and
layouts, a ``TimedObservation``, a ``RemotePolicyConfig``), which Armory's
allowlisting unpickler must read to the same values.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from armory.transports.lerobot_protocol import (
    PolicyInstructions,
    TimedObservation,
    decode_instructions,
    decode_observation,
    encode_actions,
    encode_instructions,
    encode_observation,
)
from armory.transports.safe_unpickle import TORCH_GLOBALS, safe_loads

SCRIPT = Path(__file__).resolve().parent / "lerobot_client" / "check_pickles.py"
LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON")

pytestmark = pytest.mark.skipif(
    not LEROBOT_PYTHON,
    reason="ARMORY_LEROBOT_PYTHON is unset: build the env with scripts/lerobot-env.sh",
)

ACTIONS = (np.arange(12, dtype=np.float32).reshape(3, 4) / 7).astype(np.float32)
OBSERVATION = TimedObservation(
    timestamp_s=3.25,
    timestep=9,
    observation={
        "state.0": 0.5,
        "front": np.arange(12, dtype=np.uint8).reshape(2, 2, 3),
        "episode": np.asarray(4, dtype=np.int64),
        "task": "pick",
    },
    must_go=False,
)
"""An eval robot's observation (armory eval --door lerobot)."""
INSTRUCTIONS = PolicyInstructions(
    policy_type="act",
    pretrained_name_or_path="user/model",
    features={"observation.state": {"dtype": "float32", "shape": (1,), "names": ["state.0"]}},
    actions_per_chunk=10,
    device="cpu",
    rename_map={},
)


@pytest.fixture(scope="module")
def exchange() -> dict[str, Any]:
    payload = encode_actions(ACTIONS, first_timestep=40, timestamp_s=100.0, step_s=0.05)
    request = {
        "actions": payload.hex(),
        "observation": encode_observation(OBSERVATION).hex(),
        "instructions": encode_instructions(INSTRUCTIONS).hex(),
    }
    out = subprocess.run(
        [str(LEROBOT_PYTHON), str(SCRIPT)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_lerobot_reads_armory_actions_as_its_own_timed_actions(exchange: dict) -> None:
    read = exchange["read"]
    assert read["is_timed_action"]
    assert read["types"] == ["lerobot.async_inference.helpers.TimedAction"]
    assert read["tensor_types"] == ["Tensor"]
    assert read["dtypes"] == ["torch.float32"]
    assert read["devices"] == ["cpu"]
    assert read["timesteps"] == [40, 41, 42]
    np.testing.assert_allclose(read["timestamps"], [100.0, 100.05, 100.1])
    np.testing.assert_array_equal(np.asarray(read["actions"], dtype=np.float32), ACTIONS)


def test_lerobot_reads_an_eval_robots_observation_and_instructions(exchange: dict) -> None:
    """What ``armory eval --door lerobot`` robots send unpickles into LeRobot's own
    TimedObservation and RemotePolicyConfig, with the values sent."""
    observation = exchange["read_observation"]
    assert observation["is_timed_observation"]
    assert (observation["timestamp"], observation["timestep"]) == (3.25, 9)
    assert observation["must_go"] is False
    assert observation["observation"] == {
        "state.0": 0.5,
        "front": OBSERVATION.observation["front"].tolist(),
        "episode": 4,
        "task": "pick",
    }
    assert observation["dtypes"] == {"front": "uint8", "episode": "int64"}
    instructions = exchange["read_instructions"]
    assert instructions["is_remote_policy_config"]
    assert instructions["policy_type"] == "act" and instructions["actions_per_chunk"] == 10
    assert instructions["lerobot_features"]["observation.state"]["names"] == ["state.0"]


def test_armory_reads_tensors_as_torch_writes_them(exchange: dict) -> None:
    """Every dtype and layout (views, transposes, scalars, empty) comes back as the
    array ``tensor.numpy()`` gives, without torch in this process."""
    cases = exchange["written"]["tensors"]
    assert {"view", "transposed", "scalar", "empty", "float16", "bool"} <= set(cases)
    for name, case in cases.items():
        expected = np.frombuffer(bytes.fromhex(case["raw"]), dtype=case["dtype"])
        expected = expected.reshape(case["shape"])
        got = safe_loads(bytes.fromhex(case["payload"]), TORCH_GLOBALS)
        assert isinstance(got, np.ndarray), name
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_armory_reads_a_lerobot_timed_observation(exchange: dict) -> None:
    observation = decode_observation(bytes.fromhex(exchange["written"]["observation"]))
    assert observation.timestep == 7
    assert observation.timestamp_s == 12.5
    assert observation.must_go
    values = observation.observation
    assert values["a.pos"] == 0.25
    assert float(np.asarray(values["b.pos"])) == 1.5
    np.testing.assert_array_equal(values["front"], np.arange(18, dtype=np.uint8).reshape(2, 3, 3))
    assert values["task"] == "t"


def test_armory_reads_lerobot_policy_instructions(exchange: dict) -> None:
    instructions = decode_instructions(bytes.fromhex(exchange["written"]["instructions"]))
    assert instructions.policy_type == "act"
    assert instructions.pretrained_name_or_path == "user/model"
    assert instructions.actions_per_chunk == 5
    assert instructions.features == {"observation.state": {"type": "STATE", "shape": (2,)}}
