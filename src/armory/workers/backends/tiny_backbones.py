"""Backbone folders for LeRobot's VLAs built locally, with no hub download: a tokenizer
trained here with ``tokenizers`` on a small corpus, and a reduced transformers config
of the backbone's real architecture. Runs in LeRobot's environment (transformers,
tokenizers); nothing here holds pretrained weights.

``python -m armory.workers.backends.tiny_backbones smolvlm DIR`` writes a SmolVLM
folder (config.json, tokenizer, processor) that SmolVLA loads by path:
``--policy.overrides '{"vlm_model_name": "DIR", ...}'`` (see docs/policies.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

VOCAB_SIZE = 512
"""Tokens of the trained tokenizer (special tokens included)."""
GRID_TOKENS = tuple(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7))
"""SmolVLM's image-tile position tokens."""
SMOLVLM_SPECIAL = {
    "fake_image_token": "<fake_token_around_image>",
    "image_token": "<image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}
"""SmolVLM's named special tokens (SmolVLA reads the fake-image and global-image ids)."""
SMOLVLM_TINY = {
    "text": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
    },
    "vision": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": 64,
        "patch_size": 16,
    },
    "scale_factor": 2,
}
"""The reduced SmolVLM: a 4-layer llama text model of width 64, a 2-layer SigLIP vision
tower of width 32 on 64x64 images (16 patches, 4 image tokens after pixel shuffle)."""
SMOLVLM_FULL = {
    "text": {
        "hidden_size": 960,
        "intermediate_size": 2560,
        "num_hidden_layers": 32,
        "num_attention_heads": 15,
        "num_key_value_heads": 5,
        "head_dim": 64,
        "rope_theta": 100000.0,
        "max_position_embeddings": 8192,
    },
    "vision": {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "image_size": 512,
        "patch_size": 16,
    },
    "scale_factor": 4,
}
"""SmolVLM2-500M-Video-Instruct's architecture (SmolVLA's default backbone), with this
folder's small vocabulary: the GPU-size model with random weights."""
SIZES = {"tiny": SMOLVLM_TINY, "full": SMOLVLM_FULL}


def corpus() -> Iterator[str]:
    """A small English corpus of robot instructions to train the tokenizer on."""
    verbs = ("pick up", "place", "push", "open", "close", "stack", "move", "grasp", "put")
    things = ("the cube", "the red block", "the cup", "the drawer", "the towel", "the lid")
    places = ("in the bin", "on the table", "to the left", "to the right", "on the plate")
    for verb, thing, place in itertools.product(verbs, things, places):
        yield f"{verb} {thing} {place}."
    for number in range(100):
        yield f"step {number}: task {number % 7} of {number % 13}"


def train_tokenizer(vocab_size: int = VOCAB_SIZE) -> object:
    """A byte-level BPE tokenizer trained on :func:`corpus`, with SmolVLM's specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        *SMOLVLM_SPECIAL.values(),
        *GRID_TOKENS,
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return tokenizer


def local_tokenizer(**named_tokens: Any) -> Any:
    """:func:`train_tokenizer` as a transformers tokenizer: ``<|im_start|>`` begins,
    ``<|endoftext|>`` is unknown, ``named_tokens`` (eos_token, pad_token, ...) name others."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(),
        bos_token="<|im_start|>",
        unk_token="<|endoftext|>",
        **named_tokens,
    )


def write_smolvlm(folder: Path, size: str = "tiny") -> Path:
    """Write a SmolVLM backbone folder (config, tokenizer, processor) of ``size``."""
    from transformers import (
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    if size not in SIZES:
        raise ValueError(f"unknown SmolVLM size {size!r}; valid: {', '.join(SIZES)}")
    dims = SIZES[size]
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = local_tokenizer(
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        extra_special_tokens=dict(SMOLVLM_SPECIAL),
    )
    tokenizer.save_pretrained(folder)
    vision = dims["vision"]
    image_seq_len = (vision["image_size"] // vision["patch_size"]) ** 2 // dims["scale_factor"] ** 2
    config = SmolVLMConfig(
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "rms_norm_eps": 1e-5,
            "pad_token_id": tokenizer.pad_token_id,
            **dims["text"],
        },
        vision_config=dict(vision),
        scale_factor=dims["scale_factor"],
        image_token_id=tokenizer.convert_tokens_to_ids(SMOLVLM_SPECIAL["image_token"]),
        pad_token_id=tokenizer.pad_token_id,
    )
    config.save_pretrained(folder)
    image_size = {"longest_edge": vision["image_size"]}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(
            size=image_size, max_image_size=image_size, do_image_splitting=False
        ),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(size=image_size, max_image_size=image_size),
        image_seq_len=image_seq_len,
    )
    processor.save_pretrained(folder)
    (folder / "armory-backbone.json").write_text(
        json.dumps({"backbone": "smolvlm", "size": size, "weights": "none"}) + "\n"
    )
    return folder


BUILDERS = {"smolvlm": write_smolvlm}
"""Backbone folders this module writes, by name."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backbone", choices=sorted(BUILDERS))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES))
    args = parser.parse_args(argv)
    print(BUILDERS[args.backbone](args.folder, args.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
