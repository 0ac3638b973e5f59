# SPDX-License-Identifier: Apache-2.0
"""Tiny checkpoints of every family AFD splits, built locally, never downloaded.

Random weights from fixed seeds plus a small BPE tokenizer trained on embedded
arithmetic text; cached in a directory named by a hash of the build spec.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

BUILDER_VERSION = 1
"""Bump when the build changes in a way the spec below does not capture."""

SPEC_FILE = "afd-tiny-model.json"
DEFAULT_ROOT_ENV = "AFD_E2E_MODELS"
SEED = 1234
VOCAB_SIZE = 512
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
# Context length. A request on the real GSM8K data with 2 few-shot examples
# and 32 generated tokens needs up to about 3,070 tokens with this tokenizer
# (benchmarks/gsm8k_prompt_length.py: 0.75 of 4,096), so 1,024 refused some.
CONTEXT_TOKENS = 4096

# Model configs by architecture. DeepSeek-V2 keeps real MLA shapes because the
# CPU MLA kernels accept only kv_lora_rank + qk_rope_head_dim == 576; the CPU
# attention kernels reject small head sizes such as 16, hence Qwen's 64.
ARCH_CONFIGS: dict[str, dict[str, Any]] = {
    "deepseek_v2": {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "first_k_dense_replace": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 64,
        "v_head_dim": 32,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "topk_method": "greedy",
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 1.0,
        "max_position_embeddings": CONTEXT_TOKENS,
        "initializer_range": 0.1,
    },
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "mlp_only_layers": [0],
        "decoder_sparse_step": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "max_position_embeddings": CONTEXT_TOKENS,
        "initializer_range": 0.1,
    },
}
# Qwen3-Next and Qwen3.5/3.6 MoE: Gated DeltaNet (linear attention) layers
# interleaved with gated full attention. vLLM's CPU GDN kernels need bf16,
# equal key and value head dims of 64 or 128, and a conv kernel of 4; the
# full-attention head_dim must be one CPU_ATTN accepts (64).
_HYBRID_QWEN: dict[str, Any] = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "partial_rotary_factor": 0.25,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "max_position_embeddings": CONTEXT_TOKENS,
    "initializer_range": 0.1,
}
ARCH_CONFIGS["qwen3_next"] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    **_HYBRID_QWEN,
    # Layer 0 is a dense MLP: both exchange kinds run in the hybrid family.
    "full_attention_interval": 4,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [0],
    "intermediate_size": 128,
}
ARCH_CONFIGS["qwen3_5_moe"] = {
    "architectures": ["Qwen3_5MoeForCausalLM"],
    "model_type": "qwen3_5_moe_text",
    **_HYBRID_QWEN,
}
# The checkpoint layout Qwen3.5/3.6 MoE ship (a vision tower beside the
# language model), served text-only with --language-model-only.
ARCH_CONFIGS["qwen3_5_moe_vl"] = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {"model_type": "qwen3_5_moe_text", **_HYBRID_QWEN},
    "vision_config": {
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [],
    },
}
# Kimi K2 is DeepSeek-V3 with its own model_type (vLLM reads it with its
# DeepseekV3Config): sigmoid scores, noaux_tc routing with a correction bias,
# routed scaling, one shared expert; MLA in its real 512 + 64 shape.
ARCH_CONFIGS["kimi_k2"] = {
    **ARCH_CONFIGS["deepseek_v2"],
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "checkpoint_model_type": "kimi_k2",
    "n_routed_experts": 8,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "routed_scaling_factor": 2.827,
}
ARCHS: tuple[str, ...] = tuple(ARCH_CONFIGS)
ARCHITECTURES: dict[str, str] = {
    arch: config["architectures"][0] for arch, config in ARCH_CONFIGS.items()
}
"""The HF architecture each tiny model declares."""

_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
_NOUNS = [
    "apples",
    "eggs",
    "books",
    "coins",
    "cookies",
    "dollars",
    "marbles",
    "pencils",
    "tickets",
]
_NAMES = ["Janet", "Tom", "Maria", "Ali", "Chen", "Sara", "Omar", "Lena"]


def corpus_lines() -> list[str]:
    """Deterministic arithmetic text, GSM8K-like in vocabulary."""
    lines: list[str] = []
    for i in range(400):
        a, b = (i * 7) % 97 + 1, (i * 13) % 89 + 1
        name, noun = _NAMES[i % len(_NAMES)], _NOUNS[i % len(_NOUNS)]
        word = _NUMBER_WORDS[i % len(_NUMBER_WORDS)]
        lines.append(f"{name} has {a} {noun} and buys {b} more.")
        lines.append(f"How many {noun} does {name} have now? {a} + {b} = {a + b}.")
        lines.append(f"Question: what is {a} times {word}? Answer: {a} * {i % 21}.")
        lines.append(f"{a} minus {b} equals {a - b}; {a} plus {b} is {a + b}.")
        lines.append(f"The answer is #### {a * b}")
    return lines


def _versions() -> dict[str, str]:
    """Versions of the libraries that draw the weights and train the tokenizer
    (read from metadata, nothing imported)."""
    out = {}
    for dist in ("torch", "transformers", "tokenizers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def build_spec(arch: str) -> dict[str, Any]:
    """Everything that determines the built files; its hash names the cache."""
    if arch not in ARCH_CONFIGS:
        raise ValueError(f"unknown tiny model arch {arch!r}; choose one of {ARCHS}")
    return {
        "builder_version": BUILDER_VERSION,
        "arch": arch,
        "seed": SEED,
        "vocab_size": VOCAB_SIZE,
        "dtype": "bfloat16",
        "config": ARCH_CONFIGS[arch],
        "libraries": _versions(),
        "corpus_sha256": hashlib.sha256("\n".join(corpus_lines()).encode()).hexdigest(),
    }


def spec_hash(spec: dict[str, Any]) -> str:
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_root() -> Path:
    env = os.environ.get(DEFAULT_ROOT_ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "afd-e2e" / "models"


def model_dir(arch: str, out_root: Path) -> Path:
    return Path(out_root) / f"tiny-{arch}-{spec_hash(build_spec(arch))}"


BUILD_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")


class TinyModelError(RuntimeError):
    """The tiny model cannot be built here; the message says what to install."""


def build_tiny_model(arch: str, out_root: Path | str | None = None) -> Path:
    """Build (or reuse) the tiny ``arch`` model under ``out_root``; return its
    directory. Same spec, same directory; concurrent builders are safe."""
    root = Path(out_root) if out_root is not None else default_root()
    spec = build_spec(arch)
    target = model_dir(arch, root)
    if (target / SPEC_FILE).is_file():
        return target
    missing = [m for m in BUILD_LIBRARIES if importlib.util.find_spec(m) is None]
    if missing:
        raise TinyModelError(
            f"building the tiny {arch} model needs {', '.join(missing)}, which "
            "this environment lacks; install the cpu extra "
            "(pip install -e '.[cpu]') or run through tox (tox -e main)"
        )
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    staging.chmod(0o755)
    try:
        token_ids = _write_tokenizer(staging)
        _write_model(staging, spec, token_ids)
        (staging / SPEC_FILE).write_text(json.dumps(spec, indent=2, sort_keys=True))
        try:
            staging.rename(target)
        except OSError:
            if not (target / SPEC_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_tokenizer(out: Path) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus_lines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        model_max_length=CONTEXT_TOKENS,
    )
    fast.save_pretrained(str(out))
    return {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}


def _write_model(out: Path, spec: dict[str, Any], token_ids: dict[str, int]) -> None:
    import torch
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
    )

    fields = dict(spec["config"])
    model_type = fields.pop("model_type")
    # A checkpoint whose model_type transformers does not know under that name
    # (Kimi K2) is built as the class it is and relabelled in config.json.
    checkpoint_type = fields.pop("checkpoint_model_type", None)
    tokens = {
        "vocab_size": spec["vocab_size"],
        "bos_token_id": token_ids["<s>"],
        "eos_token_id": token_ids["</s>"],
        "pad_token_id": token_ids["</s>"],
        "tie_word_embeddings": False,
    }
    multimodal = "text_config" in fields
    if multimodal:
        fields["text_config"] = {**fields["text_config"], **tokens}
        fields["tie_word_embeddings"] = False
    else:
        fields.update(tokens)
    config = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(spec["seed"])
    auto = AutoModelForImageTextToText if multimodal else AutoModelForCausalLM
    model = auto.from_config(config, dtype=torch.float32)
    model = model.to(getattr(torch, spec["dtype"]))
    model.config.dtype = spec["dtype"]
    model.save_pretrained(str(out), safe_serialization=True)
    if checkpoint_type is not None:
        path = out / "config.json"
        saved = json.loads(path.read_text())
        saved["model_type"] = checkpoint_type
        path.write_text(json.dumps(saved, indent=2, sort_keys=True))
