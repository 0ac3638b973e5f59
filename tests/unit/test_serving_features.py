# SPDX-License-Identifier: Apache-2.0
"""The serving-features table: its rows keep their promises (a feature that
works names a test that exists, a refused one a reason), and the validator
refuses each refused feature on both roles, from vLLM's config and from a
scenario's args, naming the flag.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from afd_e2e.define.catalogue import Catalogue
from afd_e2e.define.deployment import afd_config, deployment, speculative_method
from afd_e2e.define.scenario import Scenario
from afd_plugin.config import parse_afd_config
from afd_plugin.errors import AFDConfigError
from afd_plugin.serving_features import (
    DRAFT_SPECULATION,
    LORA,
    POOLING,
    SERVING_FEATURES,
    SPECULATIVE_METHODS_ALLOWED,
    ServingFeature,
)
from afd_plugin.validation import Deployment, check_deployment
from afd_plugin.vllm_view import deployment_of

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("attention", "ffn")

# Each refused feature: the Deployment that turns it on, the error path and
# the flag its message names.
REFUSED: dict[ServingFeature, tuple[dict[str, Any], str, str]] = {
    LORA: ({"lora": True}, "deployment.lora", "--enable-lora"),
    DRAFT_SPECULATION: (
        {"speculative_method": "eagle"},
        "deployment.speculative_method",
        "--speculative-config method 'eagle'",
    ),
    POOLING: ({"runner_type": "pooling"}, "deployment.runner_type", "--runner pooling"),
}
POOLED = {"runner_type": "pooling", "convert_type": "embed"}


def cfg(role: str):
    return parse_afd_config({"afd": {"role": role, "connector": "P2pGlooAFDConnector"}})


def on_cpu(**features: Any) -> Deployment:
    return Deployment("cpu", "DeepseekV2ForCausalLM", **features)


def test_names_are_unique() -> None:
    names = [f.name for f in SERVING_FEATURES]
    assert len(names) == len(set(names)), names


def test_a_row_without_its_proof_or_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="names its test"):
        ServingFeature("X", ("--x",), works=True)
    with pytest.raises(ValueError, match="needs a reason"):
        ServingFeature("X", ("--x",), works=False)
    with pytest.raises(ValueError, match="has no evidence"):
        ServingFeature("X", ("--x",), works=False, evidence="a.py::t", reason="r")


def test_every_refused_row_is_checked_by_the_validator() -> None:
    """A refused row added to the table without a validator check fails here."""
    assert set(REFUSED) == {f for f in SERVING_FEATURES if not f.works}


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


@pytest.mark.parametrize(
    "feature", [f for f in SERVING_FEATURES if f.works], ids=lambda f: f.name
)
def test_evidence_names_a_test_that_exists(feature: ServingFeature) -> None:
    """A renamed, moved or deleted test fails this, not just the features page."""
    path, _, test = feature.evidence.partition("::")
    assert (ROOT / path).is_file(), f"{feature.name}: {path} does not exist"
    assert test in _test_functions(ROOT / path), f"{feature.name}: no {test} in {path}"


@pytest.mark.parametrize("feature", list(REFUSED), ids=lambda f: f.name)
@pytest.mark.parametrize("role", ROLES)
def test_each_refused_feature_is_refused_naming_its_flag(
    feature: ServingFeature, role: str
) -> None:
    fields, path, flag = REFUSED[feature]
    [error] = check_deployment(cfg(role), on_cpu(**fields))
    assert error.path == path
    assert error.message.startswith(f"{flag} is refused under AFD: ")
    assert feature.reason in error.message


def test_speculative_refusal_lists_the_allowed_methods() -> None:
    [error] = check_deployment(cfg("attention"), on_cpu(speculative_method="mtp"))
    assert SPECULATIVE_METHODS_ALLOWED == ("ngram",)
    assert error.message.endswith("; allowed methods: 'ngram'")


def test_convert_alone_is_refused_naming_it() -> None:
    [error] = check_deployment(cfg("ffn"), on_cpu(convert_type="embed"))
    assert error.path == "deployment.convert_type"
    assert error.message.startswith("--convert embed is refused under AFD: ")


@pytest.mark.parametrize("role", ROLES)
def test_ngram_speculation_is_accepted(role: str) -> None:
    assert check_deployment(cfg(role), on_cpu(speculative_method="ngram")) == []


def test_every_refused_feature_is_listed_at_once() -> None:
    everything = on_cpu(lora=True, speculative_method="draft_model", **POOLED)
    paths = [e.path for e in check_deployment(cfg("attention"), everything)]
    assert paths == [
        "deployment.lora",
        "deployment.speculative_method",
        "deployment.runner_type",
    ]


def vllm_config(**changes: Any) -> SimpleNamespace:
    """The attributes of vLLM 0.32.0's VllmConfig that ``deployment_of`` reads."""
    parallel = SimpleNamespace(
        data_parallel_size=1,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        prefill_context_parallel_size=1,
        decode_context_parallel_size=1,
        enable_expert_parallel=False,
        enable_eplb=False,
        enable_dbo=False,
        ubatch_size=0,
    )
    model = SimpleNamespace(
        hf_config=SimpleNamespace(architectures=["DeepseekV2ForCausalLM"]),
        enforce_eager=True,
        runner_type=changes.pop("runner_type", "generate"),
        convert_type=changes.pop("convert_type", "none"),
    )
    features = {"lora_config": None, "speculative_config": None, **changes}
    return SimpleNamespace(
        parallel_config=parallel,
        model_config=model,
        use_v2_model_runner=False,
        **features,
    )


