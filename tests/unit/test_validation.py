# SPDX-License-Identifier: Apache-2.0
"""validate_deployment: every cell of AFD-I7, every constraint of AFD-I8, and
what this build does not hold (connectors, role workers, role-split models).

Rejected cases assert the message names the field that must change. Rule
checks look at rule errors only; what this build lacks is tested on its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from afd_plugin.config import parse_afd_config
from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.errors import AFDConfigError
from afd_plugin.validation import Deployment, check_deployment, validate_deployment

GATE = "additional_config.afd.compute_gate_on_attention"
EXTRA_GATE = "additional_config.afd.connector_extra_config.compute_gate_on_attention"

PLATFORM = {
    "P2pGlooAFDConnector": "cpu",
    "P2pNcclAFDConnector": "cuda",
    "CAMP2pAFDConnector": "npu",
    "CAMAsyncAFDConnector": "npu",
}
DEEPSEEK = "DeepseekV2ForCausalLM"
QWEN3 = "Qwen3MoeForCausalLM"
QWEN35 = "Qwen3_5MoeForConditionalGeneration"
QWEN35_TEXT = "Qwen3_5MoeForCausalLM"
QWEN3_NEXT = "Qwen3NextForCausalLM"


def cfg(connector: str, gate: bool, role: str = "attention", **extra: Any):
    return parse_afd_config(
        {
            "afd": {
                "role": role,
                "connector": connector,
                "compute_gate_on_attention": gate,
                "connector_extra_config": extra,
            }
        }
    )


def dep(connector: str, **kw: Any) -> Deployment:
    return Deployment(
        platform=kw.pop("platform", PLATFORM[connector]),
        architecture=kw.pop("architecture", DEEPSEEK),
        **kw,
    )


def paths(config, deployment) -> set[str]:
    """Paths of the rule errors (not what this build lacks)."""
    return {e.path for e in check_deployment(config, deployment) if not e.not_in_build}


def absent(config, deployment) -> list[str]:
    """Messages of what this build lacks for the deployment."""
    return [e.message for e in check_deployment(config, deployment) if e.not_in_build]


# AFD-I7: connector x runner x model x gate. None = valid, else the field named.
I7_MATRIX = [
    # connector, runner, architecture, gate, extra, expected error path
    ("P2pNcclAFDConnector", "v1", DEEPSEEK, True, {}, None),
    ("P2pNcclAFDConnector", "v1", DEEPSEEK, False, {}, None),
    ("P2pNcclAFDConnector", "v2", DEEPSEEK, False, {}, None),
    ("P2pNcclAFDConnector", "v2", DEEPSEEK, True, {}, GATE),
    ("P2pNcclAFDConnector", "v1", QWEN3, False, {}, None),
    ("P2pNcclAFDConnector", "v1", QWEN3, True, {}, GATE),
    ("P2pNcclAFDConnector", "v1", QWEN35, False, {}, None),
    ("P2pNcclAFDConnector", "v1", QWEN35, True, {}, GATE),
    ("P2pNcclAFDConnector", "v2", QWEN3, True, {}, GATE),
    ("P2pGlooAFDConnector", "v1", DEEPSEEK, True, {}, None),
    ("P2pGlooAFDConnector", "v1", DEEPSEEK, False, {}, None),
    ("P2pGlooAFDConnector", "v1", QWEN3, False, {}, None),
    ("P2pGlooAFDConnector", "v1", QWEN35, False, {}, None),
    ("P2pGlooAFDConnector", "v1", QWEN35, True, {}, GATE),
    ("P2pGlooAFDConnector", "v1", QWEN35_TEXT, False, {}, None),
    ("P2pGlooAFDConnector", "v1", QWEN35_TEXT, True, {}, GATE),
    ("P2pGlooAFDConnector", "v1", QWEN3_NEXT, False, {}, None),
    ("P2pGlooAFDConnector", "v1", QWEN3_NEXT, True, {}, GATE),
    ("P2pGlooAFDConnector", "v1", QWEN3, True, {}, GATE),
    ("CAMP2pAFDConnector", "v1", DEEPSEEK, False, {}, None),
    ("CAMP2pAFDConnector", "v1", DEEPSEEK, True, {}, GATE),
    (
        "CAMP2pAFDConnector",
        "v1",
        DEEPSEEK,
        False,
        {"compute_gate_on_attention": True},
        EXTRA_GATE,
    ),
    ("CAMP2pAFDConnector", "v2", DEEPSEEK, False, {}, None),
    ("CAMP2pAFDConnector", "v2", DEEPSEEK, True, {}, GATE),
    ("CAMAsyncAFDConnector", "v1", DEEPSEEK, True, {}, None),
    ("CAMAsyncAFDConnector", "v1", DEEPSEEK, False, {}, GATE),
    ("CAMAsyncAFDConnector", "v1", DEEPSEEK, True, {"async_moe_ubatching": True}, None),
    (
        "CAMAsyncAFDConnector",
        "v1",
        DEEPSEEK,
        False,
        {"async_moe_ubatching": True},
        GATE,
    ),
    ("CAMAsyncAFDConnector", "v2", DEEPSEEK, True, {}, GATE),
]


@pytest.mark.parametrize(
    ("connector", "runner", "arch", "gate", "extra", "expected"),
    I7_MATRIX,
    ids=[f"{c}-{r}-{a}-gate={g}-{e}" for c, r, a, g, e, _ in I7_MATRIX],
)
def test_gate_matrix(connector, runner, arch, gate, extra, expected) -> None:
    config = cfg(connector, gate, **extra)
    deployment = dep(connector, model_runner=runner, architecture=arch)
    found = paths(config, deployment)
    if expected is None:
        assert found == set()
        if absent(config, deployment):
            with pytest.raises(AFDConfigError, match="not in this build"):
                validate_deployment(config, deployment)
        else:
            validate_deployment(config, deployment)
    else:
        assert expected in found
        with pytest.raises(AFDConfigError) as info:
            validate_deployment(config, deployment)
        assert expected in str(info.value)


OPS = "additional_config.afd.connector_extra_config.ops"


def test_cam_p2p_runs_on_the_cpu_with_its_reference_ops_only() -> None:
    on_cpu = dep("CAMP2pAFDConnector", platform="cpu", architecture=QWEN3)
    validate_deployment(cfg("CAMP2pAFDConnector", False, ops="reference"), on_cpu)
    # The default is the Ascend kernels: on the CPU that names the ops field.
    errors = check_deployment(cfg("CAMP2pAFDConnector", False), on_cpu)
    assert [e.path for e in errors] == [OPS]
    assert "with the reference ops only" in errors[0].message
    assert "got 'ascend'" in errors[0].message
    # The reference kernels are never a choice (nor a fallback) on an NPU.
    errors = check_deployment(
        cfg("CAMP2pAFDConnector", False, ops="reference"), dep("CAMP2pAFDConnector")
    )
    assert OPS in {e.path for e in errors}
    assert any("CPU platform only, not npu" in e.message for e in errors)


def test_a_connector_without_reference_ops_stays_off_the_cpu() -> None:
    errors = check_deployment(
        cfg("P2pNcclAFDConnector", False),
        dep("P2pNcclAFDConnector", platform="cpu", architecture=QWEN3),
    )
    assert any(
        e.path == "additional_config.afd.connector"
        and "runs on cuda, not cpu; use one of: P2pGlooAFDConnector" in e.message
        for e in errors
    )


def test_cam_async_message_mentions_async_moe_ubatching() -> None:
    errors = check_deployment(
        cfg("CAMAsyncAFDConnector", False, async_moe_ubatching=True),
        dep("CAMAsyncAFDConnector"),
    )
    assert any("async_moe_ubatching" in e.message for e in errors)


@pytest.mark.parametrize("role", ["attention", "ffn"])
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"pp": 2}, "deployment.pp"),
        ({"pcp": 2}, "deployment.pcp"),
        ({"dcp": 2}, "deployment.dcp"),
        ({"enable_eplb": True}, "deployment.enable_eplb"),
    ],
)
def test_v2_constraints_hold_for_both_roles(role, change, expected) -> None:
    config = cfg("P2pNcclAFDConnector", False, role=role)
    base = dep("P2pNcclAFDConnector", model_runner="v2")
    assert paths(config, base) == set()
    assert expected in paths(config, replace(base, **change))


@pytest.mark.parametrize("role", ["attention", "ffn"])
def test_v2_gate_refused_for_both_roles(role) -> None:
    config = cfg("P2pNcclAFDConnector", True, role=role)
    assert GATE in paths(config, dep("P2pNcclAFDConnector", model_runner="v2"))


@pytest.mark.parametrize("role", ["attention", "ffn"])
def test_role_rank_count_must_equal_dp_times_tp(role) -> None:
    field = "num_attention_ranks" if role == "attention" else "num_ffn_ranks"
    config = parse_afd_config(
        {
            "afd": {
                "role": role,
                "connector": "P2pNcclAFDConnector",
                "num_attention_ranks": 2,
                "num_ffn_ranks": 2,
            }
        }
    )
    good = dep("P2pNcclAFDConnector", model_runner="v2", dp=2)
    assert paths(config, good) == set()
    assert paths(config, replace(good, tp=2)) == {f"additional_config.afd.{field}"}
    msg = " ".join(e.message for e in check_deployment(config, replace(good, dp=1)))
    assert "DP x TP x PP = 1 x 1 x 1 = 1, got 2" in msg


def test_attention_ranks_at_least_ffn_ranks() -> None:
    config = parse_afd_config(
        {
            "afd": {
                "role": "ffn",
                "connector": "P2pNcclAFDConnector",
                "num_attention_ranks": 1,
                "num_ffn_ranks": 2,
            }
        }
    )
    assert "additional_config.afd.num_attention_ranks" in paths(
        config, dep("P2pNcclAFDConnector", dp=2)
    )


@pytest.mark.parametrize(
    ("platform", "connector", "runner", "mode", "ok"),
    [
        ("cuda", "P2pNcclAFDConnector", "v1", "eager", True),
        ("cuda", "P2pNcclAFDConnector", "v1", "FULL_DECODE_ONLY", True),
        ("cuda", "P2pNcclAFDConnector", "v1", "FULL", False),
        ("cuda", "P2pNcclAFDConnector", "v1", "PIECEWISE", False),
        ("cuda", "P2pNcclAFDConnector", "v2", "FULL_DECODE_ONLY", True),
        ("cuda", "P2pNcclAFDConnector", "v2", "FULL", False),
        ("cuda", "P2pNcclAFDConnector", "v2", "FULL_AND_PIECEWISE", False),
        ("npu", "CAMP2pAFDConnector", "v1", "FULL_DECODE_ONLY", True),
        ("npu", "CAMP2pAFDConnector", "v1", "FULL", False),
        ("npu", "CAMP2pAFDConnector", "v2", "FULL", True),
        ("npu", "CAMP2pAFDConnector", "v2", "FULL_DECODE_ONLY", True),
        ("npu", "CAMAsyncAFDConnector", "v1", "FULL_DECODE_ONLY", False),
        ("npu", "CAMAsyncAFDConnector", "v1", "eager", True),
        ("cpu", "P2pGlooAFDConnector", "v1", "eager", True),
        ("cpu", "P2pGlooAFDConnector", "v1", "FULL_DECODE_ONLY", False),
    ],
)
def test_graph_modes_per_platform(platform, connector, runner, mode, ok) -> None:
    config = cfg(connector, connector == "CAMAsyncAFDConnector")
    found = paths(config, dep(connector, model_runner=runner, graph_mode=mode))
    assert (found == set()) is ok, found
    if not ok:
        assert found == {"deployment.graph_mode"}


def test_graph_mode_message_lists_allowed_modes() -> None:
    errors = check_deployment(
        cfg("P2pNcclAFDConnector", False),
        dep("P2pNcclAFDConnector", model_runner="v2", graph_mode="FULL"),
    )
    assert "allowed: eager, FULL_DECODE_ONLY" in errors[0].message


def test_dbo_on_model_runner_v2_is_refused_at_start_as_not_in_this_build() -> None:
    """The rules allow it with attention DP > 1, but the V2 runners of this
    build do not micro-batch: refused before any weight loads, on both roles,
    naming the flag and what to run instead."""
    for role in ("attention", "ffn"):
        config = cfg("P2pNcclAFDConnector", False, role=role)
        v2_dbo = dep("P2pNcclAFDConnector", model_runner="v2", enable_dbo=True, dp=2)
        errors = check_deployment(config, v2_dbo)
        found = [(e.path, e.message) for e in errors if e.not_in_build]
        why = (
            "micro-batching (DBO) in the AFD model runner V2 pair is not in this "
            "build: drop --enable-dbo or run model runner V1"
        )
        assert found == [("deployment.enable_dbo", why)], role
        assert absent(config, dep("P2pNcclAFDConnector", model_runner="v2", dp=2)) == []
        assert absent(config, dep("P2pNcclAFDConnector", enable_dbo=True, dp=2)) == []


def test_dbo_rules() -> None:
    nccl = cfg("P2pNcclAFDConnector", False)
    assert paths(nccl, dep("P2pNcclAFDConnector", enable_dbo=True)) == set()
    assert paths(nccl, dep("P2pNcclAFDConnector", enable_dbo=True, num_ubatches=3)) == {
        "deployment.num_ubatches"
    }
    # V2 DBO needs attention DP > 1; the FFN role is not constrained by it.
    assert paths(
        nccl, dep("P2pNcclAFDConnector", model_runner="v2", enable_dbo=True)
    ) == {"deployment.dp"}
    ffn = cfg("P2pNcclAFDConnector", False, role="ffn")
    assert (
        paths(ffn, dep("P2pNcclAFDConnector", model_runner="v2", enable_dbo=True))
        == set()
    )
    # No control plane: no native DBO. NPU V2: no DBO. CPU: no DBO.
    assert "deployment.enable_dbo" in paths(
        cfg("CAMAsyncAFDConnector", True), dep("CAMAsyncAFDConnector", enable_dbo=True)
    )
    assert "deployment.enable_dbo" in paths(
        cfg("CAMP2pAFDConnector", False),
        dep("CAMP2pAFDConnector", model_runner="v2", enable_dbo=True, dp=1),
    )
    assert "deployment.enable_dbo" in paths(
        cfg("P2pGlooAFDConnector", False), dep("P2pGlooAFDConnector", enable_dbo=True)
    )


def micro(connector: str, role: str = "attention", count: int = 2):
    return parse_afd_config(
        {"afd": {"role": role, "connector": connector, "micro_batches": count}}
    )


def messages(config, deployment) -> dict[str, str]:
    return {e.path: e.message for e in check_deployment(config, deployment)}


def test_two_micro_batches_on_the_cpu_are_the_afd_field() -> None:
    gloo = "P2pGlooAFDConnector"
    assert paths(micro(gloo), dep(gloo)) == set()
    assert paths(micro(gloo, "ffn"), dep(gloo)) == set()
    # vLLM's flag on the CPU names the switch that works there.
    found = messages(cfg(gloo, False), dep(gloo, enable_dbo=True))
    assert "afd.micro_batches: 2" in found["deployment.enable_dbo"]
    assert "turns --enable-dbo off" in found["deployment.enable_dbo"]
    # The CPU switch elsewhere names vLLM's flag.
    found = messages(micro("P2pNcclAFDConnector"), dep("P2pNcclAFDConnector"))
    assert "--enable-dbo" in found["additional_config.afd.micro_batches"]
    # Every attention rank splits its own step: attention DP > 1 runs too.
    attention_dp2 = parse_afd_config(
        {
            "afd": {
                "role": "attention",
                "connector": gloo,
                "micro_batches": 2,
                "num_attention_ranks": 2,
            }
        }
    )
    assert paths(attention_dp2, dep(gloo, dp=2)) == set()
    ffn_dp2 = parse_afd_config(
        {
            "afd": {
                "role": "ffn",
                "connector": gloo,
                "micro_batches": 2,
                "num_attention_ranks": 2,
                "num_ffn_ranks": 2,
            }
        }
    )
    assert paths(ffn_dp2, dep(gloo, dp=2)) == set()


def test_micro_batches_allows_one_or_two() -> None:
    with pytest.raises(AFDConfigError) as info:
        micro("P2pGlooAFDConnector", count=3)
    (error,) = info.value.errors
    assert error.path == "additional_config.afd.micro_batches"
    assert "1" in error.message and "2" in error.message


def test_connector_platform_mismatch_names_the_right_connectors() -> None:
    errors = check_deployment(
        cfg("P2pNcclAFDConnector", False), dep("P2pNcclAFDConnector", platform="cpu")
    )
    connector_errors = [
        e for e in errors if e.path == "additional_config.afd.connector"
    ]
    assert connector_errors and "P2pGlooAFDConnector" in connector_errors[0].message


def test_model_platform_and_unknown_architecture() -> None:
    assert "deployment.platform" in paths(
        cfg("CAMP2pAFDConnector", False),
        dep("CAMP2pAFDConnector", architecture=QWEN3),
    )
    errors = check_deployment(
        cfg("P2pGlooAFDConnector", False),
        dep("P2pGlooAFDConnector", architecture="LlamaForCausalLM"),
    )
    assert [e.path for e in errors] == ["deployment.architecture"]
    assert "Qwen3MoeForCausalLM" in errors[0].message


def test_v2_is_not_available_on_cpu() -> None:
    assert "deployment.model_runner" in paths(
        cfg("P2pGlooAFDConnector", False), dep("P2pGlooAFDConnector", model_runner="v2")
    )


def test_malformed_deployment_reports_every_field() -> None:
    bad = Deployment(
        platform="tpu",
        architecture=DEEPSEEK,
        model_runner="v3",
        graph_mode="none",
        dp=0,
        tp=True,
    )  # type: ignore[arg-type]
    found = paths(cfg("P2pGlooAFDConnector", False), bad)
    assert found == {
        "deployment.platform",
        "deployment.model_runner",
        "deployment.graph_mode",
        "deployment.dp",
        "deployment.tp",
    }


def test_all_problems_reported_together() -> None:
    config = parse_afd_config(
        {
            "afd": {
                "role": "attention",
                "connector": "CAMP2pAFDConnector",
                "compute_gate_on_attention": True,
                "connector_extra_config": {"compute_gate_on_attention": True},
            }
        }
    )
    with pytest.raises(AFDConfigError) as info:
        validate_deployment(
            config,
            dep(
                "CAMP2pAFDConnector",
                architecture=QWEN3,
                model_runner="v2",
                pp=2,
                graph_mode="PIECEWISE",
            ),
        )
    assert {
        GATE,
        EXTRA_GATE,
        "deployment.pp",
        "deployment.graph_mode",
        "deployment.platform",
    } <= set(info.value.paths)


# -- what this build holds (one table per fact) ------------------------------


@pytest.mark.parametrize("arch", [QWEN35, QWEN35_TEXT, QWEN3_NEXT])
@pytest.mark.parametrize("role", ["attention", "ffn"])
def test_hybrid_qwen_models_refuse_the_gate_on_attention_on_both_roles(
    arch: str, role: str
) -> None:
    """AFD-I7: Qwen3.5/3.6 MoE (both checkpoint layouts) and Qwen3-Next keep
    the gate on the FFN role; the one validator refuses it on either role,
    naming the family and the architecture."""
    config = cfg("P2pGlooAFDConnector", True, role=role)
    with pytest.raises(AFDConfigError) as info:
        validate_deployment(config, dep("P2pGlooAFDConnector", architecture=arch))
    assert GATE in str(info.value) and f"({arch})" in str(info.value)
    validate_deployment(
        cfg("P2pGlooAFDConnector", False, role=role),
        dep("P2pGlooAFDConnector", architecture=arch),
    )


def test_an_architecture_without_a_role_model_is_not_in_this_build() -> None:
    """DeepSeek-V3.2 is in the DeepSeek family, but this build has no
    role-split model for it: it would fail at model load."""
    config = cfg("P2pNcclAFDConnector", False)
    deployment = dep("P2pNcclAFDConnector", architecture="DeepseekV32ForCausalLM")
    errors = check_deployment(config, deployment)
    assert [(e.path, e.not_in_build) for e in errors] == [
        ("deployment.architecture", True)
    ]
    assert "not in this build" in errors[0].message
    assert "DeepseekV2ForCausalLM" in errors[0].message  # what this build splits
    with pytest.raises(AFDConfigError, match="DeepseekV32ForCausalLM"):
        validate_deployment(config, deployment)


def test_a_platform_without_role_workers_is_not_in_this_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A build without afd_plugin.runtime.npu refuses worker_cls=auto on NPU
    before a ModuleNotFoundError at start; this build ships it."""
    config = cfg("CAMP2pAFDConnector", False)
    assert absent(config, dep("CAMP2pAFDConnector")) == []
    import afd_plugin.validation as validation
    import afd_plugin.worker_selection as selection

    real = selection.worker_in_build
    without_npu = lambda path: ".npu." not in path and real(path)  # noqa: E731
    monkeypatch.setattr(validation, "worker_in_build", without_npu)
    monkeypatch.setattr(selection, "worker_in_build", without_npu)
    messages = absent(config, dep("CAMP2pAFDConnector"))
    worker = [m for m in messages if "afd_plugin.runtime.npu" in m]
    assert len(worker) == 1 and "not in this build" in worker[0]
    assert "runs AFD on: cpu, cuda" in worker[0]


