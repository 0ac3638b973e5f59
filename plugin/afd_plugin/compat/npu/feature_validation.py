# SPDX-License-Identifier: Apache-2.0
"""Ascend feature checks, run before an NPU role worker sets up: what the CAM
operators need of a deployment beyond the one deployment validator.

The connector settings come from the factory's closed schemas (AFD-I1: the
config parsed them once, ``AFDConfig.extra``); nothing here re-validates a
field the schema owns. Pure: no torch, no vLLM, no torch_npu.
"""

from __future__ import annotations

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.errors import AFDConfigError, FieldError

EXTRA = "additional_config.afd.connector_extra_config"
CAM_P2P_DTYPES = ("bfloat16",)
"""Activations the CAM P2P ops move."""
CAM_ASYNC_QUANT_DTYPES = ("bfloat16", "float16")
"""Activations the CAM async ops quantise per token (``dynamicQuant: 1``)."""


def ascend_feature_errors(afd: AFDConfig, dtype: str) -> list[FieldError]:
    """Every reason ``afd`` cannot run on Ascend with activations ``dtype``
    (a ``torch`` dtype name, e.g. ``bfloat16``); empty when it can."""
    errors: list[FieldError] = []
    spec = AFDConnectorFactory.get_spec(afd.connector)
    if spec.platform != "npu":
        npu = [s.name for s in AFDConnectorFactory.specs() if s.platform == "npu"]
        errors.append(
            FieldError(
                "additional_config.afd.connector",
                f"{afd.connector} runs on {spec.platform}; on Ascend use one of: "
                f"{', '.join(npu)}",
            )
        )
        return errors
    extra = afd.extra  # parsed once, by the connector's own closed schema
    if extra.ops != "ascend":
        errors.append(
            FieldError(
                f"{EXTRA}.ops",
                f"{extra.ops!r} is the CPU kernels of the CAM ops; on Ascend use "
                "'ascend' (there is no fallback)",
            )
        )
    if afd.connector == "CAMP2pAFDConnector" and dtype not in CAM_P2P_DTYPES:
        errors.append(
            FieldError(
                "model_config.dtype",
                f"the CAM P2P ops move bfloat16 activations, the model runs "
                f"{dtype}: start both roles with --dtype bfloat16",
            )
        )
    if (
        afd.connector == "CAMAsyncAFDConnector"
        and extra.dynamicQuant == 1
        and dtype not in CAM_ASYNC_QUANT_DTYPES
    ):
        errors.append(
            FieldError(
                f"{EXTRA}.dynamicQuant",
                f"1 quantises {', '.join(CAM_ASYNC_QUANT_DTYPES)} activations, the "
                f"model runs {dtype}: use 0 or --dtype bfloat16",
            )
        )
    return errors


def validate_ascend_features(afd: AFDConfig, dtype: str) -> None:
    """Raise ``AFDConfigError`` listing every problem; return when valid."""
    errors = ascend_feature_errors(afd, dtype)
    if errors:
        raise AFDConfigError(errors)
