"""Recording evaluation episodes as a LeRobot v3 dataset (``--record.dir``).

Each robot process keeps, per environment step, the observation its robot had
when it executed the step's action (the environment's entries, privileged ones
left out) and that action; at the episode's end it stages them as
``episode_NNNNNN.npz`` with the episode's record as JSON. After the run,
:func:`write_dataset` runs ``lerobot_writer.py`` in the LeRobot Python 3.12
environment (``scripts/lerobot-env.sh`` builds it), which writes the dataset
with LeRobot's own ``LeRobotDataset`` and the records as
``meta/armory_episodes.jsonl``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from armory.eval.environment import PRIVILEGED_PREFIX

LEROBOT_PYTHON_ENV = "ARMORY_LEROBOT_PYTHON"
WRITER = Path(__file__).with_name("lerobot_writer.py")
TEXT_KEY = "task"
_WRITE_TIMEOUT_S = 1800


@dataclass(frozen=True)
class RecordConfig:
    """Record every episode as a LeRobot v3 dataset (off unless ``--record.dir``)."""

    dir: Path | None = None
    """Root of the dataset to write (must not exist yet); None records nothing."""
    repo_id: str = "armory/eval"
    """The dataset's repo id (its name; the hub repo with --record.push-to-hub)."""
    push_to_hub: bool = False
    """Push the dataset to the Hugging Face hub after writing it (needs a token)."""
    lerobot_python: str | None = None
    """Python of the LeRobot 3.12 environment (default: $ARMORY_LEROBOT_PYTHON)."""

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    @property
    def staging(self) -> Path:
        """Where robots stage their episodes until the dataset is written (beside it)."""
        assert self.dir is not None
        return self.dir.with_name(self.dir.name + ".staging")

    def python(self) -> str:
        """The LeRobot interpreter; raises ValueError saying how to get one."""
        python = self.lerobot_python or os.environ.get(LEROBOT_PYTHON_ENV)
        if not python or not Path(python).exists():
            raise ValueError(
                "--record.dir writes with LeRobot in its Python 3.12 environment: build it "
                "with 'bash scripts/lerobot-env.sh' (it prints the interpreter) and pass "
                f"--record.lerobot-python or set {LEROBOT_PYTHON_ENV}"
            )
        return python

    def check(self) -> None:
        """Called before the run: the interpreter exists and the dataset root is free."""
        self.python()
        if self.dir is not None and self.dir.exists():
            raise ValueError(f"--record.dir {str(self.dir)!r} already exists")


class EpisodeRecorder:
    """One episode's steps, as the robot saw and executed them."""

    def __init__(self) -> None:
        self._frames: dict[str, list[np.ndarray]] = {}
        self._actions: list[np.ndarray] = []

    def add(self, observation: Mapping[str, Any], action: np.ndarray) -> None:
        """Called per step, before the environment executes ``action``."""
        for key, value in observation.items():
            if key.startswith(PRIVILEGED_PREFIX) or isinstance(value, str):
                continue
            self._frames.setdefault(key, []).append(np.array(value, copy=True))
        self._actions.append(np.array(action, dtype=np.float32, copy=True))

    @property
    def num_steps(self) -> int:
        return len(self._actions)

    def save(self, staging: Path, episode: int, record: Mapping[str, Any]) -> None:
        """Stage the episode as ``episode_NNNNNN.npz`` and its record as ``.json``."""
        staging.mkdir(parents=True, exist_ok=True)
        stem = staging / f"episode_{episode:06d}"
        arrays = {key: np.stack(rows) for key, rows in self._frames.items()}
        np.savez(stem.with_suffix(".npz"), action=np.stack(self._actions), **arrays)
        stem.with_suffix(".json").write_text(json.dumps(record, default=str))


def write_dataset(config: RecordConfig, staging: Path, fps: float) -> Path:
    """Write the staged episodes as a LeRobot dataset at ``config.dir``; returns its root.

    Raises RuntimeError with the writer's last lines when it fails.
    """
    assert config.dir is not None
    args = [config.python(), str(WRITER), str(staging), str(config.dir), str(round(fps))]
    args.append(config.repo_id)
    if config.push_to_hub:
        args.append("--push")
    env = {**os.environ, "HF_HUB_OFFLINE": "0" if config.push_to_hub else "1"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=_WRITE_TIMEOUT_S, env=env)
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"writing the LeRobot dataset failed: {tail}")
    shutil.rmtree(staging, ignore_errors=True)
    return config.dir
