# SPDX-License-Identifier: Apache-2.0
"""``CAMP2pAFDConnector``: the synchronous Ascend connector of decode steps.

The shared point-to-point design (``connectors/p2p_base.py``: the gloo world
with FFN ranks first, the JSON control plane, per-stage step state, state
before send) with two differences the CAM P2P operators impose:

- **Strided groups**: attention ``a`` talks to FFN ``a % F`` in slot
  ``a // F``, so FFN ``r`` serves ``r, r + F, ...``.
- **The data moves through the ops** ``afd_ascend::a2e`` / ``e2a``
  (``cam_p2p_ops.py``), one communicator per micro-batch stage; every slot of
  one FFN group sends the same number of rows.

``connector_extra_config.ops`` picks the kernels behind those ops: ``ascend``
(loaded from the native library at ``init_afd_connector()``) or
``reference`` (CPU kernels over shared memory or gloo,
``cam_p2p_reference.py``). The module imports without ``torch_npu``.
"""

from __future__ import annotations

import torch

from afd_plugin.connectors.base import ExchangeSpec
from afd_plugin.connectors.cpu.schema import P2pGlooExtraConfig
from afd_plugin.connectors.cpu.shm_transport import ShmTransport, choose_shm
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.npu import cam_p2p_reference as reference
from afd_plugin.connectors.npu.cam_p2p_ops import (
    ACTIVATION_DTYPE,
    CamCall,
    CamOpsUnavailable,
    a2e,
    e2a,
    ensure_cam_p2p_ops_available,
)
from afd_plugin.connectors.npu.schema import CAMP2pExtraConfig
from afd_plugin.connectors.p2p_base import (
    DataTransport,
    GlooTransport,
    P2pAFDConnectorBase,
)
from afd_plugin.step_protocol import stage_rows
from afd_plugin.topology import strided_ffn_rank, strided_group
from afd_plugin.wire import AFDWireError

TOPK_UNUSED = 0
"""The gate runs on the FFN side: no expert ids travel, so no top-k columns."""


