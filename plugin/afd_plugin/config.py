# SPDX-License-Identifier: Apache-2.0
"""The AFD configuration, read only from ``additional_config["afd"]``.

Owns the common fields, their aliases and the connector-name whitelist (AFD-I1);
a parsed config carries its connector's parsed extra config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.errors import AFDConfigError, FieldError, describe, from_pydantic

CONFIG_PATH = "additional_config.afd"

Role = Literal["attention", "ffn"]

# The configuration-level whitelist of connector names. It is deliberately not
# derived from the connector registry (AFD-I1): adding a connector means adding
# it here, to the registry, and to the connector table (docs/connectors.md); a
# test checks all three.
ConnectorName = Literal[
    "P2pGlooAFDConnector",
    "P2pNcclAFDConnector",
    "CAMP2pAFDConnector",
    "CAMAsyncAFDConnector",
]
ALLOWED_CONNECTORS: tuple[str, ...] = get_args(ConnectorName)

# Compatibility aliases accepted for older launch commands.
ALIASES: dict[str, str] = {
    "afd_role": "role",
    "afd_connector": "connector",
    "afd_host": "host",
    "afd_port": "port",
}


class AFDConfig(BaseModel):
    """Common AFD settings shared by both roles of one deployment."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        use_attribute_docstrings=True,
        allow_inf_nan=False,
    )

    role: Role
    """Which half of each decoder layer this server runs: `attention` or `ffn`."""

    connector: ConnectorName
    """Connector exchanging hidden states between the roles (see the table)."""

    host: str = "127.0.0.1"
    """Address of the rendezvous endpoint (the first FFN rank listens here; the
    first attention rank when `num_ffn_standby` > 0)."""

    port: int = Field(default=29650, ge=1, le=65535)
    """TCP port of the rendezvous endpoint; both roles must use the same one."""

    bind_host: str | None = Field(default=None, min_length=1, max_length=255)
    """Local address this server's AFD sockets bind to (its gloo pairs and its
    rendezvous connection); default: the interface that reaches `host`
    (127.0.0.1 when `host` is loopback). The rendezvous host (the first FFN
    rank, or the first attention rank with standbys) always listens on `host`
    itself; nothing binds to every interface."""

    secret_env: str | None = Field(
        default=None, min_length=1, max_length=255, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"
    )
    """Name of an environment variable holding the deployment's rendezvous
    secret (at least 16 bytes; every server of the deployment sets the same).
    A peer must prove it holds it before it reads or writes anything. The
    secret itself never goes in `additional_config`, which vLLM logs."""

    secret_file: str | None = Field(default=None, min_length=1, max_length=4096)
    """Path of a file holding the rendezvous secret (instead of `secret_env`;
    surrounding whitespace is stripped)."""

    num_attention_ranks: int = Field(default=1, ge=1)
    """Number of attention ranks in the deployment (attention DP x TP)."""

    num_ffn_ranks: int = Field(default=1, ge=1)
    """Number of FFN ranks in the deployment (FFN DP x TP)."""

    num_ffn_standby: int = Field(default=0, ge=0, le=64)
    """Standby FFN servers the deployment starts (every server names the same
    count). A standby loads the FFN weights, joins the rendezvous and waits;
    when an FFN rank dies or stops answering, its attention ranks promote a
    standby in its place mid-step and resend what was in flight, so no
    request fails. With standbys the first attention rank hosts the
    rendezvous (`host` is its address), so it outlives any FFN rank."""

    standby: bool = False
    """This FFN server is one of the `num_ffn_standby` standbys (one FFN rank:
    DP 1, TP 1); it serves nothing until it is promoted."""

    compute_gate_on_attention: bool = False
    """Run the MoE router (gate) on the attention side and send its logits."""

    micro_batches: Literal[1, 2] = 1
    """Micro-batches per decode step on the CPU, where vLLM has no DBO (its CPU
    platform turns `--enable-dbo` off): `2` splits each decode step of two or
    more requests (at least `--dbo-decode-token-threshold` tokens) in two at a
    request boundary and runs one half's attention while the FFN role serves
    the other half; with attention DP > 1 each rank splits its own steps. Both
    roles set it alike. On CUDA, two micro-batches are vLLM's `--enable-dbo`."""

    connector_extra_config: dict[str, Any] = Field(default_factory=dict)
    """Connector-owned settings, checked by the connector's closed schema."""

    allow_unsupported_vllm_version: bool = False
    """Start even when the installed vLLM is not the release the plugin targets."""

    _extra: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_secret_source(self) -> AFDConfig:
        if self.secret_env is not None and self.secret_file is not None:
            raise AFDConfigError(
                [
                    FieldError(
                        f"{CONFIG_PATH}.secret_file",
                        "set secret_env or secret_file, not both",
                    )
                ]
            )
        return self

    @model_validator(mode="after")
    def _standby_is_ffn(self) -> AFDConfig:
        errors = []
        if self.standby and self.role != "ffn":
            errors.append(
                FieldError(
                    f"{CONFIG_PATH}.standby",
                    f"only an FFN server can be a standby; role is {self.role!r}",
                )
            )
        if self.standby and self.num_ffn_standby < 1:
            errors.append(
                FieldError(
                    f"{CONFIG_PATH}.num_ffn_standby",
                    "must be >= 1 on a standby server (and the same on every "
                    "server of the deployment), got 0",
                )
            )
        if errors:
            raise AFDConfigError(errors)
        return self

    @model_validator(mode="after")
    def _parse_extra(self) -> AFDConfig:
        # The one parse of connector_extra_config against the connector's
        # closed schema; raises AFDConfigError (a ValueError) naming each field.
        self._extra = AFDConnectorFactory.parse_extra_config(
            self.connector, self.connector_extra_config
        )
        return self

    @property
    def extra(self) -> Any:
        """``connector_extra_config`` parsed by the connector's closed schema
        (a frozen model of ``connectors/<backend>/schema.py``)."""
        return self._extra

    @property
    def is_attention(self) -> bool:
        return self.role == "attention"

    @property
    def role_ranks(self) -> int:
        """Rank count of this server's own role."""
        return self.num_attention_ranks if self.is_attention else self.num_ffn_ranks

    def to_additional_config(self) -> dict[str, Any]:
        """The ``additional_config`` dict that parses back to this config."""
        return {"afd": self.model_dump(mode="json")}


