# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e plan``'s inputs: model shapes from config.json, built-ins and
scenario ids; hardware profiles; calibration and trace files. Bad input is
refused with every problem named (file, line or field, allowed values)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.plan.builtin_models import BUILTIN_MODELS
from afd_e2e.plan.calibration import load_calibration
from afd_e2e.plan.profiles import builtin_profiles, load_profile
from afd_e2e.plan.shapes import builtin_shape, read_config_file, resolve_shape
from afd_e2e.plan.types import PlanInputError


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_config_json_gives_the_builtin_shape(tmp_path: Path) -> None:
    _, config = BUILTIN_MODELS["deepseek-v3"]
    path = _write(tmp_path / "config.json", json.dumps(config))
    shape = read_config_file(tmp_path)  # the directory works too
    builtin = builtin_shape("deepseek-v3")
    assert shape.source == str(path)
    assert (shape.hidden_size, shape.num_layers, shape.moe_layers) == (7168, 61, 58)
    assert (shape.routed_experts, shape.top_k, shape.shared_experts) == (256, 8, 1)
    assert shape.kv_values_per_token == 576
    assert shape.total_params == builtin.total_params


def test_multimodal_config_is_read_from_text_config(tmp_path: Path) -> None:
    _, config = BUILTIN_MODELS["step-3"]
    path = _write(
        tmp_path / "config.json", json.dumps({"text_config": config, "vision": {}})
    )
    shape = read_config_file(path)
    # MFA: one 256-wide key and value head; MoE in 56 of 61 layers.
    assert (shape.attention, shape.kv_values_per_token, shape.moe_layers) == (
        "gqa",
        512,
        56,
    )


def test_mixtral_style_config(tmp_path: Path) -> None:
    config = {
        "hidden_size": 6144,
        "num_hidden_layers": 56,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "intermediate_size": 16384,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    shape = read_config_file(_write(tmp_path / "config.json", json.dumps(config)))
    assert (shape.routed_experts, shape.top_k, shape.moe_layers) == (8, 2, 56)
    assert shape.moe_intermediate_size == 16384
    assert shape.kv_values_per_token == 2 * 8 * 128
    assert shape.sparsity == pytest.approx(0.25)


def test_config_problems_are_listed_together(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "config.json",
        json.dumps(
            {"num_attention_heads": 8, "n_routed_experts": 4, "kv_lora_rank": 5}
        ),
    )
    with pytest.raises(PlanInputError) as info:
        read_config_file(path)
    text = str(info.value)
    for field in (
        "'hidden_size'",
        "'num_hidden_layers'",
        "'num_experts_per_tok' or 'moe_top_k'",
        "'qk_rope_head_dim'",
    ):
        assert field in text
    assert all(problem.startswith(str(path)) for problem in info.value.problems)
    assert len(info.value.problems) >= 4


def test_broken_json_names_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.json", '{\n  "hidden_size": ,\n}')
    with pytest.raises(PlanInputError, match=r"config\.json:2:\d+: not JSON"):
        read_config_file(path)


def test_tiny_scenario_id_resolves_through_the_catalogue() -> None:
    shape = resolve_shape("cpu-eager-1a1f", root=ROOT)
    assert shape.name == "tiny-deepseek_v2"
    assert (shape.hidden_size, shape.num_layers, shape.moe_layers) == (64, 3, 2)
    assert shape.kv_values_per_token == 576
    qwen = resolve_shape("cpu-eager-1a1f-qwen3", root=ROOT)
    assert (qwen.attention, qwen.moe_layers, qwen.kv_values_per_token) == (
        "gqa",
        2,
        128,
    )


def test_hub_scenario_without_weights_names_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(PlanInputError, match="Qwen/Qwen3-30B-A3B.*--model-root"):
        resolve_shape("qwen3-30b-a3b-afd-graph-2a1f", root=ROOT, model_root=tmp_path)
    config = tmp_path / "Qwen" / "Qwen3-30B-A3B" / "config.json"
    config.parent.mkdir(parents=True)
    _, qwen = BUILTIN_MODELS["qwen3-235b-a22b"]
    config.write_text(json.dumps(qwen))
    shape = resolve_shape(
        "qwen3-30b-a3b-afd-graph-2a1f", root=ROOT, model_root=tmp_path
    )
    assert shape.source == str(config)


def test_unknown_model_lists_the_builtins() -> None:
    with pytest.raises(PlanInputError, match="deepseek-v3, step-3"):
        resolve_shape("no-such-model", root=ROOT)


def test_every_builtin_profile_loads_and_names_its_sources() -> None:
    names = set(builtin_profiles())
    assert {"h800", "h20", "a800", "910b", "a100", "cpu-2core"} <= names
    for name in names:
        profile = load_profile(name)
        assert profile.sources and all(profile.sources)
    cpu = load_profile("cpu-2core")
    assert not cpu.has_roofline  # left to calibration
    assert load_profile("H800").instance_cost_per_hour == 16.0


def test_profile_problems_are_listed_with_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "gpu.yaml",
        "schema_version: 1\n"
        "name: X\n"
        "peak_flops: {bf16: 9.89e14, int4: 1.0e+15}\n"
        "memory_bandwidth: -1\n"
        "nic: 3\n",
    )
    with pytest.raises(PlanInputError) as info:
        load_profile(str(path))
    text = "\n".join(info.value.problems)
    assert f"{path}:5:1: nic: unknown field; allowed fields:" in text
    assert "sources: is required" in text
    assert "peak_flops.bf16: must be a number" in text and "9.890e+14" in text
    assert "peak_flops.int4" in text and "fp8" in text
    assert f"{path}:4:" in text and "greater than 0" in text


