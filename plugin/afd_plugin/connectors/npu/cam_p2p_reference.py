# SPDX-License-Identifier: Apache-2.0
"""Reference kernels of the CAM P2P contract (``cam_p2p_ops.py``) on the CPU:
``afd_ascend::a2e`` and ``afd_ascend::e2a`` over the CPU data paths (shared
memory between roles on one machine, else gloo).

Chosen explicitly (``connector_extra_config.ops: reference``) and only where
the platform is CPU: a CPU tensor never reaches an NPU kernel, and an NPU
tensor never reaches these. Each call carries a small header (stage, call
number, rows) so that the reference refuses, loudly, what the hardware
kernels would silently get wrong: unequal row counts inside one FFN group, a
stage paired with another stage's communicator, calls out of order, a window
overflow.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from afd_plugin.connectors.npu.cam_p2p_ops import (
    ACTIVATION_DTYPE,
    NAMESPACE,
    CamCall,
    a2e_kernel,
    e2a_kernel,
)
from afd_plugin.connectors.p2p_base import DataTransport
from afd_plugin.wire import AFDWireError

MAGIC = 0xCA3F
A2E, E2A = 1, 2
_OPS = {A2E: "a2e", E2A: "e2a"}
TAG_HEADER = 6
TAG_ROWS = 7
HEADER_FIELDS = 5  # magic, op, stage, call, rows


class CamContractError(AFDWireError):
    """A call the CAM P2P hardware contract does not allow."""


@dataclass
class ReferenceCommunicator:
    """One ``group_ep``: one micro-batch stage's communicator on this rank."""

    name: str
    stage: int
    transport: DataTransport
    num_attention: int
    num_ffn: int
    global_rank: int
    max_rows: int
    """Rows one slot's window holds (``max_num_tokens_per_rank``)."""
    calls: dict[int, int] = field(default_factory=lambda: {A2E: 0, E2A: 0})

    @property
    def is_ffn(self) -> bool:
        return self.global_rank < self.num_ffn

    def describe(self, global_rank: int) -> str:
        if global_rank < self.num_ffn:
            return f"FFN rank {global_rank}"
        return f"attention rank {global_rank - self.num_ffn}"

    @property
    def me(self) -> str:
        return f"{self.describe(self.global_rank)} ({self.name}, stage {self.stage})"

    def slot_peers(self) -> list[int]:
        """FFN side: world ranks of the attention ranks of its slots."""
        F = self.num_ffn
        return [F + a for a in range(self.global_rank, self.num_attention, F)]

    def ffn_peer(self) -> int:
        return (self.global_rank - self.num_ffn) % self.num_ffn

    # -- checks -------------------------------------------------------------

    def check_call(self, op: str, call: CamCall, gated: bool = False) -> None:
        """What every call must agree on; ``gated``: an a2e that asks for the
        gate on the attention side."""
        if gated:
            raise CamContractError(
                f"{self.me}: the CAM P2P ops run the gate on the FFN side "
                "(compute_gate false, no expert ids or scales)"
            )
        ffn, attention, rank = (
            call.expert_rank_size,
            call.attention_rank_size,
            call.rank,
        )
        if (ffn, attention, rank) != (
            self.num_ffn,
            self.num_attention,
            self.global_rank,
        ):
            raise CamContractError(
                f"{self.me}: {op} called with expert_rank_size={ffn}, "
                f"attention_rank_size={attention}, rank={rank}; the communicator "
                f"was built for {self.num_ffn}, {self.num_attention}, "
                f"{self.global_rank}"
            )
        if not 0 <= call.batch_size <= self.max_rows:
            raise CamContractError(
                f"{self.me}: {op} of {call.batch_size} rows per slot overflows "
                f"the window of {self.max_rows} rows (max_num_tokens_per_rank)"
            )

    def _next_call(self, op: int) -> int:
        call = self.calls[op]
        self.calls[op] = call + 1
        return call

    # -- wire -----------------------------------------------------------------

    def _send(self, op: int, call: int, rows: torch.Tensor, dst: int) -> None:
        header = torch.tensor(
            [MAGIC, op, self.stage, call, rows.shape[0]], dtype=torch.int64
        )
        what = f"{_OPS[op]} call {call} ({self.name})"
        self.transport.send(header, dst, TAG_HEADER, what)
        if rows.shape[0]:
            self.transport.send(rows.contiguous(), dst, TAG_ROWS, what)

    def _recv_header(self, op: int, call: int, src: int) -> int:
        header = torch.empty(HEADER_FIELDS, dtype=torch.int64)
        what = f"{_OPS[op]} call {call} ({self.name})"
        self.transport.recv(header, src, TAG_HEADER, what)
        magic, got_op, stage, got_call, rows = header.tolist()
        peer = self.describe(src)
        if magic != MAGIC or got_op != op:
            raise CamContractError(
                f"{self.me}: {peer} sent something other than a {_OPS[op]} "
                f"header ({header.tolist()}): the two sides issue different calls"
            )
        if stage != self.stage:
            raise CamContractError(
                f"{self.me}: {_OPS[op]} call {call} received stage {stage}'s call "
                f"from {peer}: the micro-batch stages were paired out of order "
                "(each stage has its own communicator, called in the same order "
                "on both sides)"
            )
        if got_call != call:
            raise CamContractError(
                f"{self.me}: expected {_OPS[op]} call {call} from {peer}, got "
                f"call {got_call}: calls on one communicator pair one to one, in "
                "order"
            )
        return rows

    def _recv_rows(
        self, op: int, call: int, src: int, rows: int, hidden: int
    ) -> torch.Tensor:
        out = torch.empty((rows, hidden), dtype=ACTIVATION_DTYPE)
        if rows:
            what = f"{_OPS[op]} call {call} ({self.name})"
            self.transport.recv(out, src, TAG_ROWS, what)
        return out

    # -- a2e ------------------------------------------------------------------

    def a2e(self, x: torch.Tensor, checked: CamCall) -> list[torch.Tensor]:
        """``checked``: a call ``check_call`` passed."""
        batch_size, hidden_size, topk = (
            checked.batch_size,
            checked.hidden_size,
            checked.topk,
        )
        slots = checked.slots
        call = self._next_call(A2E)
        if not self.is_ffn:
            if (
                tuple(x.shape) != (batch_size, hidden_size)
                or x.dtype != ACTIVATION_DTYPE
            ):
                raise CamContractError(
                    f"{self.me}: a2e takes x of ({batch_size}, {hidden_size}) "
                    f"{ACTIVATION_DTYPE}, got {tuple(x.shape)} {x.dtype}"
                )
            self._send(A2E, call, x, self.ffn_peer())
            handle = torch.zeros(slots, dtype=torch.int32)
            handle[(self.global_rank - self.num_ffn) // self.num_ffn] = batch_size
            return [
                x.new_empty((0, hidden_size)),
                torch.empty((0, topk), dtype=torch.int32),
                torch.empty((0, topk), dtype=torch.float32),
                handle,
                torch.empty((0,), dtype=torch.bool),
            ]
        parts, counts = [], []
        for src in self.slot_peers():
            rows = self._recv_header(A2E, call, src)
            if rows != batch_size:
                raise CamContractError(
                    f"{self.me}: unequal token counts inside one FFN group: "
                    f"{self.describe(src)} sent {rows} rows where every slot must "
                    f"send {batch_size} (the kernel lays its windows out by one "
                    "count per group)"
                )
            parts.append(self._recv_rows(A2E, call, src, rows, hidden_size))
            counts.append(rows)
        expand_x = torch.cat(parts) if len(parts) > 1 else parts[0]
        total = expand_x.shape[0]
        handle = torch.zeros(slots, dtype=torch.int32)
        handle[: len(counts)] = torch.tensor(counts, dtype=torch.int32)
        return [
            expand_x,
            torch.zeros((total, topk), dtype=torch.int32),
            torch.zeros((total, topk), dtype=torch.float32),
            handle,
            torch.ones((total,), dtype=torch.bool),
        ]

    # -- e2a ------------------------------------------------------------------

    def e2a(
        self, expand_x: torch.Tensor, handle: torch.Tensor, checked: CamCall
    ) -> torch.Tensor:
        """``checked``: a call ``check_call`` passed."""
        batch_size, hidden_size = checked.batch_size, checked.hidden_size
        call = self._next_call(E2A)
        if self.is_ffn:
            peers = self.slot_peers()
            expected = checked.gathered_rows
            if tuple(expand_x.shape) != (expected, hidden_size):
                raise CamContractError(
                    f"{self.me}: e2a takes the ({expected}, {hidden_size}) rows a2e "
                    f"gathered ({len(peers)} slots of {batch_size}), got "
                    f"{tuple(expand_x.shape)}"
                )
            rows = expand_x.to(ACTIVATION_DTYPE)
            for i, dst in enumerate(peers):
                self._send(E2A, call, rows[i * batch_size : (i + 1) * batch_size], dst)
            return expand_x.new_empty((0, hidden_size), dtype=ACTIVATION_DTYPE)
        src = self.ffn_peer()
        rows = self._recv_header(E2A, call, src)
        if rows != batch_size:
            raise CamContractError(
                f"{self.me}: e2a returned {rows} rows from {self.describe(src)} "
                f"where {batch_size} were pushed"
            )
        return self._recv_rows(E2A, call, src, rows, hidden_size)


_COMMUNICATORS: dict[str, ReferenceCommunicator] = {}
_LOCK = threading.Lock()
_LIBRARY: torch.library.Library | None = None


def register(communicator: ReferenceCommunicator) -> None:
    with _LOCK:
        if communicator.name in _COMMUNICATORS:
            raise RuntimeError(f"communicator {communicator.name} exists already")
        _COMMUNICATORS[communicator.name] = communicator


def unregister(name: str) -> None:
    with _LOCK:
        _COMMUNICATORS.pop(name, None)


def _communicator(group_ep: str) -> ReferenceCommunicator:
    try:
        return _COMMUNICATORS[group_ep]
    except KeyError:
        raise CamContractError(
            f"no reference communicator {group_ep!r} on this process (the "
            "connector is not initialised, or closed)"
        ) from None


def _checked(op: str, call: CamCall, gated: bool = False) -> ReferenceCommunicator:
    """The communicator of ``call``, once the call passed its checks."""
    comm = _communicator(call.group_ep)
    comm.check_call(op, call, gated)
    return comm


@a2e_kernel
def _a2e_cpu(
    x: torch.Tensor,
    expert_ids: torch.Tensor | None,
    scales: torch.Tensor | None,
    call: CamCall,
    compute_gate: bool,
) -> list[torch.Tensor]:
    gated = compute_gate or expert_ids is not None or scales is not None
    return _checked("a2e", call, gated).a2e(x, call)


@e2a_kernel
def _e2a_cpu(
    expand_x: torch.Tensor, atten_batch_size: torch.Tensor, call: CamCall
) -> torch.Tensor:
    return _checked("e2a", call).e2a(expand_x, atten_batch_size, call)


def ensure_reference_ops() -> None:
    """Register the CPU kernels of ``afd_ascend::a2e/e2a`` (once per process)."""
    global _LIBRARY
    with _LOCK:
        if _LIBRARY is not None:
            return
        library = torch.library.Library(NAMESPACE, "IMPL")
        library.impl("a2e", _a2e_cpu, "CPU")
        library.impl("e2a", _e2a_cpu, "CPU")
        _LIBRARY = library
