# SPDX-License-Identifier: Apache-2.0
"""The one vLLM config fix the Ascend roles need: the non-SP all-to-all fix.

What: without sequence parallelism, set ``parallel_config.all2all_backend``
to ``flashinfer_all2allv``, a backend outside vLLM's
``use_sequence_parallel_moe`` list, so vLLM does not switch its MoE layers to
sequence-parallel chunks that the role split does not send.
Why: vllm-ascend's releases up to its v0.26 line did this for
``worker_cls == "auto"`` only, and its main line (commit 182b75ea) no longer
does it at all; an AFD role needs it whichever way its worker was chosen.
Applied: by the config patch when ``auto`` resolved to an AFD worker on NPU,
and again by the NPU role workers' constructors (an explicit worker path
skips the first; AFD-I11).
Pure: reads and writes attributes of the config only.
"""

from __future__ import annotations

from typing import Any

NON_SP_ALL2ALL_BACKEND = "flashinfer_all2allv"


def sequence_parallel_requested(vllm_config: Any) -> bool:
    """Whether the deployment asked for sequence parallelism
    (``compilation_config.pass_config.enable_sp`` where that field exists)."""
    pass_config = getattr(vllm_config.compilation_config, "pass_config", None)
    return bool(getattr(pass_config, "enable_sp", False))


def apply_non_sp_all2all(vllm_config: Any) -> bool:
    """Apply the fix when sequence parallelism is off; whether it changed the
    config (idempotent)."""
    if sequence_parallel_requested(vllm_config):
        return False
    parallel = vllm_config.parallel_config
    if parallel.all2all_backend == NON_SP_ALL2ALL_BACKEND:
        return False
    parallel.all2all_backend = NON_SP_ALL2ALL_BACKEND
    return True
