"""Write recorded evaluation episodes as a LeRobot v3 dataset, with LeRobot's own writer.

Runs as a script in the Python 3.12 LeRobot environment (scripts/lerobot-env.sh), never
imported by Armory: it needs only numpy and lerobot. ``armory eval --record.dir``
calls it once after the run::

    python lerobot_writer.py STAGING_DIR DATASET_DIR FPS REPO_ID [--push]

STAGING_DIR holds ``episode_NNNNNN.npz`` (``action`` and one array per observation
entry, one row per environment step, as the robot saw and executed them) and
``episode_NNNNNN.json`` (the episode's record: success, scenario, ticket, policy,
server, scheduler, starvation, latency). Episodes are written in order with
``LeRobotDataset.create``, ``add_frame``, ``save_episode`` and ``finalize``; the
records go to ``meta/armory_episodes.jsonl`` beside LeRobot's own metadata. LeRobot
refuses '/' in feature names, so an entry named with slashes (openpi's LIBERO
``observation/image``) is written with dots (``observation.image``). With
``--push`` the dataset is pushed to the hub as REPO_ID (needs a token and network;
the error says which is missing).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

ACTION_KEY = "action"
EPISODES_FILE = "meta/armory_episodes.jsonl"


def feature_names(keys: list[str]) -> dict[str, str]:
    """Each staged key's LeRobot feature name: '/' becomes '.'; two keys that would share
    a name exit naming both."""
    names: dict[str, str] = {}
    for key in keys:
        name = key.replace("/", ".")
        taken = [other for other, given in names.items() if given == name]
        if taken:
            raise SystemExit(
                f"lerobot_writer: entries {taken[0]!r} and {key!r} would both be "
                f"feature {name!r} (LeRobot refuses '/' in feature names)"
            )
        names[key] = name
    return names


def _features(arrays: dict[str, np.ndarray]) -> dict[str, dict]:
    """LeRobot features of one staged episode's arrays (images: uint8 with 3 dims),
    already under their feature names."""
    features = {}
    for key, array in arrays.items():
        shape = tuple(int(d) for d in array.shape[1:])
        if array.dtype == np.uint8 and len(shape) == 3:
            features[key] = {"dtype": "image", "shape": shape, "names": ["h", "w", "c"]}
        else:
            names = [f"{key.rsplit('.', 1)[-1]}_{i}" for i in range(int(np.prod(shape)))]
            features[key] = {"dtype": "float32", "shape": shape, "names": names}
    return features


def write(staging: Path, root: Path, fps: int, repo_id: str) -> object:
    """Write every staged episode into a new dataset at ``root``; returns the dataset."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    episodes = sorted(staging.glob("episode_*.npz"))
    if not episodes:
        raise SystemExit(f"lerobot_writer: no episode_*.npz in {staging}")
    with np.load(episodes[0], allow_pickle=False) as first:
        names = feature_names(list(first.files))
        features = _features({names[k]: first[k] for k in first.files})
    dataset = LeRobotDataset.create(
        repo_id=repo_id, fps=fps, features=features, root=root, use_videos=False
    )
    records = []
    for path in episodes:
        record = json.loads(path.with_suffix(".json").read_text())
        with np.load(path, allow_pickle=False) as staged:
            arrays = {names[k]: staged[k] for k in staged.files}
        for step in range(len(arrays[ACTION_KEY])):
            frame = {
                key: value[step]
                if features[key]["dtype"] == "image"
                else value[step].astype(np.float32)
                for key, value in arrays.items()
            }
            dataset.add_frame({**frame, "task": record.get("task", "")})
        dataset.save_episode()
        records.append(record)
    finalize = getattr(dataset, "finalize", None)
    if finalize is not None:
        finalize()
    with open(root / EPISODES_FILE, "w", encoding="utf-8") as f:
        for index, record in enumerate(records):
            f.write(json.dumps({"episode_index": index, **record}) + "\n")
    return dataset


def push(dataset: object, repo_id: str) -> None:
    """Push to the hub; exits with a message naming what is missing."""
    from huggingface_hub import get_token

    if not (os.environ.get("HF_TOKEN") or get_token()):
        raise SystemExit(
            f"lerobot_writer: cannot push {repo_id}: no Hugging Face token (set HF_TOKEN or "
            "run huggingface-cli login); the dataset is kept on disk"
        )
    try:
        dataset.push_to_hub()  # type: ignore[attr-defined]
    except Exception as exc:  # network, permissions: said in one line
        raise SystemExit(
            f"lerobot_writer: pushing {repo_id} failed ({type(exc).__name__}: {exc}); "
            "the dataset is kept on disk"
        ) from None


def main(argv: list[str]) -> None:
    if len(argv) not in (4, 5) or (len(argv) == 5 and argv[4] != "--push"):
        raise SystemExit(__doc__)
    staging, root, fps, repo_id = Path(argv[0]), Path(argv[1]), int(argv[2]), argv[3]
    dataset = write(staging, root, fps, repo_id)
    if len(argv) == 5:
        push(dataset, repo_id)


if __name__ == "__main__":
    main(sys.argv[1:])
