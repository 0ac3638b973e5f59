# SPDX-License-Identifier: Apache-2.0
"""The FFN role's cache settings: no KV cache and no linear-attention state,
so prefix caching goes off, and for a hybrid model the mamba settings vLLM's
hook derived from prefix caching go back to what vLLM picks without it (its
own check refuses a mamba block size without prefix caching; the FFN server
of a Qwen3.5 or Qwen3-Next deployment failed to start on it).

Runs in tox env e2e (vLLM's real CacheConfig); no server.
"""

from __future__ import annotations

from types import SimpleNamespace

from vllm.config import CacheConfig, VllmConfig

from afd_plugin.patches.config_validation import _no_cache_on_ffn

MAX_MODEL_LEN = 4096


def ffn_config(cache: CacheConfig) -> SimpleNamespace:
    return SimpleNamespace(
        cache_config=cache, model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN)
    )


def vllm_refuses(cache: CacheConfig) -> bool:
    """Whether vLLM's own check (VllmConfig.validate_mamba_block_size)
    refuses these settings."""
    try:
        VllmConfig.validate_mamba_block_size(ffn_config(cache))  # type: ignore[arg-type]
    except ValueError:
        return True
    return False


def test_a_hybrid_models_ffn_role_drops_the_mamba_prefix_settings() -> None:
    # What vLLM's MambaModelConfig hook leaves with prefix caching on.
    cache = CacheConfig(block_size=256, enable_prefix_caching=True)
    cache.mamba_cache_mode = "align"
    cache.mamba_block_size = 256
    cache.enable_prefix_caching = False
    assert vllm_refuses(cache)  # prefix caching off alone is not enough
    cache.enable_prefix_caching = True
    _no_cache_on_ffn(ffn_config(cache))
    assert cache.enable_prefix_caching is False
    assert (cache.mamba_cache_mode, cache.mamba_block_size) == ("none", MAX_MODEL_LEN)
    assert not vllm_refuses(cache)


def test_other_models_keep_no_mamba_settings() -> None:
    cache = CacheConfig(enable_prefix_caching=True)
    _no_cache_on_ffn(ffn_config(cache))
    assert cache.enable_prefix_caching is False
    assert cache.mamba_block_size is None
    assert cache.mamba_cache_mode == "none"
