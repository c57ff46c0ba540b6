"""GR00T N1.7 (LeRobot 0.6.1) built offline: LeRobot's own GR00TN17 and GrootPolicy, on a
base-model folder written here instead of ``nvidia/GR00T-N1.7-3B`` and a Qwen3-VL backbone
folder (:func:`~armory.workers.backends.tiny_backbones.write_qwen3vl`) instead of
``nvidia/Cosmos-Reason2-2B``. Runs in LeRobot's environment.

LeRobot loads the base model with ``GR00TN17.from_pretrained(base_model_path)`` (a config
and weights) and builds the backbone from the config's ``model_name``; its processor loads
the Qwen3-VL tokenizer and image processor by the module-level name
``GROOT_N1_7_BACKBONE_MODEL``. :func:`local_groot` writes both folders (the base model with
random weights drawn from torch's current seed, saved with ``save_pretrained``) and, while
open, points that name at the local backbone. ``tiny`` reduces the backbone and the action
head (a 2-layer DiT of width 32, 16-step chunks); ``full`` keeps N1.7's real sizes.

GR00T draws its initial action noise inside ``get_action`` with ``torch.randn`` (it takes
no noise argument): :class:`FixedNoise` hands it a fixed tile instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

TINY_ACTION_HEAD = {
    "action_horizon": 16,
    "hidden_size": 32,
    "input_embedding_dim": 32,
    "diffusion_model_cfg": {
        "positional_embeddings": None,
        "num_layers": 2,
        "num_attention_heads": 2,
        "attention_head_dim": 16,
        "norm_type": "ada_norm",
        "dropout": 0.0,
        "final_dropout": True,
        "output_dim": 32,
        "interleave_self_attention": True,
    },
    "vl_self_attention_cfg": {
        "positional_embeddings": None,
        "num_layers": 1,
        "num_attention_heads": 2,
        "attention_head_dim": 32,
        "dropout": 0.0,
        "final_dropout": True,
    },
}
"""The reduced action head: a 2-layer cross-attention DiT (2 heads of 16) and one
vision-language self-attention layer over the tiny backbone's 64-wide features."""
TINY_OVERRIDES = {"chunk_size": 16, "n_action_steps": 16, "use_bf16": False}
"""Policy config fields of the tiny size: the action head's 16-step chunk, float32 on CPU."""


def write_base_model(folder: Path, backbone: Path, size: str) -> Path:
    """Save a GR00T N1.7 base model (config and random weights) on the Qwen3-VL backbone
    folder ``backbone``, at ``size`` (tiny, full), to ``folder``."""
    from lerobot.policies.groot.groot_n1_7 import (
        GR00TN17,
        GR00TN17Config,
        _register_with_transformers,
    )
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(backbone).text_config
    fields: dict[str, Any] = {
        "model_name": str(backbone),
        "backbone_model_type": "qwen",
        "backbone_embedding_dim": text.hidden_size,
    }
    if size == "tiny":
        fields.update(TINY_ACTION_HEAD, select_layer=text.num_hidden_layers)
        fields.update(model_dtype="float32", dtype="float32")
    elif size != "full":
        raise ValueError(f"unknown GR00T size {size!r}; valid: tiny, full")
    _register_with_transformers()
    model = GR00TN17(GR00TN17Config(**fields), load_backbone_weights=False)
    model.save_pretrained(folder)
    return folder


@contextmanager
def local_groot(policy_type: str, size: str, folder: Path) -> Iterator[dict[str, Any]]:
    """While open, LeRobot builds GR00T N1.7 offline at ``size`` from folders written in
    ``folder``; yields the config overrides that point the policy at them."""
    from lerobot.policies.groot import processor_groot

    from armory.workers.backends.tiny_backbones import write_qwen3vl

    if policy_type != "groot":
        raise ValueError(f"{policy_type!r} is not groot")
    backbone = write_qwen3vl(folder / "backbone", size)
    base = write_base_model(folder / "base", backbone, size)
    saved = processor_groot.GROOT_N1_7_BACKBONE_MODEL
    processor_groot.GROOT_N1_7_BACKBONE_MODEL = str(backbone)
    try:
        yield {"base_model_path": str(base), **(TINY_OVERRIDES if size == "tiny" else {})}
    finally:
        processor_groot.GROOT_N1_7_BACKBONE_MODEL = saved


def noise_shape(policy: Any) -> tuple[int, int]:
    """Per-sample shape of the noise GR00T starts denoising from: (action_horizon,
    max_action_dim) of the model's action head."""
    head = policy._groot_model.action_head
    return int(head.action_horizon), int(head.action_dim)


class FixedNoise(TorchFunctionMode):
    """While active, ``torch.randn`` of shape (batch, *tile.shape) returns ``tile`` for every
    sample (cast to the requested dtype and device); other calls run unchanged. ``used``
    counts the draws replaced."""

    def __init__(self, tile: torch.Tensor) -> None:
        super().__init__()
        self.tile = tile
        self.used = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.randn:
            size = kwargs.get("size", args)
            if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
                size = size[0]
            if all(isinstance(dim, int) for dim in size) and tuple(size[1:]) == self.tile.shape:
                self.used += 1
                tile = self.tile.to(
                    device=kwargs.get("device") or self.tile.device,
                    dtype=kwargs.get("dtype") or self.tile.dtype,
                )
                return tile.unsqueeze(0).expand(size[0], *tile.shape).clone()
        return func(*args, **kwargs)
