"""policy:replay: a LeRobot v3.0 dataset written here with pyarrow, read back, and served
to robots over real sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from armory_client import (
    ARMORY_KEY,
    AsyncPolicyClient,
    PolicyClient,
    RobotRuntime,
    RobotState,
    RuntimeConfig,
    SafetyConfig,
    ServerError,
    attach,
)
from server_harness import running_server

from armory.policies.base import CONTEXT_CHUNK_START, CONTEXT_ROBOT
from armory.policies.config import make_policy
from armory.policies.lerobot_dataset import LeRobotDatasetReader
from armory.policies.replay import ReplayPolicy, ReplayPolicyConfig

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

LENGTHS = (23, 17)
ACTION_DIM = 6
FPS = 10


def recorded_actions(lengths: Sequence[int] = LENGTHS, dim: int = ACTION_DIM) -> list[np.ndarray]:
    """Distinct, exactly representable actions: episode e, frame f, dim k is
    100 e + f + k / 8."""
    return [
        (100 * e + np.arange(n)[:, None] + np.arange(dim)[None, :] / 8).astype(np.float32)
        for e, n in enumerate(lengths)
    ]


def _vectors(rows: np.ndarray) -> Any:
    return pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])


def write_v3_dataset(
    root: Path,
    actions: Sequence[np.ndarray] | None = None,
    *,
    fps: int = FPS,
    version: str = "v3.0",
    episodes_per_file: int = 1,
) -> Path:
    """A LeRobot v3.0 dataset laid out as LeRobot writes it (data files of
    ``episodes_per_file`` episodes, one episode table, tasks, info.json); no videos."""
    actions = recorded_actions() if actions is None else actions
    dim = actions[0].shape[1]
    data_path = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    episode_rows: dict[str, list[Any]] = {
        key: []
        for key in (
            "episode_index",
            "tasks",
            "length",
            "data/chunk_index",
            "data/file_index",
            "dataset_from_index",
            "dataset_to_index",
            "meta/episodes/chunk_index",
            "meta/episodes/file_index",
        )
    }
    frames: dict[int, list[dict[str, Any]]] = {}
    start = 0
    for e, rows in enumerate(actions):
        n = len(rows)
        file_index = e // episodes_per_file
        frames.setdefault(file_index, []).append(
            {
                "action": rows,
                "observation.state": rows[:, ::-1].copy(),
                "timestamp": (np.arange(n) / fps).astype(np.float32),
                "frame_index": np.arange(n, dtype=np.int64),
                "episode_index": np.full(n, e, dtype=np.int64),
                "index": np.arange(start, start + n, dtype=np.int64),
                "task_index": np.zeros(n, dtype=np.int64),
            }
        )
        for key, value in zip(
            episode_rows, [e, ["replay me"], n, 0, file_index, start, start + n, 0, 0], strict=True
        ):
            episode_rows[key].append(value)
        start += n
    for file_index, parts in frames.items():
        columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        table = pa.table(
            {
                key: _vectors(value) if value.ndim == 2 else pa.array(value)
                for key, value in columns.items()
            }
        )
        path = root / data_path.format(chunk_index=0, file_index=file_index)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
    episodes_path = root / "meta/episodes/chunk-000/file-000.parquet"
    episodes_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(episode_rows), episodes_path)
    pq.write_table(
        pa.table({"task_index": [0], "task": ["replay me"]}), root / "meta/tasks.parquet"
    )
    vector = {"dtype": "float32", "shape": [dim], "names": [f"j{k}" for k in range(dim)]}
    scalar = {"shape": [1], "names": None}
    info = {
        "codebase_version": version,
        "robot_type": "test",
        "total_episodes": len(actions),
        "total_frames": start,
        "total_tasks": 1,
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": fps,
        "splits": {"train": f"0:{len(actions)}"},
        "data_path": data_path,
        "video_path": None,
        "features": {
            "action": vector,
            "observation.state": vector,
            "timestamp": {"dtype": "float32", **scalar},
            "frame_index": {"dtype": "int64", **scalar},
            "episode_index": {"dtype": "int64", **scalar},
            "index": {"dtype": "int64", **scalar},
            "task_index": {"dtype": "int64", **scalar},
        },
    }
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    return root


def expected_chunk(rows: np.ndarray, start: int, horizon: int = 10) -> np.ndarray:
    """Rows start..start+horizon-1, the last row held past the end."""
    return rows[np.minimum(start + np.arange(horizon), len(rows) - 1)]


def armory_obs(robot: str, action_index: int, chunk_start: int | None, **obs: Any) -> dict:
    """An observation with Armory queue state (10 Hz, horizons 2..10)."""
    state = RobotState(
        robot_id=robot,
        action_index=action_index,
        actions_left=0,
        chunk_start=chunk_start,
        control_hz=10.0,
        min_execution_horizon=2,
        max_execution_horizon=10,
    )
    return attach({"observation.state": np.zeros(ACTION_DIM, np.float32), **obs}, state)


# ---- the reader ------------------------------------------------------------


def test_reader_reads_every_episode_from_its_file(tmp_path: Path) -> None:
    """Each episode's action rows come back in frame order from the file holding it."""
    actions = recorded_actions()
    reader = LeRobotDatasetReader(write_v3_dataset(tmp_path, actions))
    assert reader.fps == FPS and list(reader.episodes) == [0, 1]
    assert reader.episodes[1].data_file == "data/chunk-000/file-001.parquet"
    columns = reader.column("action")
    for e, rows in enumerate(actions):
        np.testing.assert_array_equal(columns[e], rows)
        assert columns[e].dtype == np.float32
    (timestamps,) = reader.column("timestamp", [1]).values()
    np.testing.assert_array_equal(timestamps[:, 0], np.arange(17, dtype=np.float32) / FPS)


