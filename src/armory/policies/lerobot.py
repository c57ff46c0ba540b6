"""``policy:lerobot``: any LeRobot 0.6.1 policy, served from a worker in LeRobot's own
environment (Python 3.12, its own torch; the server stays light). See docs/workers.md.

The worker runs the ``lerobot`` backend (:mod:`armory.workers.backends.lerobot`): the
policy's own pre- and post-processors around one batched ``predict_action_chunk``.
The declared inputs are the policy's ``input_features`` under their LeRobot names
(``observation.images.<camera>`` as uint8 (H, W, 3) images, ``observation.state``
as float32) plus an optional ``task`` text. With ``--policy.rtc-schedule`` (pi0, pi0.5,
SmolVLA) a robot's real-time-chunking request is denoised with LeRobot's RTC guidance
towards its previous plan (:mod:`armory.workers.backends.lerobot_rtc`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import armory
from armory.policies.noise import NoiseConfig
from armory.policies.rtc_guidance import RTC_SCHEDULES
from armory.policies.worker_policy import WorkerOptions, WorkerPolicy
from armory.workers.backends.lerobot import LOCAL_BACKBONES
from armory.workers.backends.lerobot_rtc import RTC_TYPES
from armory.workers.backends.tiny_backbones import SIZES as BACKBONE_SIZES
from armory.workers.process import WorkerSpec

PYTHON_ENV_VAR = "ARMORY_LEROBOT_PYTHON"
"""Environment variable naming LeRobot's interpreter (scripts/test.sh sets it)."""
_ENV_SCRIPT = Path(armory.__file__).resolve().parents[2] / "scripts" / "lerobot-env.sh"


