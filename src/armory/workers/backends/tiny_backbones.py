"""Backbone folders for LeRobot's VLAs built locally, with no hub download: a tokenizer
trained here with ``tokenizers`` on a small corpus, and a reduced transformers config
of the backbone's real architecture. Runs in LeRobot's environment (transformers,
tokenizers); nothing here holds pretrained weights.

``python -m armory.workers.backends.tiny_backbones smolvlm DIR`` writes a SmolVLM
folder (config.json, tokenizer, processor) that SmolVLA loads by path:
``--policy.overrides '{"vlm_model_name": "DIR", ...}'`` (see docs/policies.md);
``qwen3vl DIR`` a Qwen3-VL folder (GR00T N1.7's backbone: Cosmos-Reason2's architecture).
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


def _dims(backbone: str, sizes: dict[str, dict[str, Any]], size: str) -> dict[str, Any]:
    """The dimensions of ``backbone`` at ``size``; an unknown size names the valid ones."""
    if size not in sizes:
        raise ValueError(f"unknown {backbone} size {size!r}; valid: {', '.join(sizes)}")
    return sizes[size]


def _mark(folder: Path, backbone: str, size: str) -> Path:
    """Record in ``folder`` which backbone and size it holds (and that it has no weights)."""
    (folder / "armory-backbone.json").write_text(
        json.dumps({"backbone": backbone, "size": size, "weights": "none"}) + "\n"
    )
    return folder


def write_smolvlm(folder: Path, size: str = "tiny") -> Path:
    """Write a SmolVLM backbone folder (config, tokenizer, processor) of ``size``."""
    from transformers import (
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    dims = _dims("SmolVLM", SIZES, size)
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
    return _mark(folder, "smolvlm", size)


QWEN3VL_SPECIAL = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
}
"""Qwen3-VL's vision tokens (the model config holds their ids)."""
QWEN3VL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen's chat layout for user turns of images and text (what GR00T's processor renders)."""
QWEN3VL_TINY = {
    "text": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "rope_scaling": {
            "mrope_interleaved": True,
            "mrope_section": [4, 2, 2],
            "rope_type": "default",
        },
    },
    "vision": {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "num_position_embeddings": 256,
        "deepstack_visual_indexes": [0],
    },
}
"""The reduced Qwen3-VL: a 2-layer text model of width 64 (multimodal RoPE over 16-wide
heads), a 2-layer vision tower of width 32 with one deepstack layer."""
QWEN3VL_FULL = {
    "text": {
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 262144,
        "rope_scaling": {
            "mrope_interleaved": True,
            "mrope_section": [24, 20, 20],
            "rope_type": "default",
        },
    },
    "vision": {
        "depth": 24,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_heads": 16,
        "out_hidden_size": 2048,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [5, 11, 17],
    },
}
"""Cosmos-Reason2-2B's architecture (GR00T N1.7's backbone, a Qwen3-VL-2B layout), with this
folder's small vocabulary."""
QWEN3VL_SIZES = {"tiny": QWEN3VL_TINY, "full": QWEN3VL_FULL}


def write_qwen3vl(folder: Path, size: str = "tiny") -> Path:
    """Write a Qwen3-VL backbone folder (config, tokenizer with chat template, image and
    video processors) of ``size``."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLVideoProcessor

    dims = _dims("Qwen3-VL", QWEN3VL_SIZES, size)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = local_tokenizer(
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=dict(QWEN3VL_SPECIAL),
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(QWEN3VL_SPECIAL.values())})
    tokenizer.chat_template = QWEN3VL_CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    token_ids = {
        f"{name}_id": tokenizer.convert_tokens_to_ids(token)
        for name, token in QWEN3VL_SPECIAL.items()
    }
    patches = {"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
    config = Qwen3VLConfig(
        **token_ids,
        tie_word_embeddings=True,
        text_config={
            "model_type": "qwen3_vl_text",
            "vocab_size": len(tokenizer),
            "rms_norm_eps": 1e-6,
            "rope_theta": 5000000,
            "tie_word_embeddings": True,
            **dims["text"],
        },
        vision_config={
            "model_type": "qwen3_vl",
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": 3,
            **patches,
            **dims["vision"],
        },
    )
    config.save_pretrained(folder)
    merge = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2}
    Qwen2VLImageProcessor(**merge).save_pretrained(folder)
    Qwen3VLVideoProcessor(**merge).save_pretrained(folder)
    return _mark(folder, "qwen3vl", size)


BUILDERS = {"smolvlm": write_smolvlm, "qwen3vl": write_qwen3vl}
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
