# SPDX-License-Identifier: Apache-2.0
"""The CAM P2P operator contract, defined once: the schemas of
``afd_ascend::a2e`` and ``afd_ascend::e2a`` (torch.library) and the arguments
they share (``CamCall``), their shape functions, and the loaders of the two
implementations.

- **Ascend**: the native library ``afd_plugin._C_ascend`` adds only the NPU
  (PrivateUse1) kernels of these schemas; ``ensure_cam_p2p_ops_available``
  loads it from ``init_afd_connector()`` (never at import) and says what to
  build or install when it cannot (AFD-I3, AFD-I4).
- **Reference**: ``cam_p2p_reference.py`` registers CPU kernels of the same
  schemas over the CPU data paths; chosen explicitly (``ops: reference``), CPU
  only, never a fallback.

Contract (FFN ranks first: FFN r is world rank r, attention a is ``F + a``;
attention a talks to FFN ``a % F`` in slot ``a // F``):

- ``a2e`` on attention pushes ``x`` (``batch_size`` rows) into its slot at its
  FFN and returns at once; on FFN it waits for every slot it serves and
  returns their rows in slot order. Every slot of one FFN group carries
  ``batch_size`` rows.
- ``e2a`` on FFN returns slot i's rows to attention ``r + i F``; on attention
  it waits for them.
- Both return five tensors (a2e) or one (e2a) on either side; outputs a side
  does not produce are empty placeholders. bf16 activations; the gate runs on
  the FFN side (``compute_gate`` false).
- Each communicator (``group_ep``; one per micro-batch stage) pairs its calls
  one to one, in order.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import astuple, dataclass, fields

import torch

from afd_plugin import native_build
from afd_plugin.native_build import SWITCH as BUILD_SWITCH

NAMESPACE = "afd_ascend"
NATIVE_MODULE = "afd_plugin._C_ascend"
ACTIVATION_DTYPE = torch.bfloat16


class CamOpsUnavailable(RuntimeError):
    """The operators a connector was configured with cannot be used here."""


def max_slots(num_attention: int, num_ffn: int) -> int:
    """Slots of the widest FFN group: ``ceil(A / F)``."""
    return math.ceil(num_attention / num_ffn)


def group_slots(ffn_rank: int, num_attention: int, num_ffn: int) -> int:
    """Slots FFN rank ``ffn_rank`` serves (one fewer where ``A % F`` ends)."""
    return len(range(ffn_rank, num_attention, num_ffn))


@dataclass(frozen=True)
class CamCall:
    """The arguments ``a2e`` and ``e2a`` share, in schema order: their one
    definition (the schemas are written from these fields, whose annotations
    are the schema types; kernels and callers take them as one object)."""

    batch_size: int
    """Rows per slot."""
    hidden_size: int
    topk: int
    expert_rank_size: int
    """FFN ranks (``F``)."""
    attention_rank_size: int
    """Attention ranks (``A``)."""
    rank: int
    """The caller's world rank (FFN ranks first)."""
    group_ep: str
    """The communicator: one per micro-batch stage."""
    aiv_num: int
    """Vector cores the kernel may use."""

    @property
    def is_ffn(self) -> bool:
        return self.rank < self.expert_rank_size

    @property
    def slots(self) -> int:
        """Length of the handle: the slots of the widest FFN group."""
        return max_slots(self.attention_rank_size, self.expert_rank_size)

    @property
    def gathered_rows(self) -> int:
        """FFN side: the rows ``a2e`` gathers and ``e2a`` takes back (every
        slot of this rank's group, ``batch_size`` each)."""
        return self.batch_size * group_slots(
            self.rank, self.attention_rank_size, self.expert_rank_size
        )


_CALL_ARGS = ", ".join(f"{f.type} {f.name}" for f in fields(CamCall))
A2E_SCHEMA = (
    f"a2e(Tensor x, Tensor? expert_ids, Tensor? scales, {_CALL_ARGS}, "
    "bool compute_gate) -> Tensor[]"
)
E2A_SCHEMA = f"e2a(Tensor expand_x, Tensor atten_batch_size, {_CALL_ARGS}) -> Tensor"

A2eKernel = Callable[
    [torch.Tensor, torch.Tensor | None, torch.Tensor | None, CamCall, bool],
    list[torch.Tensor],
]
E2aKernel = Callable[[torch.Tensor, torch.Tensor, CamCall], torch.Tensor]