def test_compute_dtype_must_have_flops(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "gpu.yaml",
        "schema_version: 1\nname: X\nsources: [me]\n"
        "peak_flops: {bf16: 1.0e+14}\ncompute_dtype: fp8\n",
    )
    with pytest.raises(PlanInputError, match=r"gpu\.yaml:5:1: compute_dtype: 'fp8'"):
        load_profile(str(path))


def test_unknown_profile_lists_the_builtins() -> None:
    with pytest.raises(PlanInputError, match="built-in profiles: .*h800"):
        load_profile("tpu-v9")


def test_calibration_csv_fits_the_measured_lines(tmp_path: Path) -> None:
    rows = ["batch,attention_s,ffn_s,exchange_s"]
    for b in (1, 4, 16, 64):
        rows.append(f"{b},{2e-4 + 1e-5 * b},{5e-4 + 2e-6 * b},{1e-5 + 1e-7 * b}")
    fits = load_calibration(_write(tmp_path / "cal.csv", "\n".join(rows) + "\n"))
    assert not fits.attention_per_token
    assert fits.attention.slope == pytest.approx(1e-5)
    assert fits.attention.intercept == pytest.approx(2e-4)
    assert fits.ffn.slope == pytest.approx(2e-6)
    assert fits.exchange.intercept == pytest.approx(1e-5)


def test_calibration_json_with_context_fits_per_kv_token(tmp_path: Path) -> None:
    rows = [
        {
            "batch": b,
            "context": c,
            "attention_s": 1e-4 + 1e-8 * b * c,
            "ffn_s": 1e-3,
            "exchange_s": 1e-4,
        }
        for b, c in ((1, 1000), (8, 1000), (8, 4000))
    ]
    path = _write(tmp_path / "cal.json", json.dumps({"rows": rows}))
    fits = load_calibration(path)
    assert fits.attention_per_token
    assert fits.attention_time(10, 2000) == pytest.approx(1e-4 + 1e-8 * 20000)


def test_calibration_problems_are_listed_together(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "cal.csv",
        "batch,attention_s,ffn_s,exchange_s\n1,0.1,x,0.1\n2,-1,0.2,\n3,0.1\n",
    )
    with pytest.raises(PlanInputError) as info:
        load_calibration(path)
    assert info.value.problems == (f"{path}:4: 2 values for 4 columns",)
    path.write_text("batch,attention_s,ffn_s,exchange_s\n1,0.1,x,0.1\n2,-1,0.2,\n")
    with pytest.raises(PlanInputError) as info:
        load_calibration(path)
    assert info.value.problems == (
        f"{path}:2: field 'ffn_s' must be a non-negative number, got 'x'",
        f"{path}:3: field 'attention_s' must be a non-negative number, got '-1'",
        f"{path}:3: field 'exchange_s' is required",
    )


def test_calibration_needs_two_batch_sizes_and_named_columns(tmp_path: Path) -> None:
    path = _write(tmp_path / "cal.csv", "batch,attention_s,ffn_s,exchange_s\n4,1,1,1\n")
    with pytest.raises(PlanInputError, match="two or more different 'batch'"):
        load_calibration(path)
    path.write_text("batch,attn,ffn_s\n4,1,1\n")
    with pytest.raises(PlanInputError) as info:
        load_calibration(path)
    text = str(info.value)
    assert "unknown column(s) attn" in text and "missing column(s) attention_s" in text
