"""The ``lerobot`` worker backend: any LeRobot (0.6.1) policy, batched, with its own
pre- and post-processors. Runs in LeRobot's environment (Python 3.12, its own torch).

One adapter for every policy type LeRobot's factory builds:

- **Model.** ``path``: a local checkpoint (``config.json`` + ``model.safetensors`` as
  ``save_pretrained`` writes them), loaded with the type's ``from_pretrained``; or
  ``type`` with random weights (``torch.manual_seed(seed)``) and features built from
  ``cameras``, ``image_size``, ``state_dim``, ``action_dim``, for benchmarks and tests.
  ``overrides`` set config fields either way (e.g. ``dim_model``, ``n_obs_steps``).
  A backbone's pretrained ImageNet weights are never downloaded
  (``pretrained_backbone_weights=None``; a checkpoint holds its own).
- **Local backbone.** ``backbone`` (``tiny`` or ``full``, random weights only) builds a
  VLA's backbone folder (:data:`LOCAL_BACKBONES`: a tokenizer trained here, the
  backbone's transformers config at a reduced or its real size, no weights) in a
  temporary directory removed once the model is built, and points the config at it, so
  nothing is fetched from the hub.
- **Processors.** ``make_pre_post_processors``: the checkpoint's saved pipelines when
  it has ``policy_preprocessor.json``, else new ones from the config (no dataset
  statistics: normalisation is the identity; GR00T's, which require statistics, get
  min-max statistics of [-1, 1]).
- **Inputs.** The config's ``input_features`` under their LeRobot names: a VISUAL
  feature ``observation.images.<camera>`` of shape (C, H, W) is declared as a uint8
  (H, W, C) image (what robots send) and becomes float (C, H, W) in [0, 1]; STATE
  (``observation.state``) and ENV (``observation.environment_state``) are float32
  vectors; the task text is an optional str input (``task_key``, default ``task``).
- **Batch.** The robots' observations are stacked into one batch (task as a list of
  str), pre-processed, sent through one ``predict_action_chunk``, post-processed, and
  returned as (batch, rows, action_dim) float32. Policies that read an observation
  history (diffusion) get the current observation repeated ``n_obs_steps`` times,
  as LeRobot's ``select_action`` does on an episode's first step.
- **Noise.** For types that take it (:data:`NOISE_SHAPES`) the server's fixed noise
  tile of the per-sample shape goes to ``predict_action_chunk(batch, noise=...)``,
  the same tile for every sample of every batch; GR00T, which draws its noise inside
  (:data:`DRAWN_NOISE_TYPES`), gets the tile in place of that draw. A configuration
  that fixed noise cannot make reproducible (:func:`ticket_blockers`: a DDPM sampler,
  a compiled model) refuses the noise at start-up, naming the setting to change.
- **Real-time chunking.** ``rtc`` (``schedule``, ``execution_horizon``,
  ``max_guidance_weight``) turns on LeRobot's RTC guidance for the types of
  :data:`~armory.workers.backends.lerobot_rtc.RTC_TYPES`; a batch is split into one
  ``predict_action_chunk`` per inference delay and horizon, plus one of the requests
  without a previous plan (:mod:`armory.workers.backends.lerobot_rtc`).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from armory.workers.backends.base import Backend, BackendInfo
from armory.workers.backends.lerobot_rtc import (
    GuidanceKey,
    ModelSpacePlans,
    check_rtc_type,
    enable_rtc,
    guidance_groups,
)

IMAGE_PREFIX = "observation.images."
"""LeRobot's prefix of a camera feature."""
STATE_FEATURE = "observation.state"
"""LeRobot's joint-state feature."""
ACTION_FEATURE = "action"
"""LeRobot's action feature."""
HISTORY_TYPES = frozenset({"diffusion"})
"""Types whose ``predict_action_chunk`` wants observations as (batch, n_obs_steps, ...)."""
NOISE_SHAPES: dict[str, Callable[[Any], tuple[int, int]]] = {
    "diffusion": lambda cfg: (cfg.horizon, cfg.action_feature.shape[0]),
    "pi0": lambda cfg: (cfg.chunk_size, cfg.max_action_dim),
    "pi05": lambda cfg: (cfg.chunk_size, cfg.max_action_dim),
    "smolvla": lambda cfg: (cfg.chunk_size, cfg.max_action_dim),
}
"""Per-sample noise shape of the types whose ``predict_action_chunk`` takes ``noise``."""
DRAWN_NOISE_TYPES = frozenset({"groot"})
"""Types that draw their noise with ``torch.randn`` inside ``predict_action_chunk`` (no
noise argument): a fixed tile replaces that draw (:class:`reduced_groot.FixedNoise`)."""
IDENTITY_STATS_TYPES = frozenset({"groot"})
"""Types whose processors refuse to build without dataset statistics: from scratch they get
min-max statistics of [-1, 1] (the identity)."""