def test_reader_episodes_sharing_a_file(tmp_path: Path) -> None:
    """Episodes packed into one data file are told apart by episode_index."""
    actions = recorded_actions()
    reader = LeRobotDatasetReader(write_v3_dataset(tmp_path, actions, episodes_per_file=2))
    columns = reader.column("observation.state")
    np.testing.assert_array_equal(columns[1], actions[1][:, ::-1])


def _break(root: Path, how: str) -> str:
    """Damage a written dataset; returns the message expected at start-up."""
    if how == "no-dir":
        return "no such directory"
    write_v3_dataset(root)
    info_path = root / "meta/info.json"
    info = json.loads(info_path.read_text())
    if how == "no-info":
        info_path.unlink()
        return "no meta/info.json; not a LeRobot dataset"
    if how == "v2.1":
        info["codebase_version"] = "v2.1"
        info_path.write_text(json.dumps(info))
        return r"codebase_version 'v2.1'; only 'v3.0' is read \(convert"
    if how == "no-episodes":
        (root / "meta/episodes/chunk-000/file-000.parquet").unlink()
        return "no episode metadata"
    if how == "no-data":
        (root / "data/chunk-000/file-001.parquet").unlink()
        return r"data/chunk-000/file-001.parquet \(episodes \[1\]\) does not exist"
    if how == "video-action":
        info["features"]["action"]["dtype"] = "video"
        info_path.write_text(json.dumps(info))
        return "feature 'action' is video"
    if how == "wrong-dim":
        info["features"]["action"]["shape"] = [ACTION_DIM + 1]
        info_path.write_text(json.dumps(info))
        return r"has rows of length \[6\]; info.json declares float32 \(7,\)"
    if how == "short-episode":
        table = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
        lengths = table.column("length").to_pylist()
        lengths[0] += 1
        table = table.set_column(table.schema.get_field_index("length"), "length", [lengths])
        pq.write_table(table, root / "meta/episodes/chunk-000/file-000.parquet")
        return r"holds 23 frames of episode 0 \(frame_index 0..22\); the episode table says 24"
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "no-dir",
        "no-info",
        "v2.1",
        "no-episodes",
        "no-data",
        "video-action",
        "wrong-dim",
        "short-episode",
    ],
)
def test_bad_datasets_fail_at_start_up(tmp_path: Path, how: str) -> None:
    """A dataset that cannot be replayed fails make() with a message naming the dataset."""
    root = tmp_path / "dataset"
    message = _break(root, how)
    with pytest.raises(ValueError, match=message) as info:
        make_policy(ReplayPolicyConfig(dataset=root))
    assert str(root) in str(info.value)