FIELD_NAMES: tuple[str, ...] = tuple(AFDConfig.model_fields)


def _apply_aliases(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
    errors: list[FieldError] = []
    out: dict[str, Any] = {}
    for key, value in raw.items():
        canonical = ALIASES.get(key, key)
        if key in ALIASES and canonical in raw:
            errors.append(
                FieldError(
                    f"{CONFIG_PATH}.{key}",
                    f"alias of '{canonical}', which is also set; keep only "
                    f"'{canonical}'",
                )
            )
            continue
        out[canonical] = value
    return out, errors


def parse_afd_config(additional_config: Mapping[str, Any] | None) -> AFDConfig | None:
    """Parse ``additional_config["afd"]``; ``None`` when AFD is not configured.

    Raises ``AFDConfigError`` listing every problem, common fields and the
    connector's own ``connector_extra_config`` schema alike.
    """
    if additional_config is None:
        return None
    if not isinstance(additional_config, Mapping):
        raise AFDConfigError(
            [
                FieldError(
                    "additional_config",
                    f"must be a mapping, got {describe(additional_config)}",
                )
            ]
        )
    if "afd" not in additional_config:
        return None
    raw = additional_config["afd"]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError too
            why = str(exc) if not isinstance(exc, RecursionError) else "nested too deep"
            raise AFDConfigError(
                [FieldError(CONFIG_PATH, f"is not valid JSON: {why[:200]}")]
            ) from None
    if not isinstance(raw, Mapping):
        raise AFDConfigError(
            [FieldError(CONFIG_PATH, f"must be a mapping, got {describe(raw)}")]
        )
    data, errors = _apply_aliases(raw)
    try:
        config = AFDConfig.model_validate(data)
    except ValidationError as exc:
        errors += _errors_of(exc, data)
        raise AFDConfigError(errors) from None
    if errors:
        raise AFDConfigError(errors)
    return config


def _errors_of(exc: ValidationError, data: Mapping[str, Any]) -> list[FieldError]:
    """Field errors of a failed parse: the common fields' and the extra
    config's. When a common field failed, the extra config was not parsed
    (pydantic skips the model validator), so it is checked here to list every
    problem at once."""
    errors: list[FieldError] = []
    common = []
    for entry in exc.errors(include_url=False):
        cause = entry.get("ctx", {}).get("error")
        if isinstance(cause, AFDConfigError):
            errors += cause.errors
        else:
            common.append(entry)
    errors += from_pydantic(common, CONFIG_PATH, FIELD_NAMES + tuple(ALIASES))
    connector = data.get("connector")
    extra = data.get("connector_extra_config", {})
    if common and connector in ALLOWED_CONNECTORS and isinstance(extra, Mapping):
        try:
            AFDConnectorFactory.parse_extra_config(connector, extra)
        except AFDConfigError as schema_exc:
            errors += schema_exc.errors
    return errors