def _identity(policy_type: str, path: str | None, device: Any) -> dict[str, str]:
    """The metadata entries naming what is served: the LeRobot type, the checkpoint
    directory (absent for a model built from scratch) and the device."""
    identity = {"lerobot_type": policy_type, "device": str(device)}
    if path:
        identity["lerobot_checkpoint"] = path
    return identity


def make_backend(options: dict[str, Any]) -> LeRobotBackend:
    try:
        import lerobot  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"{exc.name or exc} is not installed for {sys.executable}: run the worker with "
            "LeRobot's environment (--policy.python, ARMORY_LEROBOT_PYTHON, or "
            "scripts/lerobot-env.sh to build it)"
        ) from None
    return LeRobotBackend(**options)


class LeRobotBackend(Backend):
    """A LeRobot policy with its processors; see the module docstring."""

    def __init__(
        self,
        *,
        path: str | None = None,
        type: str | None = None,  # LeRobot's own name
        cameras: Sequence[str] = ("front", "wrist"),
        image_size: Sequence[int] = (96, 96),
        state_dim: int = 6,
        action_dim: int = 6,
        overrides: Mapping[str, Any] | None = None,
        seed: int = 0,
        device: str = "cpu",
        task_key: str = "task",
        backbone: str | None = None,
        cpu_threads: int | None = None,
        rtc: Mapping[str, Any] | None = None,
    ) -> None:
        import torch

        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
        self._torch = torch
        self._device = torch.device(device)
        self._task_key = task_key
        overrides = dict(overrides or {})
        if backbone and not type:
            raise ValueError("a local backbone is built only for --policy.type (random weights)")
        if rtc and type:  # before the model is built; a checkpoint's type is checked after
            check_rtc_type(type)
        # A local backbone's folder lives until the first batch: processors load lazily.
        with contextlib.ExitStack() as stack:
            if path:
                self.policy, self.config, (self.pre, self.post) = _load(
                    Path(path), device, overrides
                )
            elif type:
                torch.manual_seed(seed)
                if backbone:  # the user's overrides win over the local backbone's
                    folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                    local = stack.enter_context(local_backbone(type, backbone, folder))
                    overrides = {**local, **overrides}
                self.policy, self.config, (self.pre, self.post) = _fresh(
                    type, cameras, image_size, state_dim, action_dim, device, overrides
                )
            else:
                raise ValueError("give a checkpoint path or a policy type")
            self.policy.eval()
            self._plans: ModelSpacePlans | None = None
            if rtc:
                enable_rtc(self.policy, self.config, **rtc)
                self._plans = ModelSpacePlans(self.pre, self._device)
            self._inputs = _declared_inputs(self.config, task_key)
            self._images = [key for key, spec in self._inputs.items() if spec["dtype"] == "uint8"]
            self._vectors = [
                key for key, spec in self._inputs.items() if spec["dtype"] == "float32"
            ]
            self._history = (
                int(getattr(self.config, "n_obs_steps", 1))
                if self.config.type in HISTORY_TYPES
                else 0
            )
            self._noise: Any = None
            self._noise_shape = self._find_noise_shape()
            probe = self._predict([self._zeros()])  # the chunk's shape, and a first warm-up
        self._info = BackendInfo(
            name=f"lerobot-{self.config.type}",
            action_horizon=int(probe.shape[1]),
            action_dim=int(probe.shape[2]),
            inputs=self._inputs,
            noise_shape=self._noise_shape,
            extra={
                **_identity(self.config.type, path, self._device),
                **{f"rtc_{name}": value for name, value in (rtc or {}).items()},
            },
        )

    def info(self) -> BackendInfo:
        return self._info

    def set_noise(self, noise: np.ndarray | None) -> None:
        if noise is None:
            self._noise = None
            return
        if self._noise_shape is None:
            raise ValueError(f"LeRobot policy type {self.config.type!r} takes no fixed noise")
        blockers = ticket_blockers(self.config)
        if blockers:
            raise ValueError(
                f"fixed noise cannot make this LeRobot {self.config.type!r} policy "
                f"reproducible: {'; '.join(blockers)}"
            )
        if tuple(noise.shape) != self._noise_shape:
            raise ValueError(f"noise of shape {noise.shape}; expected {self._noise_shape}")
        self._noise = self._torch.from_numpy(np.array(noise, dtype=np.float32)).to(self._device)

    def infer(self, observations: Sequence[Mapping[str, Any]]) -> np.ndarray:
        groups = guidance_groups(observations)
        if list(groups) == [None]:
            return self._predict(observations)
        if self._plans is None:
            raise ValueError("real-time-chunking entries sent to a policy without RTC guidance")
        chunks: np.ndarray | None = None
        for key, indices in groups.items():
            part = self._predict([observations[index] for index in indices], key)
            if chunks is None:
                chunks = np.empty((len(observations), *part.shape[1:]), np.float32)
            chunks[indices] = part
        assert chunks is not None
        return chunks

    def peak_memory_bytes(self) -> int | None:
        if self._device.type == "cuda":
            return int(self._torch.cuda.max_memory_allocated(self._device))
        return super().peak_memory_bytes()

    # ---- internals -----------------------------------------------------------------

    def _predict(
        self, observations: Sequence[Mapping[str, Any]], guidance: GuidanceKey = None
    ) -> np.ndarray:
        """One ``predict_action_chunk`` of ``observations``, guided by their previous plans
        with (d, horizon) = ``guidance`` when given (under ``no_grad``: LeRobot's guidance
        needs autograd), else plain (under ``inference_mode``)."""
        torch = self._torch
        batch: dict[str, Any] = {}
        for key in self._images:  # (B, H, W, C) uint8 -> (B, C, H, W) float in [0, 1]
            stacked = torch.from_numpy(np.stack([obs[key] for obs in observations]))
            batch[key] = stacked.to(self._device).permute(0, 3, 1, 2).float().div_(255.0)
        for key in self._vectors:
            batch[key] = torch.from_numpy(np.stack([obs[key] for obs in observations])).float()
        batch["task"] = [str(obs.get(self._task_key) or "") for obs in observations]
        kwargs: dict[str, Any] = {}
        if guidance is not None:
            assert self._plans is not None
            kwargs["prev_chunk_left_over"] = self._plans(observations)
            kwargs["inference_delay"], kwargs["execution_horizon"] = guidance
        grad_mode = torch.inference_mode() if guidance is None else torch.no_grad()
        with grad_mode:
            batch = self.pre(batch)
            if self._history:
                for key in (*self._images, *self._vectors):
                    value = batch[key].unsqueeze(1)
                    batch[key] = value.expand(-1, self._history, *value.shape[2:])
            drawn_noise: Any = contextlib.nullcontext()
            if self._noise is not None and self.config.type in DRAWN_NOISE_TYPES:
                drawn_noise = _fixed_draws(self._noise)
            elif self._noise is not None:
                size = len(observations)
                kwargs["noise"] = self._noise.unsqueeze(0).expand(size, *self._noise.shape)
            with drawn_noise as fixed:
                actions = self.policy.predict_action_chunk(batch, **kwargs)
            if fixed is not None and fixed.used != 1:
                raise RuntimeError(
                    f"the {self.config.type} model drew its action noise {fixed.used} times "
                    "(expected once): this LeRobot version is not the one Armory fixes noise for"
                )
            actions = self.post(actions)
        return actions.to("cpu", torch.float32).numpy()

    def _zeros(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, spec in self._inputs.items():
            if spec["dtype"] != "str":
                out[key] = np.zeros(spec["shape"], dtype=spec["dtype"])
        return out

    def _find_noise_shape(self) -> tuple[int, ...] | None:
        if self.config.type in DRAWN_NOISE_TYPES:
            from armory.workers.backends.reduced_groot import noise_shape

            return noise_shape(self.policy)
        shape_of = NOISE_SHAPES.get(self.config.type)
        if shape_of is None:
            return None
        parameters = inspect.signature(self.policy.predict_action_chunk).parameters
        takes_noise = "noise" in parameters or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
        )
        return tuple(int(dim) for dim in shape_of(self.config)) if takes_noise else None