@dataclass(frozen=True)
class LeRobotPolicyConfig:
    """A LeRobot policy (a local checkpoint, or a type with random weights) in a worker."""

    path: Path | None = None
    """A local checkpoint directory (config.json + model.safetensors, as LeRobot's
    save_pretrained writes them; its saved processors are used when present)."""
    type: str | None = None
    """With --policy.random-weights and no path: the LeRobot policy type (act, diffusion,
    pi0, ...) built from scratch, for benchmarks without a checkpoint."""
    random_weights: bool = False
    """Build --policy.type with random weights (seeded by --policy.seed)."""
    cameras: tuple[str, ...] = ("front", "wrist")
    """From scratch: camera names; inputs observation.images.<name>."""
    image_size: tuple[int, int] = (96, 96)
    """From scratch: (height, width) of every camera image."""
    state_dim: int = 6
    """From scratch: length of observation.state."""
    action_dim: int = 6
    """From scratch: values per action."""
    backbone: str | None = None
    """From scratch, for the VLAs (smolvla, pi0, pi05, groot): build the backbone locally instead
    of fetching it from the hub: ``tiny`` (a reduced architecture for CPU tests) or ``full`` (the
    real size); a tokenizer trained here, random weights (docs/policies.md)."""
    overrides: str = "{}"
    """LeRobot config fields to set, as a JSON object (e.g. '{"dim_model": 64}')."""
    seed: int = 0
    """From scratch: torch seed of the random weights."""
    device: str = "cpu"
    """Torch device of the model (cpu, cuda, cuda:1, mps)."""
    cpu_threads: int | None = None
    """Torch's CPU threads in the worker (torch.set_num_threads); None: torch's default,
    one per core. 1 keeps a shared, loaded machine from stalling the model's threads."""
    task_key: str = "task"
    """Name of the optional text input carrying each robot's task."""
    python: str = ""
    """LeRobot's interpreter; empty: $ARMORY_LEROBOT_PYTHON, else scripts/lerobot-env.sh's."""
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    """Fixed noise for flow/diffusion policies (diffusion, pi0, pi05, smolvla, groot)."""
    rtc_schedule: str | None = None
    """Real-time chunking with LeRobot's RTC guidance (pi0, pi05, smolvla): the prefix
    schedule, ``zeros``, ``ones``, ``linear`` or ``exp``; a request with ``rtc_prefix`` /
    ``rtc_remainder`` / ``rtc_delay`` is denoised towards the robot's previous plan.
    None: those entries are ignored."""
    rtc_execution_horizon: int | None = None
    """Real-time chunking: rows guided by the previous plan (None: all it sends)."""
    rtc_max_guidance_weight: float = 10.0
    """Real-time chunking: LeRobot's cap on the guidance weight of a denoising step."""
    worker: WorkerOptions = field(default_factory=WorkerOptions)
    """Start-up timeout, watchdog and profiling of the worker."""

    def __post_init__(self) -> None:
        if (self.path is None) == (self.type is None):
            raise ValueError("give exactly one of --policy.path DIR or --policy.type TYPE")
        if self.type is not None and not self.random_weights:
            raise ValueError(
                f"--policy.type {self.type} builds a model from scratch: add "
                "--policy.random-weights (or give a checkpoint with --policy.path)"
            )
        if min(self.state_dim, self.action_dim, *self.image_size) < 1 or not self.cameras:
            raise ValueError(
                "state_dim, action_dim and image_size must be >= 1 and cameras non-empty, got "
                f"{self.state_dim}, {self.action_dim}, {self.image_size}, {self.cameras}"
            )
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"--policy.cpu-threads must be >= 1, got {self.cpu_threads}")
        if self.backbone is not None:
            if self.backbone not in BACKBONE_SIZES:
                raise ValueError(
                    f"--policy.backbone {self.backbone!r} is not a size; valid: "
                    f"{', '.join(BACKBONE_SIZES)}"
                )
            if self.type is None:
                raise ValueError("--policy.backbone builds a model from scratch: add --policy.type")
            if self.type not in LOCAL_BACKBONES:
                raise ValueError(
                    f"--policy.backbone: no local backbone for --policy.type {self.type}; types "
                    f"with one: {', '.join(sorted(LOCAL_BACKBONES))}"
                )
        self._check_rtc()
        try:
            overrides = json.loads(self.overrides)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--policy.overrides is not JSON: {exc}") from exc
        if not isinstance(overrides, dict):
            raise ValueError(f"--policy.overrides must be a JSON object, got {self.overrides!r}")

    def _check_rtc(self) -> None:
        if self.rtc_schedule is None:
            if self.rtc_execution_horizon is not None:
                raise ValueError("--policy.rtc-execution-horizon needs --policy.rtc-schedule")
            return
        if self.rtc_schedule not in RTC_SCHEDULES:
            raise ValueError(
                f"unknown --policy.rtc-schedule {self.rtc_schedule!r}; valid: "
                f"{', '.join(RTC_SCHEDULES)}"
            )
        if self.type is not None and self.type not in RTC_TYPES:
            raise ValueError(
                f"--policy.rtc-schedule: LeRobot's RTC guidance is not served for "
                f"--policy.type {self.type}; types with it: {', '.join(sorted(RTC_TYPES))}"
            )
        if self.rtc_execution_horizon is not None and self.rtc_execution_horizon < 0:
            raise ValueError(
                f"--policy.rtc-execution-horizon must be >= 0, got {self.rtc_execution_horizon}"
            )
        if not (math.isfinite(self.rtc_max_guidance_weight) and self.rtc_max_guidance_weight > 0):
            raise ValueError(
                "--policy.rtc-max-guidance-weight must be a finite number > 0, got "
                f"{self.rtc_max_guidance_weight}"
            )

    def spec(self, python: str) -> WorkerSpec:
        """The worker to start under ``python``."""
        options: dict[str, Any] = {
            "device": self.device,
            "task_key": self.task_key,
            "cpu_threads": self.cpu_threads,
            "overrides": json.loads(self.overrides),
        }
        if self.rtc_schedule is not None:
            options["rtc"] = {
                "schedule": self.rtc_schedule,
                "execution_horizon": self.rtc_execution_horizon,
                "max_guidance_weight": self.rtc_max_guidance_weight,
            }
        if self.path is not None:
            options["path"] = str(Path(self.path).expanduser().resolve())
        else:
            options.update(
                type=self.type,
                cameras=list(self.cameras),
                image_size=list(self.image_size),
                state_dim=self.state_dim,
                action_dim=self.action_dim,
                seed=self.seed,
                backbone=self.backbone,
            )
        # A model from scratch needs nothing from the hub: fail at once rather than wait on it.
        env = {} if self.path is not None else {"HF_HUB_OFFLINE": "1"}
        return WorkerSpec(
            python=python, backend="lerobot", options=options, name="lerobot-worker", env=env
        )

    def make(self) -> WorkerPolicy:
        if self.path is not None and not (Path(self.path).expanduser() / "config.json").is_file():
            raise ValueError(
                f"--policy.path {self.path} is not a LeRobot checkpoint (no config.json)"
            )
        return WorkerPolicy(
            self.spec(self.python or lerobot_python()),
            self.worker,
            noise=self.noise,
            rtc_schedule=self.rtc_schedule,
            rtc_execution_horizon=self.rtc_execution_horizon,
        )


def lerobot_python() -> str:
    """LeRobot's interpreter: ``$ARMORY_LEROBOT_PYTHON``, else what scripts/lerobot-env.sh
    prints (it builds the environment once, which takes minutes)."""
    python = os.environ.get(PYTHON_ENV_VAR)
    if python:
        return python
    if not _ENV_SCRIPT.is_file():
        raise ValueError(
            f"no LeRobot interpreter: set --policy.python or ${PYTHON_ENV_VAR} to a Python with "
            "lerobot 0.6.1 installed"
        )
    result = subprocess.run(["bash", str(_ENV_SCRIPT)], capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise ValueError(
            f"{_ENV_SCRIPT} could not build LeRobot's environment (exit code "
            f"{result.returncode}): {result.stderr.strip()[-500:]}; or set --policy.python"
        )
    return lines[-1]
