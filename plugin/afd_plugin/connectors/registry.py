# SPDX-License-Identifier: Apache-2.0
"""Connector registry: name -> lazy loader string, platform, closed schema.

Pure: nothing here imports a connector implementation, torch or a device library.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from afd_plugin.errors import AFDConfigError, FieldError, from_pydantic

Platform = Literal["cpu", "cuda", "npu"]
EXTRA_PATH = "additional_config.afd.connector_extra_config"

# Which backend package holds the connectors of each platform (AFD-I1).
BACKEND_PACKAGE: dict[str, str] = {
    "cpu": "afd_plugin.connectors.cpu",
    "cuda": "afd_plugin.connectors.gpu",
    "npu": "afd_plugin.connectors.npu",
}


@dataclass(frozen=True)
class ConnectorSpec:
    """What the pure core knows about a connector without importing it."""

    name: str
    platform: Platform
    loader: str
    """``module:Class`` of the implementation, inside the backend package."""
    schema: str
    """``module:Class`` of the closed extra-config schema (a torch-free module)."""
    has_control_plane: bool
    """Static capability; the runtime still branches on ``control_plane is None``."""
    synchronous: bool
    stages: str
    notes: str = ""
    any_ratio: bool = False
    """Whether any positive A:F pairs (attention ranks first, every attention
    rank reaching every FFN rank); else attention ranks >= FFN ranks."""
    cpu_reference: bool = False
    """Whether its operator contract also has CPU reference kernels (extra
    config ``ops: reference``), so it runs through real vLLM on the CPU."""
    standby_refusal: str = (
        "its FFN ranks are fixed members of the world its operators were "
        "built for; a standby cannot take a dead rank's place in it"
    )
    """Why it cannot promote standby FFN servers (``num_ffn_standby``), or
    empty when it can."""

    def _resolve(self, target: str) -> Any:
        module_name, _, attr = target.partition(":")
        return getattr(importlib.import_module(module_name), attr)

    @property
    def implemented(self) -> bool:
        """Whether this build ships the implementation module."""
        module_name = self.loader.partition(":")[0]
        return importlib.util.find_spec(module_name) is not None

    def schema_class(self) -> type:
        return self._resolve(self.schema)

    def load_class(self) -> type:
        if not self.implemented:
            raise NotImplementedError(
                f"connector {self.name} ({self.platform}) is registered but its "
                f"implementation {self.loader} is not part of this build"
            )
        return self._resolve(self.loader)


class AFDConnectorFactory:
    """Connector lookup by name. Holds only specs with lazy loader strings."""

    _specs: dict[str, ConnectorSpec] = {}

    @classmethod
    def _register(cls, spec: ConnectorSpec) -> None:
        """Draft registration hook; not a public extension contract."""
        package = BACKEND_PACKAGE[spec.platform]
        for target in (spec.loader, spec.schema):
            if not target.startswith(package + "."):
                raise ValueError(
                    f"{spec.name}: {target} must live in {package} ({spec.platform})"
                )
        if spec.name in cls._specs:
            raise ValueError(f"connector {spec.name} is already registered")
        cls._specs[spec.name] = spec

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(cls._specs)

    @classmethod
    def specs(cls) -> tuple[ConnectorSpec, ...]:
        return tuple(cls._specs.values())

    @classmethod
    def get_spec(cls, name: str) -> ConnectorSpec:
        try:
            return cls._specs[name]
        except KeyError:
            allowed = ", ".join(cls._specs)
            raise AFDConfigError(
                [
                    FieldError(
                        "additional_config.afd.connector",
                        f"unknown connector {name!r}; allowed: {allowed}",
                    )
                ]
            ) from None

    @classmethod
    def parse_extra_config(cls, name: str, raw: Mapping[str, Any] | None) -> Any:
        """Validate ``connector_extra_config`` against the connector's closed
        schema without building the connector."""
        schema = cls.get_spec(name).schema_class()
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise AFDConfigError(
                [FieldError(EXTRA_PATH, f"must be a mapping, got {type(raw).__name__}")]
            )
        try:
            return schema.model_validate(dict(raw))
        except ValidationError as exc:
            fields = tuple(schema.model_fields)
            raise AFDConfigError(from_pydantic(exc, EXTRA_PATH, fields)) from None

    @classmethod
    def load_class(cls, name: str) -> type:
        return cls.get_spec(name).load_class()


for _spec in (
    ConnectorSpec(
        name="P2pGlooAFDConnector",
        platform="cpu",
        loader="afd_plugin.connectors.cpu.p2p_gloo:P2pGlooAFDConnector",
        schema="afd_plugin.connectors.cpu.schema:P2pGlooExtraConfig",
        has_control_plane=True,
        synchronous=True,
        stages="decode, prefill",
        standby_refusal="",
        notes="Shared-memory rings between roles on one machine (control "
        "payloads ride them too), else gloo point-to-point over TCP; runs on "
        "any CPU; two micro-batches per step with `micro_batches: 2`. FFN "
        "ranks first; attention ranks >= FFN ranks.",
    ),
    ConnectorSpec(
        name="P2pNcclAFDConnector",
        platform="cuda",
        loader="afd_plugin.connectors.gpu.p2p_nccl:P2pNcclAFDConnector",
        schema="afd_plugin.connectors.gpu.schema:P2pNcclExtraConfig",
        has_control_plane=True,
        synchronous=True,
        stages="decode",
        standby_refusal="its NCCL communicator is fixed at start and a "
        "replacement rank cannot join it",
        notes="NCCL point-to-point. FFN ranks first; attention ranks >= FFN "
        "ranks, spread in blocks differing by at most one.",
    ),
    ConnectorSpec(
        name="CAMP2pAFDConnector",
        platform="npu",
        loader="afd_plugin.connectors.npu.cam_p2p:CAMP2pAFDConnector",
        schema="afd_plugin.connectors.npu.schema:CAMP2pExtraConfig",
        has_control_plane=True,
        synchronous=True,
        stages="decode",
        notes="CAM P2P ops `afd_ascend::a2e/e2a` (on Ascend the native "
        "library built from csrc/npu, loaded at connector init: its torch "
        "binding is there, its AscendC kernels are not in this repository; or "
        "`ops: reference`, their CPU kernels over shared memory or gloo); "
        "gloo control plane; bf16; FFN "
        "ranks first, attention `a` in slot `a // F` of FFN `a % F`; equal "
        "token counts inside one FFN group.",
        cpu_reference=True,
    ),
    ConnectorSpec(
        name="CAMAsyncAFDConnector",
        platform="npu",
        loader="afd_plugin.connectors.npu.cam_async:CAMAsyncAFDConnector",
        schema="afd_plugin.connectors.npu.schema:CAMAsyncExtraConfig",
        has_control_plane=False,
        synchronous=False,
        stages="prefill, decode",
        notes="No control plane: hidden rows, top-k ids, token count, layer "
        "and source travel in each dispatch, the FFN side serves them in "
        "arrival order; gate and router on attention, top-k weights applied "
        "at the combine; CAM async ops from the vendor's library (loaded at "
        "connector init; or `ops: reference`, their CPU kernels over shared "
        "memory or gloo); attention ranks first, any A:F, FFN j owns experts "
        "`[j*ceil(E/F), ...)`; eager only.",
        any_ratio=True,
        cpu_reference=True,
    ),
):
    AFDConnectorFactory._register(_spec)
del _spec
