# SPDX-License-Identifier: Apache-2.0
"""P2pNcclAFDConnector with its host transport, run on CPU: the same shared
design as the gloo connector (world, control plane, per-stage state), here
serving a two-micro-batch step through the FFN daemon and the FFN step
schedule. The NCCL transport itself needs GPUs and is not run here.

Needs torch and vLLM importable (tox env e2e); no server, no GPU.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from afd_e2e.launch.plan import free_port
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import ExchangeSpec, LayerExchange
from afd_plugin.connectors.gpu.p2p_nccl import HostTransport, P2pNcclAFDConnector
from afd_plugin.connectors.gpu.schema import P2pNcclExtraConfig
from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.errors import AFDConfigError
from afd_plugin.runtime.ffn_daemon import FFNDaemon
from afd_plugin.runtime.ffn_serve import serve_ffn_step
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import stage_payloads
from afd_plugin.wire import AFDWireError

HIDDEN = 8
SPEC = ExchangeSpec(
    HIDDEN,
    "float32",
    "float32",
    (LayerExchange(0, "dense"), LayerExchange(1, "dense")),
    stages=2,
)


def connector(role: str, port: int) -> P2pNcclAFDConnector:
    config = AFDConfig(
        role=role,
        connector="P2pNcclAFDConnector",
        port=port,
        connector_extra_config={
            "transport": "host",
            "rendezvous_timeout_s": 30.0,
            "peer_timeout_s": 10.0,
        },
    )
    conn = P2pNcclAFDConnector(config, 0)
    conn.bind(SPEC)
    return conn


def ffn_layer(layer: int, hidden: torch.Tensor, _: Any) -> torch.Tensor:
    return hidden * (layer + 2)


def test_schema_validates_the_transport_field() -> None:
    assert P2pNcclExtraConfig().transport == "nccl"
    with pytest.raises(AFDConfigError, match="transport"):
        AFDConnectorFactory.parse_extra_config(
            "P2pNcclAFDConnector", {"transport": "ipc"}
        )
    assert AFDConnectorFactory.get_spec("P2pNcclAFDConnector").implemented


def test_two_micro_batch_step_over_the_host_transport() -> None:
    port = free_port()
    errors: list[BaseException] = []
    branches: list[StepKind] = []

    def ffn_main() -> None:
        conn = connector("ffn", port)
        try:
            conn.init_afd_connector()
            assert conn.control_plane is not None  # installed at construction
            daemon = FFNDaemon(conn, lambda *_: None, lambda _: None)
            payloads = daemon.receive_step()
            branches.append(StepKind.EAGER)
            serve_ffn_step(
                conn,
                ffn_layer,
                (0, 1),
                payloads,
                StepKind.EAGER,
                None,
                torch.device("cpu"),
            )
        except BaseException as exc:  # reported to the test
            errors.append(exc)
        finally:
            conn.close()

    ffn = threading.Thread(target=ffn_main, daemon=True)
    ffn.start()
    conn = connector("attention", port)
    conn.init_afd_connector()
    assert isinstance(conn.transport, HostTransport)
    for payload in stage_payloads([(3,), (2,)], "eager", stages=2):
        conn.control_plane.send_dp_metadata_list(payload)
    assert conn.step == 1 and sorted(conn.states) == [0, 1]
    inputs = {s: torch.randn(n, HIDDEN) for s, n in ((0, 3), (1, 2))}
    # The attention side's DBO order: send L0 s0, send L0 s1, recv L0 s0, ...
    for s in (0, 1):
        conn.send_attn_output(inputs[s], 0, s)
    out0 = conn.recv_ffn_output(0, 0)
    conn.send_attn_output(out0, 1, 0)
    out1 = conn.recv_ffn_output(0, 1)
    conn.send_attn_output(out1, 1, 1)
    final = {s: conn.recv_ffn_output(1, s) for s in (0, 1)}
    ffn.join(30)
    assert not ffn.is_alive() and errors == [] and branches == [StepKind.EAGER]
    for s in (0, 1):
        assert torch.allclose(final[s], inputs[s] * 2 * 3)
    # A stage the payload did not announce is refused before anything moves.
    with pytest.raises(AFDWireError, match="sends 4 tokens"):
        conn.send_attn_output(torch.zeros(4, HIDDEN), 0, 0)
    conn.close()
    conn.close()