@contextmanager
def local_backbone(policy_type: str, size: str, folder: Path) -> Iterator[dict[str, Any]]:
    """While open, ``policy_type`` builds with its backbone of ``size`` (tiny, full) made
    locally in ``folder`` (a tokenizer trained here, the backbone's config, no weights);
    yields the config overrides that point the policy at it."""
    from armory.workers.backends.tiny_backbones import SIZES

    if policy_type not in LOCAL_BACKBONES:
        raise ValueError(
            f"no local backbone for LeRobot type {policy_type!r}; types with one: "
            f"{', '.join(sorted(LOCAL_BACKBONES))}"
        )
    if size not in SIZES:
        raise ValueError(f"unknown backbone size {size!r}; valid: {', '.join(SIZES)}")
    with LOCAL_BACKBONES[policy_type](policy_type, size, folder) as overrides:
        yield overrides


@contextmanager
def _smolvla_backbone(policy_type: str, size: str, folder: Path) -> Iterator[dict[str, Any]]:
    from armory.workers.backends import tiny_backbones

    tiny_backbones.write_smolvlm(folder, size)
    side = tiny_backbones.SIZES[size]["vision"]["image_size"]
    yield {"vlm_model_name": str(folder), "resize_imgs_with_padding": [side, side]}


def _groot_backbone(policy_type: str, size: str, folder: Path) -> ContextManager[dict[str, Any]]:
    from armory.workers.backends.reduced_groot import local_groot

    return local_groot(policy_type, size, folder)