def a2e_kernel(fn: A2eKernel) -> Callable[..., list[torch.Tensor]]:
    """``fn(x, expert_ids, scales, call, compute_gate)`` as a kernel of
    ``A2E_SCHEMA`` (which passes the arguments flat)."""

    def kernel(
        x: torch.Tensor,
        expert_ids: torch.Tensor | None,
        scales: torch.Tensor | None,
        *args: int | str | bool,
    ) -> list[torch.Tensor]:
        *call, compute_gate = args
        return fn(x, expert_ids, scales, CamCall(*call), bool(compute_gate))

    return kernel


def e2a_kernel(fn: E2aKernel) -> Callable[..., torch.Tensor]:
    """``fn(expand_x, atten_batch_size, call)`` as a kernel of ``E2A_SCHEMA``."""

    def kernel(
        expand_x: torch.Tensor, atten_batch_size: torch.Tensor, *call: int | str
    ) -> torch.Tensor:
        return fn(expand_x, atten_batch_size, CamCall(*call))

    return kernel


def a2e(x: torch.Tensor, call: CamCall) -> list[torch.Tensor]:
    """``afd_ascend::a2e`` with the gate on the FFN side (no expert ids or
    scales, ``compute_gate`` false)."""
    return torch.ops.afd_ascend.a2e(x, None, None, *astuple(call), False)


def e2a(expand_x: torch.Tensor, handle: torch.Tensor, call: CamCall) -> torch.Tensor:
    """``afd_ascend::e2a``: ``handle`` is the one ``a2e`` returned."""
    return torch.ops.afd_ascend.e2a(expand_x, handle, *astuple(call))


_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
_LIBRARY.define(A2E_SCHEMA)
_LIBRARY.define(E2A_SCHEMA)


@torch.library.register_fake(f"{NAMESPACE}::a2e")
@a2e_kernel
def _a2e_shape(
    x: torch.Tensor,
    expert_ids: torch.Tensor | None,
    scales: torch.Tensor | None,
    call: CamCall,
    compute_gate: bool,
) -> list[torch.Tensor]:
    rows = call.gathered_rows if call.is_ffn else 0
    return [
        x.new_empty((rows, call.hidden_size), dtype=ACTIVATION_DTYPE),
        x.new_empty((rows, call.topk), dtype=torch.int32),
        x.new_empty((rows, call.topk), dtype=torch.float32),
        x.new_empty((call.slots,), dtype=torch.int32),
        x.new_empty((rows,), dtype=torch.bool),
    ]


@torch.library.register_fake(f"{NAMESPACE}::e2a")
@e2a_kernel
def _e2a_shape(
    expand_x: torch.Tensor, atten_batch_size: torch.Tensor, call: CamCall
) -> torch.Tensor:
    rows = 0 if call.is_ffn else call.batch_size
    return expand_x.new_empty((rows, call.hidden_size), dtype=ACTIVATION_DTYPE)


def has_kernel(op: str, dispatch_key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(
        f"{NAMESPACE}::{op}", dispatch_key
    )


def build_switch() -> bool | None:
    """``AFD_BUILD_ASCEND_OPS``: True forces the native build, False skips it,
    None (unset or empty) detects the Ascend toolkit. Anything else is an
    error naming the allowed values (``native_build.build_switch``, which
    ``setup.py`` decides with)."""
    return native_build.build_switch(os.environ)


_HOW_TO_BUILD = (
    f"install torch_npu and CANN, then reinstall afd-plugin with "
    f"{BUILD_SWITCH}=1 so that {NATIVE_MODULE} is built; on a CPU machine set "
    "additional_config.afd.connector_extra_config.ops to 'reference'"
)


def ensure_cam_p2p_ops_available() -> None:
    """Load the native CAM P2P kernels (called by ``init_afd_connector()``);
    a clear error that says what to build or install when they are absent."""
    try:
        importlib.import_module("torch_npu")
    except ImportError as exc:
        raise CamOpsUnavailable(
            f"CAMP2pAFDConnector with ops 'ascend' needs torch_npu, which is not "
            f"installed ({exc}): {_HOW_TO_BUILD}"
        ) from None
    try:
        importlib.import_module(NATIVE_MODULE)
    except ImportError as exc:
        raise CamOpsUnavailable(
            f"CAMP2pAFDConnector with ops 'ascend' needs {NATIVE_MODULE}, which "
            f"this build does not hold ({exc}): {_HOW_TO_BUILD}"
        ) from None
    missing = [op for op in ("a2e", "e2a") if not has_kernel(op, "PrivateUse1")]
    if missing:
        raise CamOpsUnavailable(
            f"{NATIVE_MODULE} loaded but registers no NPU kernel for "
            f"{', '.join(f'{NAMESPACE}::{m}' for m in missing)}: rebuild it "
            f"against this torch_npu ({_HOW_TO_BUILD})"
        )