def test_unknown_action_key_and_episode_fail_at_start_up(tmp_path: Path) -> None:
    """An action key or an episode the dataset lacks is named with what it has."""
    root = write_v3_dataset(tmp_path)
    with pytest.raises(ValueError, match=r"no feature 'actions'; features: action, episode_index"):
        ReplayPolicyConfig(dataset=root, action_key="actions").make()
    with pytest.raises(ValueError, match=r"no episodes \[5\]; it has episodes 0..1"):
        ReplayPolicyConfig(dataset=root, episodes=(1, 5)).make()


# ---- the policy ------------------------------------------------------------


def test_policy_declares_context_and_dimensions(tmp_path: Path) -> None:
    """Metadata: horizon from the config, action_dim from the dataset, the context it needs,
    episode_index as its only (optional) input."""
    policy = ReplayPolicyConfig(dataset=write_v3_dataset(tmp_path), action_horizon=4).make()
    meta = policy.metadata
    assert (meta.name, meta.action_horizon, meta.action_dim) == ("replay", 4, ACTION_DIM)
    assert meta.context_keys == (CONTEXT_CHUNK_START, CONTEXT_ROBOT)
    assert list(meta.inputs) == ["episode_index"] and not meta.inputs["episode_index"].required
    assert meta.extra == {"fps": FPS, "episodes": [0, 1]}


def test_policy_holds_or_loops_past_the_end(tmp_path: Path) -> None:
    """Past the last frame: the last action repeats (hold) or frame 0 follows (loop)."""
    root = write_v3_dataset(tmp_path)
    rows = recorded_actions()[1]
    obs = {CONTEXT_CHUNK_START: 12, CONTEXT_ROBOT: "r", "episode_index": np.int64(1)}
    (held,) = ReplayPolicyConfig(dataset=root).make().infer_batch([obs])
    np.testing.assert_array_equal(held, expected_chunk(rows, 12))
    (looped,) = ReplayPolicyConfig(dataset=root, at_end="loop").make().infer_batch([obs])
    np.testing.assert_array_equal(looped, rows[(12 + np.arange(10)) % 17])


def test_robots_get_episodes_round_robin(tmp_path: Path) -> None:
    """Robots without episode_index get the served episodes in order, cycling, and keep
    theirs; --policy.episodes restricts and orders the cycle."""
    policy: ReplayPolicy = ReplayPolicyConfig(dataset=write_v3_dataset(tmp_path)).make()
    names = ["a", "b", "c", "a", "b"]
    assert [policy.episode_of({CONTEXT_ROBOT: n}) for n in names] == [0, 1, 0, 0, 1]
    only = ReplayPolicyConfig(dataset=tmp_path, episodes=(1,)).make()
    assert [only.episode_of({CONTEXT_ROBOT: n}) for n in "xy"] == [1, 1]
    with pytest.raises(ValueError, match=r"episode_index 0 is not served; episodes: \[1\]"):
        only.episode_of({CONTEXT_ROBOT: "x", "episode_index": np.int64(0)})


# ---- over real sockets -----------------------------------------------------