def _fixed_draws(tile: Any) -> Any:
    from armory.workers.backends.reduced_groot import FixedNoise

    return FixedNoise(tile)


def _pi_backbone(policy_type: str, size: str, folder: Path) -> ContextManager[dict[str, Any]]:
    from armory.workers.backends.reduced_pi import local_pi

    return local_pi(policy_type, size, folder)


LOCAL_BACKBONES: dict[str, Callable[[str, str, Path], ContextManager[dict[str, Any]]]] = {
    "smolvla": _smolvla_backbone,
    "pi0": _pi_backbone,
    "pi05": _pi_backbone,
    "groot": _groot_backbone,
}
"""Types whose backbone Armory builds locally, and how."""


def ticket_blockers(config: Any) -> list[str]:
    """The settings of a LeRobot policy config under which the same observation and the
    same fixed noise can still give different chunks, each with the change that fixes it
    (empty when fixed noise makes the policy reproducible)."""
    blockers = []
    scheduler = getattr(config, "noise_scheduler_type", None)
    if config.type == "diffusion" and str(scheduler).upper() != "DDIM":
        blockers.append(
            f"noise_scheduler_type {scheduler!r} draws fresh noise at every denoising step "
            "(set noise_scheduler_type to 'DDIM' in --policy.overrides; a checkpoint trained "
            "with DDPM samples with DDIM too, in fewer steps)"
        )
    if getattr(config, "compile_model", False):
        blockers.append(
            "compile_model is on: compiled kernels need not match the model called directly "
            "(set compile_model to false in --policy.overrides)"
        )
    return blockers