class CAMP2pAFDConnector(P2pAFDConnectorBase):
    """One attention rank -> its strided FFN rank through the CAM P2P ops."""

    extra: CAMP2pExtraConfig

    def __init__(self, config, rank: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, rank)
        self._handles: dict[tuple[int, int], torch.Tensor] = {}
        self._communicators: list[str] = []

    # -- topology -----------------------------------------------------------

    def ffn_rank_of(self, attention_rank: int) -> int:
        return strided_ffn_rank(
            attention_rank, self.layout.num_attention, self.layout.num_ffn
        )

    def group_of(self, ffn_rank: int) -> range:
        return strided_group(ffn_rank, self.layout.num_attention, self.layout.num_ffn)

    @property
    def global_rank(self) -> int:
        return self.layout.global_rank(self.config.role, self.rank)

    def group_ep(self, stage: int) -> str:
        """The communicator of one micro-batch stage (``afd``, ``afd1``, ...),
        made unique on this process by the world's rendezvous port."""
        suffix = str(stage) if stage else ""
        return f"afd{suffix}@{self.config.port}/{self.global_rank}"

    # -- lifecycle ----------------------------------------------------------

    def bind(self, spec: ExchangeSpec) -> None:
        if spec.dtype != "bfloat16":
            raise AFDWireError(
                f"CAMP2pAFDConnector moves bf16 activations (the CAM P2P "
                f"contract) but this model runs {spec.dtype}: start both roles "
                "with --dtype bfloat16"
            )
        super().bind(spec)

    def init_afd_connector(self) -> None:
        if self.extra.ops == "ascend":
            # Before the rendezvous: a rank without its kernels says so at
            # once instead of after its peers arrived.
            ensure_cam_p2p_ops_available()
        super().init_afd_connector()

    def _open_transport(self, world: GlooWorld) -> DataTransport:
        if self.extra.ops == "ascend":
            raise CamOpsUnavailable(
                "CAMP2pAFDConnector with ops 'ascend': the native kernels "
                "loaded, but the HCCL communicators they run on (one per "
                "micro-batch stage) are not in this build"
            )
        reference.ensure_reference_ops()
        peers = (self.ffn_peer,) if self.is_attention else self.attention_peers
        cpu = P2pGlooExtraConfig(
            rendezvous_timeout_s=self.extra.rendezvous_timeout_s,
            peer_timeout_s=self.extra.peer_timeout_s,
            transport=self.extra.transport,
        )
        transport: DataTransport
        if choose_shm(cpu, world, self.exchange_group):
            transport = ShmTransport(world, peers, cpu, is_ffn=not self.is_attention)
        else:
            transport = GlooTransport(world)
        stages = self.spec.stages if self.spec is not None else 1
        try:
            for stage in range(stages):
                name = self.group_ep(stage)
                reference.register(
                    reference.ReferenceCommunicator(
                        name,
                        stage,
                        transport,
                        self.layout.num_attention,
                        self.layout.num_ffn,
                        self.global_rank,
                        self.extra.max_num_tokens_per_rank,
                    )
                )
                self._communicators.append(name)
        except BaseException:
            self._drop_communicators()
            transport.close()
            raise
        return transport

    def _drop_communicators(self) -> None:
        for name in self._communicators:
            reference.unregister(name)
        self._communicators.clear()

    def close(self) -> None:
        self._drop_communicators()
        self._handles.clear()
        super().close()

    # -- the ops --------------------------------------------------------------

    def _call(self, rows: int, stage: int) -> CamCall:
        """The op arguments of ``rows`` per slot in ``stage``."""
        assert self.spec is not None
        return CamCall(
            rows,
            self.spec.hidden_size,
            TOPK_UNUSED,
            self.layout.num_ffn,
            self.layout.num_attention,
            self.global_rank,
            self.group_ep(stage),
            self.extra.aiv_num(self.config.role),
        )

    def _placeholder(self) -> torch.Tensor:
        """The input of an op on the side that has none (empty)."""
        assert self.spec is not None
        return torch.empty((0, self.spec.hidden_size), dtype=ACTIVATION_DTYPE)

    def _a2e(self, x: torch.Tensor, rows: int, layer: int, stage: int) -> torch.Tensor:
        """a2e of ``rows`` per slot: keeps the handle for the ``e2a`` of the
        same layer and stage; returns the gathered rows (empty on attention)."""
        out = a2e(x, self._call(rows, stage))
        self._handles[(layer, stage)] = out[3]
        return out[0]

    def _e2a(self, x: torch.Tensor, rows: int, layer: int, stage: int) -> torch.Tensor:
        """e2a of ``rows`` per slot with the handle of the matching ``_a2e``."""
        handle = self._handles.pop((layer, stage))
        return e2a(x, handle, self._call(rows, stage))

    def _group_rows(self, layer: int, stage: int) -> int:
        """Rows every slot of this rank's FFN group moves in ``stage``: one
        count for the whole group, or a loud refusal."""
        counts = stage_rows(self._state_or_raise(stage).payload)
        if len(set(counts)) > 1:
            ranks = ", ".join(
                f"attention {a}: {n}" for a, n in zip(self.block, counts, strict=True)
            )
            raise AFDWireError(
                f"{self._me()}: {self._where(layer, stage)}: CAMP2pAFDConnector "
                f"needs equal token counts inside one FFN group, got {ranks} "
                "(vLLM pads DP token counts only in graph mode; run "
                "FULL_DECODE_ONLY graphs or one attention rank per FFN rank)"
            )
        return counts[0]

    def send_attn_output(
        self, hidden: torch.Tensor, layer: int, stage: int, **extras: torch.Tensor
    ) -> None:
        if extras:
            raise AFDWireError(
                "CAMP2pAFDConnector runs the gate on the FFN side: no router "
                f"logits travel (got {sorted(extras)})"
            )
        rows = self._group_rows(layer, stage)
        if hidden.shape[0] != rows:
            raise AFDWireError(
                f"{self._me()}: layer {layer} stage {stage} sends {hidden.shape[0]} "
                f"tokens but the control payload of step {self.step} announced {rows}"
            )
        self._sent[(layer, stage)] = hidden.shape
        if rows == 0:
            return  # a stage without tokens moves nothing on either side
        self._a2e(hidden.contiguous(), rows, layer, stage)

    def recv_ffn_output(self, layer: int, stage: int) -> torch.Tensor:
        rows = self._sent.pop((layer, stage))[0]
        if rows == 0:
            return self._placeholder()  # nothing was pushed, nothing comes back
        return self._e2a(self._placeholder(), rows, layer, stage)

    def recv_attn_output(
        self, layer: int, stage: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        rows = self._group_rows(layer, stage)
        gathered = self._a2e(self._placeholder(), rows, layer, stage)
        self._sent[(layer, stage)] = torch.Size((rows,))
        return gathered, {}

    def send_ffn_output(self, hidden: torch.Tensor, layer: int, stage: int) -> None:
        rows = self._sent.pop((layer, stage))[0]
        self._e2a(hidden.contiguous(), rows, layer, stage)