def test_an_unimplemented_connector_is_not_in_this_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A registered connector whose module this build lacks is named as absent
    (with what the build has), not a ModuleNotFoundError at start."""
    spec = AFDConnectorFactory.get_spec("CAMAsyncAFDConnector")
    missing = replace(spec, loader="afd_plugin.connectors.npu.not_built:Absent")
    monkeypatch.setitem(AFDConnectorFactory._specs, spec.name, missing)
    messages = absent(cfg("CAMAsyncAFDConnector", True), dep("CAMAsyncAFDConnector"))
    connector = [m for m in messages if m.startswith("CAMAsyncAFDConnector")]
    assert len(connector) == 1 and "not in this build" in connector[0]
    assert "not_built" in connector[0]
    assert "P2pGlooAFDConnector, P2pNcclAFDConnector" in connector[0]


@pytest.mark.parametrize("role", ["attention", "ffn"])
def test_ascend_graphs_and_model_runner_v2_are_not_in_this_build(role: str) -> None:
    """The rules allow CAMP2p graphs on Ascend (V1 FULL_DECODE_ONLY, V2 FULL);
    this build's Ascend runners are V1 and eager, so such a deployment is
    refused at start naming what is absent, not at its first capture."""
    config = cfg("CAMP2pAFDConnector", False, role=role)
    assert absent(config, dep("CAMP2pAFDConnector")) == []
    cases = {
        ("v1", "FULL_DECODE_ONLY"): ["deployment.graph_mode"],
        ("v2", "eager"): ["deployment.model_runner"],
        ("v2", "FULL"): ["deployment.model_runner", "deployment.graph_mode"],
    }
    for (runner, mode), wanted in cases.items():
        deployment = dep("CAMP2pAFDConnector", model_runner=runner, graph_mode=mode)
        errors = [e for e in check_deployment(config, deployment) if e.not_in_build]
        assert [e.path for e in errors] == wanted, (runner, mode)
        assert all("not in this build" in e.message for e in errors)
        assert paths(config, deployment) == set()  # within the rules
    [graph] = absent(config, dep("CAMP2pAFDConnector", graph_mode="FULL_DECODE_ONLY"))
    assert "ACL graph capture" in graph and "run eager" in graph
    # The other platforms are untouched by it.
    nccl = cfg("P2pNcclAFDConnector", False, role=role)
    graphs = dep(
        "P2pNcclAFDConnector", model_runner="v2", graph_mode="FULL_DECODE_ONLY"
    )
    assert absent(nccl, graphs) == []


def test_every_registered_connector_is_in_this_build() -> None:
    for spec in AFDConnectorFactory.specs():
        assert spec.implemented, spec.name


def test_cam_async_pairs_any_ratio_the_others_need_more_attention_ranks() -> None:
    """Attention ranks first, every attention rank reaching every FFN rank:
    1A2F is a CAM async deployment; elsewhere A >= F."""

    def ranks(connector: str, gate: bool) -> Any:
        return parse_afd_config(
            {
                "afd": {
                    "role": "ffn",
                    "connector": connector,
                    "compute_gate_on_attention": gate,
                    "num_attention_ranks": 1,
                    "num_ffn_ranks": 2,
                }
            }
        )

    path = "additional_config.afd.num_attention_ranks"
    assert path not in paths(
        ranks("CAMAsyncAFDConnector", True), dep("CAMAsyncAFDConnector", dp=2)
    )
    for connector in ("P2pGlooAFDConnector", "CAMP2pAFDConnector"):
        assert path in paths(ranks(connector, False), dep(connector, dp=2))


def test_cam_async_attn_ranks_per_dp_is_the_attention_tp() -> None:
    path = "additional_config.afd.connector_extra_config.attn_ranks_per_dp"
    two = dep("CAMAsyncAFDConnector", tp=2)
    config = cfg("CAMAsyncAFDConnector", True, attn_ranks_per_dp=1)
    errors = [e for e in check_deployment(config, two) if e.path == path]
    assert len(errors) == 1 and "TP size (2)" in errors[0].message
    good = cfg("CAMAsyncAFDConnector", True, attn_ranks_per_dp=2)
    assert path not in paths(good, two)


def test_cam_async_has_no_micro_batches_of_the_control_plane() -> None:
    config = parse_afd_config(
        {
            "afd": {
                "role": "attention",
                "connector": "CAMAsyncAFDConnector",
                "compute_gate_on_attention": True,
                "micro_batches": 2,
                "connector_extra_config": {"ops": "reference"},
            }
        }
    )
    errors = check_deployment(config, dep("CAMAsyncAFDConnector", platform="cpu"))
    messages = [e.message for e in errors if e.path.endswith(".micro_batches")]
    assert messages == [
        "CAMAsyncAFDConnector has no control plane to announce the micro-batches"
    ]


def test_everything_the_cpu_and_cuda_paths_need_is_in_this_build() -> None:
    for connector, arch in (
        ("P2pGlooAFDConnector", DEEPSEEK),
        ("P2pGlooAFDConnector", QWEN3),
        ("P2pNcclAFDConnector", DEEPSEEK),
    ):
        assert absent(cfg(connector, False), dep(connector, architecture=arch)) == []


def test_host_transport_is_refused_in_graph_mode() -> None:
    """transport 'host' is never captured: a graph deployment with it would
    run its exchanges outside the attention graph."""
    config = cfg("P2pNcclAFDConnector", False, transport="host")
    path = "additional_config.afd.connector_extra_config.transport"
    for runner in ("v1", "v2"):
        graph = dep(
            "P2pNcclAFDConnector", model_runner=runner, graph_mode="FULL_DECODE_ONLY"
        )
        assert paths(config, graph) == {path}
        [error] = [e for e in check_deployment(config, graph) if e.path == path]
        assert "'nccl'" in error.message and "FULL_DECODE_ONLY" in error.message
    assert paths(config, dep("P2pNcclAFDConnector")) == set()  # eager is fine
