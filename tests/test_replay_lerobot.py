"""policy:replay on a dataset written by LeRobot itself (LeRobotDataset.create, add_frame,
save_episode), in the Python 3.12 LeRobot environment of scripts/lerobot-env.sh.

Skipped unless ARMORY_LEROBOT_PYTHON names that interpreter (tests/test.sh exports it).
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from armory_client import PolicyClient
from server_harness import running_server
from test_replay import ACTION_DIM, FPS, LENGTHS, armory_obs, expected_chunk, recorded_actions

from armory.policies.lerobot_dataset import LeRobotDatasetReader
from armory.policies.replay import ReplayPolicyConfig

LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON", "")
WRITE_TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(
    not (LEROBOT_PYTHON and Path(LEROBOT_PYTHON).exists()),
    reason="ARMORY_LEROBOT_PYTHON is unset or missing (build it with scripts/lerobot-env.sh)",
)

WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root, fps, dim, lengths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    vector = {"dtype": "float32", "shape": (dim,), "names": [f"j{k}" for k in range(dim)]}
    dataset = LeRobotDataset.create(
        repo_id="armory/replay-test",
        fps=fps,
        features={"action": vector, "observation.state": vector},
        root=root,
        use_videos=False,
    )
    for e, n in enumerate(int(n) for n in lengths):
        for f in range(n):
            action = (100 * e + f + np.arange(dim) / 8).astype(np.float32)
            dataset.add_frame(
                {"action": action, "observation.state": action[::-1].copy(), "task": "replay me"}
            )
        dataset.save_episode()
    finalize = getattr(dataset, "finalize", None)
    if finalize is not None:
        finalize()
    """
)


def test_replays_a_dataset_lerobot_wrote(tmp_path: Path) -> None:
    """LeRobot's own v3.0 writer: the reader gets the frames back, and two robots are
    served their episode's recorded rows."""
    root = tmp_path / "dataset"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_LEROBOT_HOME": str(tmp_path / "hf-lerobot"),
        "HF_HOME": str(tmp_path / "hf"),
    }
    args = [str(root), str(FPS), str(ACTION_DIM), *map(str, LENGTHS)]
    done = subprocess.run(
        [LEROBOT_PYTHON, "-c", WRITER, *args],
        capture_output=True,
        text=True,
        timeout=WRITE_TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    actions = recorded_actions()
    reader = LeRobotDatasetReader(root)
    assert reader.fps == FPS and list(reader.episodes) == [0, 1]
    columns = reader.column("action")
    for e, rows in enumerate(actions):
        np.testing.assert_array_equal(columns[e], rows)
    policy = ReplayPolicyConfig(dataset=root).make()
    with (
        running_server(policy, max_batch_size=2) as server,
        PolicyClient("127.0.0.1", server.port) as first,
        PolicyClient("127.0.0.1", server.port) as second,
    ):
        a0 = first.infer(armory_obs("first", 0, None))["actions"]
        b0 = second.infer(armory_obs("second", 0, None))["actions"]
        a1 = first.infer(armory_obs("first", 15, 0))["actions"]
        b1 = second.infer(armory_obs("second", 12, 0))["actions"]
    np.testing.assert_array_equal(a0, expected_chunk(actions[0], 0))
    np.testing.assert_array_equal(b0, expected_chunk(actions[1], 0))
    np.testing.assert_array_equal(a1, expected_chunk(actions[0], 15))
    np.testing.assert_array_equal(b1, expected_chunk(actions[1], 12))
