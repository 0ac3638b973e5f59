# SPDX-License-Identifier: Apache-2.0
"""``P2pNcclAFDConnector``: the shared point-to-point design with a CUDA data
path. The control plane stays on the gloo world (the metadata group, CPU
tensors, never captured); hidden states go over NCCL, or host memory when
both roles share one GPU.
"""

from __future__ import annotations

import ctypes
import logging
from datetime import timedelta

import torch

from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.gpu.schema import P2pNcclExtraConfig
from afd_plugin.connectors.p2p_base import DataTransport, P2pAFDConnectorBase

logger = logging.getLogger("afd_plugin")

_UID_KEY = "nccl/unique_id"


def _current_cuda_device() -> torch.device:
    if not torch.cuda.is_available():
        raise RuntimeError(
            "P2pNcclAFDConnector needs a CUDA device (transport 'nccl'); none is "
            "visible to this process"
        )
    return torch.device("cuda", torch.cuda.current_device())


class NcclTransport(DataTransport):
    """One NCCL communicator over the whole AFD world (global ranks as in the
    gloo world). Sends and receives run on the current stream, so a CUDA graph
    being captured on that stream records them; NCCL matches them by order,
    which the step schedule keeps identical on both roles."""

    def __init__(self, world: GlooWorld, timeout_s: float) -> None:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.device_communicators.pynccl_wrapper import (
            NCCL_UNIQUE_ID_BYTES,
            NCCLLibrary,
        )

        self.device = _current_cuda_device()
        store = world.store
        if world.global_rank == 0:
            unique_id = NCCLLibrary().ncclGetUniqueId()
            raw = ctypes.string_at(ctypes.addressof(unique_id), NCCL_UNIQUE_ID_BYTES)
            store.set(_UID_KEY, raw)
        else:
            store.wait([_UID_KEY], timedelta(seconds=timeout_s))
        raw = store.get(_UID_KEY)
        # Collective over the AFD world (its warm-up is an all-reduce).
        self.comm = PyNcclCommunicator.from_unique_id_bytes(
            raw, world.global_rank, world.layout.world_size, self.device
        )
        if self.comm.disabled:
            raise RuntimeError(
                "P2pNcclAFDConnector: vLLM's NCCL communicator is disabled "
                "(VLLM_DISABLE_PYNCCL is set); unset it or use transport 'host'"
            )
        logger.info(
            "afd-plugin: %s: NCCL data path over %d ranks on %s",
            world.me(),
            world.layout.world_size,
            self.device,
        )

    def send(self, tensor: torch.Tensor, dst: int, tag: int, what: str) -> None:
        self.comm.send(tensor, dst)

    def recv(
        self, tensor: torch.Tensor, src: int, tag: int, what: str, idle: bool = False
    ) -> None:
        self.comm.recv(tensor, src)

    def close(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None:
            comm.destroy()


class HostTransport(DataTransport):
    """Device tensors staged through host memory over the gloo world: for two
    roles on one GPU (NCCL refuses two ranks on one device). Synchronous and
    never captured: the validator refuses it with any graph mode."""

    def __init__(self, world: GlooWorld) -> None:
        self.world = world
        self.device = (
            _current_cuda_device() if torch.cuda.is_available() else torch.device("cpu")
        )

    def send(self, tensor: torch.Tensor, dst: int, tag: int, what: str) -> None:
        self.world.send(tensor.to("cpu"), dst, tag, what)

    def recv(
        self, tensor: torch.Tensor, src: int, tag: int, what: str, idle: bool = False
    ) -> None:
        if tensor.device.type == "cpu":
            self.world.recv(tensor, src, tag, what)
            return
        staged = torch.empty(tensor.shape, dtype=tensor.dtype)
        self.world.recv(staged, src, tag, what)
        tensor.copy_(staged)


class P2pNcclAFDConnector(P2pAFDConnectorBase):
    """One attention rank <-> its FFN rank over NCCL; an FFN rank serves a block."""

    extra: P2pNcclExtraConfig

    def _open_transport(self, world: GlooWorld) -> DataTransport:
        if self.extra.transport == "host":
            return HostTransport(world)
        return NcclTransport(world, self.extra.rendezvous_timeout_s)
