# SPDX-License-Identifier: Apache-2.0
"""The Ascend compatibility layer: feature checks over the connectors' own
closed schemas, the vLLM config fix the Ascend platform needs, and the FFN
forward context of vllm-ascend. Nothing here imports ``torch_npu`` or
``vllm_ascend`` at module level: they are imported where the platform is
already Ascend.
"""
