# SPDX-License-Identifier: Apache-2.0
"""The non-SP all-to-all fix the Ascend roles keep (AFD-I11): applied when
sequence parallelism is off, left alone when it is on, idempotent."""

from __future__ import annotations

from types import SimpleNamespace

from afd_plugin.compat.npu.runtime_config import (
    NON_SP_ALL2ALL_BACKEND,
    apply_non_sp_all2all,
)


def config(enable_sp: bool | None) -> SimpleNamespace:
    pass_config = (
        SimpleNamespace() if enable_sp is None else SimpleNamespace(enable_sp=enable_sp)
    )
    return SimpleNamespace(
        compilation_config=SimpleNamespace(pass_config=pass_config),
        parallel_config=SimpleNamespace(all2all_backend="allgather_reducescatter"),
    )


def test_without_sequence_parallelism_the_backend_leaves_vllms_sp_list() -> None:
    for enable_sp in (False, None):  # None: a vLLM whose PassConfig has no field
        c = config(enable_sp)
        assert apply_non_sp_all2all(c) is True
        assert c.parallel_config.all2all_backend == NON_SP_ALL2ALL_BACKEND
        assert apply_non_sp_all2all(c) is False  # once


def test_with_sequence_parallelism_nothing_changes() -> None:
    c = config(True)
    assert apply_non_sp_all2all(c) is False
    assert c.parallel_config.all2all_backend == "allgather_reducescatter"