def _declared_inputs(config: Any, task_key: str) -> dict[str, dict[str, Any]]:
    """Armory's declared inputs from the config's ``input_features`` (LeRobot names)."""
    from lerobot.configs.types import FeatureType

    inputs: dict[str, dict[str, Any]] = {}
    for key, feature in config.input_features.items():
        shape = [int(dim) for dim in feature.shape]
        if feature.type is FeatureType.VISUAL:
            if len(shape) != 3:
                raise ValueError(f"camera feature {key!r} has shape {shape}, expected (C, H, W)")
            channels, height, width = shape
            inputs[key] = {"shape": [height, width, channels], "dtype": "uint8", "required": True}
        elif feature.type in (FeatureType.STATE, FeatureType.ENV):
            inputs[key] = {"shape": shape, "dtype": "float32", "required": True}
    if task_key in inputs:
        raise ValueError(f"task_key {task_key!r} is also a feature of the policy")
    inputs[task_key] = {"shape": None, "dtype": "str", "required": False}
    return inputs


def _load(path: Path, device: str, overrides: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A checkpoint's policy, config and processors."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a LeRobot checkpoint (no config.json)")
    config = PreTrainedConfig.from_pretrained(path)
    _configure(config, device, overrides)
    config.pretrained_path = path
    policy = get_policy_class(config.type).from_pretrained(path, config=config)
    if (path / "policy_preprocessor.json").is_file():
        overrides_device = {"device_processor": {"device": device}}
        processors = make_pre_post_processors(
            config, pretrained_path=str(path), preprocessor_overrides=overrides_device
        )
    else:
        print(
            f"lerobot worker: {path} has no saved processors; building them from the config "
            "without dataset statistics (no normalisation)",
            file=sys.stderr,
        )
        processors = make_pre_post_processors(config)
    return policy, config, processors


def _fresh(
    policy_type: str,
    cameras: Sequence[str],
    image_size: Sequence[int],
    state_dim: int,
    action_dim: int,
    device: str,
    overrides: dict[str, Any],
) -> tuple[Any, Any, Any]:
    """A policy of ``policy_type`` with random weights, its config and processors."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import (
        get_policy_class,
        make_policy_config,
        make_pre_post_processors,
    )

    height, width = image_size
    inputs = {
        f"{IMAGE_PREFIX}{camera}": PolicyFeature(FeatureType.VISUAL, (3, height, width))
        for camera in cameras
    }
    inputs[STATE_FEATURE] = PolicyFeature(FeatureType.STATE, (state_dim,))
    outputs = {ACTION_FEATURE: PolicyFeature(FeatureType.ACTION, (action_dim,))}
    config = make_policy_config(
        policy_type, input_features=inputs, output_features=outputs, device=device
    )
    _configure(config, device, overrides)
    policy = get_policy_class(policy_type)(config=config)
    policy.to(device)
    if policy_type not in IDENTITY_STATS_TYPES:
        return policy, config, make_pre_post_processors(config)
    import torch

    stats = {
        key: {"min": torch.full((dim,), -1.0), "max": torch.ones(dim)}
        for key, dim in ((STATE_FEATURE, state_dim), (ACTION_FEATURE, action_dim))
    }
    return policy, config, make_pre_post_processors(config, dataset_stats=stats)


def _configure(config: Any, device: str, overrides: dict[str, Any]) -> None:
    """Set the device, drop backbone downloads, apply ``overrides`` (unknown names refused)."""
    config.device = device
    if hasattr(config, "pretrained_backbone_weights"):
        config.pretrained_backbone_weights = None
    for name, value in overrides.items():
        if not hasattr(config, name):
            raise ValueError(f"{type(config).__name__} has no field {name!r} (from overrides)")
        current = getattr(config, name)
        setattr(config, name, tuple(value) if isinstance(current, tuple) else value)
    validate = getattr(config, "__post_init__", None)
    if overrides and callable(validate):
        validate()
