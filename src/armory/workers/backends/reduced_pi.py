"""pi0 and pi0.5 (LeRobot 0.6.1) built offline: LeRobot's own PI0/PI05 classes, with the
tokenizer trained here in place of PaliGemma's (which LeRobot fetches by hub name), and
at ``tiny`` size narrower, shallower Gemma and SigLIP configs. Runs in LeRobot's
environment.

LeRobot fixes the backbone's size in code (``get_gemma_config``: gemma_2b or gemma_300m,
a 27-layer SigLIP, a 257,152-token vocabulary), so :func:`local_pi` replaces, for the
duration of one model build, the names LeRobot's pi modules look up: ``get_gemma_config``
(tiny dimensions), the PaliGemma and Gemma-expert classes (a config shrunk just before
LeRobot's own class is built: a small vision tower, the tokenizer's vocabulary) and the
processor's ``TokenizerProcessorStep`` (given the local tokenizer). At ``full`` size only
the tokenizer is replaced: the model is LeRobot's at its real size.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PI_TYPES = ("pi0", "pi05")
"""LeRobot types built by this module."""
TINY_GEMMA = {
    "gemma_2b": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 2, "num_kv_heads": 1,
                 "head_dim": 16},
    "gemma_300m": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 2, "num_kv_heads": 1,
                   "head_dim": 16},
}  # fmt: skip
"""Tiny stand-ins of the two Gemma variants: the VLM twice as wide as the action expert,
sharing heads and head size, as the real ones do (2048 and 1024 wide, 8 heads of 256)."""
TINY_SIGLIP = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 2}  # fmt: skip
"""A 2-layer SigLIP of width 32 (the real one: 27 layers of 1152)."""
TINY_OVERRIDES = {"image_resolution": [56, 56], "tokenizer_max_length": 48}
"""Config fields of the tiny size: 56x56 images (16 patches of 14), 48 prompt tokens."""


@contextmanager
def local_pi(policy_type: str, size: str, folder: Path) -> Iterator[dict[str, Any]]:
    """While open, LeRobot builds ``policy_type`` (pi0 or pi05) offline at ``size``;
    yields the config overrides the size needs. The tokenizer is written to ``folder``."""
    from armory.workers.backends.tiny_backbones import local_tokenizer

    if policy_type not in PI_TYPES:
        raise ValueError(f"{policy_type!r} is not one of {PI_TYPES}")
    tokenizer = local_tokenizer(eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.save_pretrained(folder)
    modeling = importlib.import_module(f"lerobot.policies.{policy_type}.modeling_{policy_type}")
    processor = importlib.import_module(f"lerobot.policies.{policy_type}.processor_{policy_type}")
    step_class = processor.TokenizerProcessorStep

    def tokenizer_step(**kwargs: Any) -> Any:
        kwargs.pop("tokenizer_name", None)
        return step_class(tokenizer=tokenizer, **kwargs)

    patches: dict[tuple[Any, str], Any] = {(processor, "TokenizerProcessorStep"): tokenizer_step}
    if size == "tiny":
        vlm_class, expert_class = (
            modeling.PaliGemmaForConditionalGenerationWithPiGemma,
            modeling.PiGemmaForCausalLM,
        )
        vocab_size = len(tokenizer)

        def gemma_config(variant: str) -> Any:
            return modeling.GemmaConfig(**TINY_GEMMA[variant])

        def vlm(config: Any) -> Any:
            vision = config.vision_config
            for name, value in TINY_SIGLIP.items():
                setattr(vision, name, value)
            vision.projection_dim = config.text_config.hidden_size
            config.text_config.vocab_size = vocab_size
            config.vocab_size = vocab_size
            config.image_token_index = tokenizer.unk_token_id
            return vlm_class(config=config)

        def expert(config: Any) -> Any:
            config.vocab_size = vocab_size
            return expert_class(config=config)

        patches.update(
            {
                (modeling, "get_gemma_config"): gemma_config,
                (modeling, "PaliGemmaForConditionalGenerationWithPiGemma"): vlm,
                (modeling, "PiGemmaForCausalLM"): expert,
            }
        )
    elif size != "full":
        raise ValueError(f"unknown pi backbone size {size!r}; valid: tiny, full")
    saved = {key: getattr(*key) for key in patches}
    for (module, name), value in patches.items():
        setattr(module, name, value)
    try:
        yield dict(TINY_OVERRIDES) if size == "tiny" else {}
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
