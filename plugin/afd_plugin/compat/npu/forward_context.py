# SPDX-License-Identifier: Apache-2.0
"""The FFN role's forward context on Ascend, on both model-runner paths.

vllm-ascend's MoE layers read fields only its own forward context sets, so
the FFN blocks run inside:

- **V1**: ``vllm_ascend.ascend_forward_context.set_ascend_forward_context``
  (``in_profile_run`` on a profile step);
- **V2**: vLLM's ``set_forward_context`` inside vllm-ascend's
  ``override_mrv2_in_profile_run(profile)``, which is how vllm-ascend tells a
  V2 profile run from a real step (its platform's additional forward context
  reads that flag).

No AFD metadata goes into it (AFD-I9: the FFN daemon holds the step).
``vllm_ascend`` is imported on call, on an Ascend process only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def ffn_forward_context(
    vllm_config: Any, num_tokens: int, *, profile: bool, model_runner_v2: bool
) -> Iterator[None]:
    """The context one FFN step (or dispatch) of ``num_tokens`` runs in."""
    from vllm_ascend import ascend_forward_context as ascend

    if not model_runner_v2:
        with ascend.set_ascend_forward_context(
            None, vllm_config, num_tokens=num_tokens, in_profile_run=profile
        ):
            yield
        return
    from vllm.forward_context import set_forward_context

    with (
        ascend.override_mrv2_in_profile_run(profile),
        set_forward_context(None, vllm_config, num_tokens=num_tokens),
    ):
        yield
