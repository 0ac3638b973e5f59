# SPDX-License-Identifier: Apache-2.0
"""The Ascend feature checks: what the CAM ops need of a deployment, over the
settings the connectors' closed schemas parsed (no second schema)."""

from __future__ import annotations

import pytest

from afd_plugin.compat.npu.feature_validation import (
    ascend_feature_errors,
    validate_ascend_features,
)
from afd_plugin.config import AFDConfig
from afd_plugin.errors import AFDConfigError


def afd(connector: str, **extra: object) -> AFDConfig:
    return AFDConfig(
        role="attention",
        connector=connector,
        compute_gate_on_attention=connector == "CAMAsyncAFDConnector",
        connector_extra_config=extra,
    )


def test_a_cam_deployment_with_the_ascend_ops_passes() -> None:
    assert ascend_feature_errors(afd("CAMP2pAFDConnector"), "bfloat16") == []
    assert ascend_feature_errors(afd("CAMAsyncAFDConnector"), "float32") == []
    quant = afd("CAMAsyncAFDConnector", dynamicQuant=1)
    assert ascend_feature_errors(quant, "float16") == []


def test_every_problem_is_listed_at_once_naming_its_field() -> None:
    config = afd("CAMP2pAFDConnector", ops="reference")
    with pytest.raises(AFDConfigError) as info:
        validate_ascend_features(config, "float32")
    text = str(info.value)
    assert "connector_extra_config.ops: 'reference' is the CPU kernels" in text
    assert "model_config.dtype: the CAM P2P ops move bfloat16" in text
    assert "--dtype bfloat16" in text


def test_int8_dispatch_needs_half_precision_activations() -> None:
    errors = ascend_feature_errors(
        afd("CAMAsyncAFDConnector", dynamicQuant=1), "float32"
    )
    assert [e.path for e in errors] == [
        "additional_config.afd.connector_extra_config.dynamicQuant"
    ]


def test_a_cpu_or_cuda_connector_is_refused_on_ascend_with_the_choices() -> None:
    errors = ascend_feature_errors(afd("P2pGlooAFDConnector"), "bfloat16")
    assert len(errors) == 1 and errors[0].path == "additional_config.afd.connector"
    assert "CAMP2pAFDConnector, CAMAsyncAFDConnector" in errors[0].message


def test_the_schema_owns_its_fields() -> None:
    """An unknown field fails in the connector's closed schema, before any
    Ascend check runs (the checks read only parsed settings)."""
    with pytest.raises(ValueError, match="quant_mode: unknown field"):
        afd("CAMAsyncAFDConnector", quant_mode=0)