def test_two_armory_robots_get_their_recorded_rows(tmp_path: Path) -> None:
    """Two Armory robots, each with its own episode (round robin by first request), get
    exactly the recorded rows from each request's action index; extra keys are ignored,
    episode_index picks an episode explicitly, and an unknown one fails that robot alone."""
    actions = recorded_actions()
    policy = ReplayPolicyConfig(dataset=write_v3_dataset(tmp_path)).make()
    with (
        running_server(policy, max_batch_size=2) as server,
        PolicyClient("127.0.0.1", server.port) as first,
        PolicyClient("127.0.0.1", server.port) as second,
    ):
        assert first.metadata["action_dim"] == ACTION_DIM and first.metadata["policy"] == "replay"
        replies: list[tuple[int, int, dict]] = []
        replies.append((0, 0, first.infer(armory_obs("first", 0, None))))
        replies.append((1, 0, second.infer(armory_obs("second", 0, None))))
        replies.append((0, 5, first.infer(armory_obs("first", 5, 0, prompt="ignored"))))
        replies.append((1, 9, second.infer(armory_obs("second", 9, 0))))
        replies.append((0, 20, first.infer(armory_obs("first", 20, 5))))
        replies.append((1, 16, second.infer(armory_obs("second", 16, 9))))
        chosen = second.infer(armory_obs("second", 18, 16, episode_index=np.int64(0)))
        with pytest.raises(ServerError, match="episode_index 7 is not served"):
            first.infer(armory_obs("first", 22, 20, episode_index=np.int64(7)))
    for episode, start, reply in replies:
        np.testing.assert_array_equal(reply["actions"], expected_chunk(actions[episode], start))
        assert reply[ARMORY_KEY]["chunk_start"] == start
    np.testing.assert_array_equal(chosen["actions"], expected_chunk(actions[0], 18))


def test_plain_openpi_client_replays_whole_chunks(tmp_path: Path) -> None:
    """A plain client (no __armory__) gets frames 0-9, 10-19, 20-22 then the last held."""
    actions = recorded_actions()
    policy = ReplayPolicyConfig(dataset=write_v3_dataset(tmp_path)).make()
    with running_server(policy) as server, PolicyClient("127.0.0.1", server.port) as client:
        chunks = [client.infer({"anything": np.zeros(3)})["actions"] for _ in range(3)]
    for k, chunk in enumerate(chunks):
        np.testing.assert_array_equal(chunk, expected_chunk(actions[0], 10 * k))


class RecordingRobot:
    """Sends an empty observation; keeps every action it executes."""

    def __init__(self) -> None:
        self.actions: list[np.ndarray] = []

    def get_observation(self) -> dict[str, Any]:
        return {}

    def send_action(self, action: np.ndarray) -> None:
        self.actions.append(np.array(action, copy=True))


def test_runtimes_execute_the_recording_action_for_action(tmp_path: Path) -> None:
    """Two armory-client runtimes at 50 Hz (threshold mode, chunks replaced from the index
    the server names) execute exactly their episode's recorded actions, in order."""
    actions = recorded_actions()
    policy = ReplayPolicyConfig(dataset=write_v3_dataset(tmp_path)).make()
    robots = [RecordingRobot(), RecordingRobot()]
    with running_server(policy, max_batch_size=2) as server:

        async def fleet() -> None:
            runtimes = [
                RobotRuntime(
                    robot,
                    AsyncPolicyClient("127.0.0.1", server.port),
                    RuntimeConfig(
                        robot_id=f"robot-{i}",
                        control_hz=50.0,
                        max_execution_horizon=8,
                        min_execution_horizon=2,
                        request_mode="threshold",
                        duration_s=0.8,
                        safety=SafetyConfig(on_dry="nothing"),
                    ),
                )
                for i, robot in enumerate(robots)
            ]
            await asyncio.gather(*(r.run() for r in runtimes))

        asyncio.run(fleet())
        assert server.stats().num_errors == 0
    episodes = []
    for robot in robots:
        executed = np.array(robot.actions)
        assert len(executed) > 25  # past the end of either episode
        episode = int(executed[0, 0] // 100)
        episodes.append(episode)
        np.testing.assert_array_equal(executed, expected_chunk(actions[episode], 0, len(executed)))
    assert sorted(episodes) == [0, 1]