def test_a_server_reads_the_features_from_vllms_config() -> None:
    plain = deployment_of(vllm_config(), "cpu")  # type: ignore[arg-type]
    assert check_deployment(cfg("attention"), plain) == []
    on = deployment_of(
        vllm_config(  # type: ignore[arg-type]
            lora_config=SimpleNamespace(max_loras=1),
            speculative_config=SimpleNamespace(method="eagle3"),
            **POOLED,
        ),
        "cpu",
    )
    assert (on.lora, on.speculative_method) == (True, "eagle3")
    assert (on.runner_type, on.convert_type) == ("pooling", "embed")
    ngram = vllm_config(speculative_config=SimpleNamespace(method="ngram"))
    assert deployment_of(ngram, "cpu").speculative_method == "ngram"  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return Catalogue.load(ROOT)


def scenario_with(
    catalogue: Catalogue, common: list[str], ffn: tuple[str, ...] = ()
) -> Scenario:
    """cpu-eager-1a1f with vLLM args added to both roles and to the FFN role."""
    s = catalogue.get("cpu-eager-1a1f").model_copy(deep=True)
    s.roles.common.args.extend(common)
    s.roles.ffn.args.extend(ffn)
    return s


def problems(s: Scenario, role: str) -> dict[str, str]:
    return {
        e.path: e.message
        for e in check_deployment(afd_config(s, role), deployment(s, role))
    }


def test_the_harness_refuses_a_scenario_with_lora_on_both_roles(
    catalogue: Catalogue,
) -> None:
    assert all(problems(scenario_with(catalogue, []), r) == {} for r in ROLES)
    s = scenario_with(catalogue, ["--enable-lora"])
    for role in ROLES:
        found = problems(s, role)
        assert list(found) == ["deployment.lora"]
        assert found["deployment.lora"].startswith("--enable-lora is refused")
    # argparse keeps the last of --enable-lora / --no-enable-lora
    off = scenario_with(catalogue, ["--enable-lora"], ffn=("--no-enable-lora",))
    assert list(problems(off, "attention")) == ["deployment.lora"]
    assert problems(off, "ffn") == {}


def test_the_harness_reads_the_speculative_method_and_runner(
    catalogue: Catalogue,
) -> None:
    eagle = ["--speculative-config", '{"method": "eagle", "model": "m"}']
    s = scenario_with(catalogue, [*eagle, "--runner=pooling"])
    found = problems(s, "ffn")
    assert list(found) == ["deployment.speculative_method", "deployment.runner_type"]
    assert (
        "--speculative-config method 'eagle'" in found["deployment.speculative_method"]
    )
    ngram = '{"method": "ngram", "num_speculative_tokens": 3}'
    assert problems(scenario_with(catalogue, ["-sc", ngram]), "attention") == {}
    converted = problems(scenario_with(catalogue, ["--convert", "embed"]), "ffn")
    assert list(converted) == ["deployment.runner_type"]
    assert "--runner pooling (--convert embed)" in converted["deployment.runner_type"]


@pytest.mark.parametrize(
    ("args", "method"),
    [
        ([], None),
        (["--speculative-config", '{"method": "ngram"}'], "ngram"),
        (["--speculative-config", '{"method": "[ngram]"}'], "ngram"),
        (["--speculative-config", '{"model": "[ngram]"}'], "ngram"),
        (["--spec-method", "ngram"], "ngram"),
        (["--speculative-config", '{"model": "org/draft"}'], "draft_model"),
        (["--spec-model", "pkg.MyProposer"], "custom_class"),
        (["--speculative-config", '{"method": "deepseek_mtp"}'], "mtp"),
        (['--speculative-config={"method": "eagle3"}'], "eagle3"),
    ],
)
def test_speculative_method_is_normalised_as_vllm_does(
    args: list[str], method: str | None
) -> None:
    assert speculative_method(args) == method


def test_a_speculative_config_that_is_not_json_names_the_flag() -> None:
    with pytest.raises(AFDConfigError, match="--speculative-config must be a JSON"):
        speculative_method(["--speculative-config", "ngram"])
