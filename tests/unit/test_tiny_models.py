# SPDX-License-Identifier: Apache-2.0
"""The tiny checkpoints the harness builds: one per family this build splits,
each declaring an architecture the model table holds a role-split model for,
and the hybrid ones within what vLLM's CPU Gated DeltaNet kernels accept.

Pure: reads the build specs, builds nothing.
"""

from __future__ import annotations

import pytest

from afd_e2e.define.scenario import TinyModel
from afd_e2e.tiny_model import (
    ARCH_CONFIGS,
    ARCHITECTURES,
    ARCHS,
    build_spec,
    spec_hash,
)
from afd_plugin.model_support import BUILT_ARCHITECTURES, family_of


@pytest.mark.parametrize("arch", ARCHS)
def test_every_tiny_model_is_split_by_this_build(arch: str) -> None:
    architecture = ARCHITECTURES[arch]
    assert architecture in BUILT_ARCHITECTURES
    family = family_of(architecture)
    assert family is not None and "cpu" in family.platforms
    assert TinyModel(arch=arch).arch == arch


def test_every_split_family_has_a_tiny_model() -> None:
    families = {family_of(a).family for a in BUILT_ARCHITECTURES}  # type: ignore[union-attr]
    tiny = {family_of(a).family for a in ARCHITECTURES.values()}  # type: ignore[union-attr]
    assert families == tiny


@pytest.mark.parametrize("arch", ["qwen3_next", "qwen3_5_moe", "qwen3_5_moe_vl"])
def test_hybrid_tiny_models_fit_the_cpu_kernels(arch: str) -> None:
    config = ARCH_CONFIGS[arch]
    text = config.get("text_config", config)
    assert text["linear_key_head_dim"] == text["linear_value_head_dim"]
    assert text["linear_key_head_dim"] in (64, 128)
    assert text["linear_num_value_heads"] % text["linear_num_key_heads"] == 0
    assert text["linear_conv_kernel_dim"] == 4
    assert text["head_dim"] in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
    kinds = set(text["layer_types"])
    assert kinds == {"linear_attention", "full_attention"}
    assert len(text["layer_types"]) == text["num_hidden_layers"]


def test_kimi_k2_is_labelled_as_its_checkpoints_are() -> None:
    config = ARCH_CONFIGS["kimi_k2"]
    assert config["checkpoint_model_type"] == "kimi_k2"
    assert config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert (config["topk_method"], config["scoring_func"]) == ("noaux_tc", "sigmoid")


def test_each_tiny_model_has_its_own_cache_directory() -> None:
    hashes = {spec_hash(build_spec(arch)) for arch in ARCHS}
    assert len(hashes) == len(ARCHS)
