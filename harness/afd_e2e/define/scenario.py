# SPDX-License-Identifier: Apache-2.0
"""Scenario files: the schema, strict loading with positions, and ``extends``.

A scenario id is its file name (``scenarios/<backend>/<id>.yaml``) and is
defined nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from afd_e2e.define.yamlpos import Located, YamlDoc, load_file
from afd_e2e.tiny_model import ARCHITECTURES, ARCHS
from afd_plugin.errors import pydantic_message

Backend = Literal["cpu", "cuda", "npu"]
Tier = Literal["pr", "nightly", "weekly", "local"]
TIER_RANK = {"local": 0, "weekly": 1, "nightly": 2, "pr": 3}  # how often it runs
SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )


class TinyModel(_Strict):
    """A model built locally by ``afd-e2e model tiny`` (CPU scenarios)."""

    arch: Literal[ARCHS]  # type: ignore[valid-type]
    """Tiny architecture to build (``afd_e2e.tiny_model.ARCH_CONFIGS``)."""


class ModelSpec(_Strict):
    """Either a tiny local model or a hub id pinned to a revision."""

    tiny: TinyModel | None = None
    """Build this tiny model locally; no download ever happens."""
    hub_id: str | None = None
    """Hub id, resolved as ``<model-root>/<hub_id>`` (never downloaded)."""
    revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    """Pinned 40-hex commit of the hub id's weights."""
    architecture: str | None = None
    """HF architecture name (implied for tiny models)."""
    served_name: str | None = None
    """Served model name; defaults to the scenario id."""

    @property
    def resolved_architecture(self) -> str:
        if self.tiny is not None:
            return ARCHITECTURES[self.tiny.arch]
        return self.architecture or ""


class RoleTopology(_Strict):
    """Parallel layout of one role."""

    dp: int = Field(default=1, ge=1)
    """Data-parallel size."""
    tp: int = Field(default=1, ge=1)
    """Tensor-parallel size."""
    ep: bool = False
    """Expert parallel (``--enable-expert-parallel``)."""
    devices: list[int] = Field(default_factory=list)
    """Accelerator ids for this role (empty on CPU)."""

    @property
    def ranks(self) -> int:
        return self.dp * self.tp


class FfnTopology(RoleTopology):
    """The FFN role's layout, and the standby FFN servers beside it."""

    standby: int = Field(default=0, ge=0)
    """Standby FFN servers (``afd.num_ffn_standby``): each runs one FFN rank
    (dp 1, tp 1), loads the weights and waits; when an active FFN rank dies
    its attention ranks promote one and go on mid-step.
    P2pGlooAFDConnector only."""


class Topology(_Strict):
    """Attention and FFN layout; a colocated scenario has only ``attention``."""

    attention: RoleTopology = Field(default_factory=RoleTopology)
    """The attention role (or the single colocated server)."""
    ffn: FfnTopology | None = None
    """The FFN role; absent for a colocated (non-AFD) scenario."""


class ConnectorSpec(_Strict):
    """Connector name and its own extra config."""

    name: str
    """A registered connector name (see docs/connectors.md)."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """``connector_extra_config``, checked by the connector's closed schema."""


class GraphSpec(_Strict):
    """Graph mode and capture sizes."""

    mode: Literal["eager", "FULL_DECODE_ONLY", "FULL"] = "eager"
    """``eager`` or a CUDA/ACL graph mode."""
    capture_sizes: list[int] = Field(default_factory=list)
    """Batch sizes to capture (empty: vLLM's default)."""


class DboSpec(_Strict):
    """Dual-batch overlap (two micro-batches)."""

    enabled: bool = False
    """Run two micro-batches: vLLM's DBO on CUDA (``--enable-dbo`` in the
    role args), ``afd.micro_batches`` on the CPU (set by the launcher)."""
    ubatches: int = Field(default=2, ge=1)
    """Micro-batches per step; AFD supports exactly 2."""


class RoleArgs(_Strict):
    """Extra vLLM arguments and environment for one role."""

    args: list[str] = Field(default_factory=list)
    """Extra vLLM command-line arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables."""


class RolesSpec(_Strict):
    """Per-role and common launch additions."""

    common: RoleArgs = Field(default_factory=RoleArgs)
    """Added to every role (and to the colocated baseline)."""
    attention: RoleArgs = Field(default_factory=RoleArgs)
    """Added to attention servers."""
    ffn: RoleArgs = Field(default_factory=RoleArgs)
    """Added to FFN servers."""


class ParityCheck(_Strict):
    """Greedy tokens equal a colocated run of the same model."""

    prompts: int = Field(default=8, ge=1)
    """Number of fixed prompts."""
    max_tokens: int = Field(default=16, ge=1)
    """Tokens generated per prompt."""


class Gsm8kCheck(_Strict):
    """GSM8K accuracy through lm-eval against the attention API."""

    samples: int = Field(ge=1)
    """Exact number of test questions evaluated."""
    threshold: float = Field(ge=0, le=1)
    """Minimum ``exact_match,strict-match``."""
    concurrency: int = Field(default=1, ge=1)
    """Concurrent requests."""
    fewshot: int = Field(default=8, ge=0)
    """Few-shot examples per prompt."""
    max_gen_toks: int = Field(default=256, ge=1)
    """Upper bound on generated tokens per answer."""


class CancelRecoverCheck(_Strict):
    """Streaming clients hang up mid-generation; the deployment drops them,
    finishes the rest and answers a fresh batch as before."""

    streams: int = Field(default=16, ge=2)
    """Concurrent streaming clients; every second one hangs up."""
    hang_up_after: int = Field(default=3, ge=1)
    """Text chunks a hanging-up client reads before it closes its connection."""
    max_tokens: int = Field(default=64, ge=2)
    """Tokens each stream asks for (the kept ones must get them all)."""

    @model_validator(mode="after")
    def _hang_up_before_the_end(self) -> CancelRecoverCheck:
        if self.hang_up_after >= self.max_tokens:
            raise ValueError(
                f"hang_up_after ({self.hang_up_after}) must be below max_tokens "
                f"({self.max_tokens}): a client must leave mid-generation"
            )
        return self


class ColdRestartCheck(_Strict):
    """The AFD servers are stopped (SIGTERM, no SIGKILL) and started again
    with the same command lines and ports; the second start gives the same
    greedy tokens as the first."""

    prompts: int = Field(default=4, ge=1)
    """Fixed prompts compared across the restart."""
    max_tokens: int = Field(default=16, ge=1)
    """Tokens generated per prompt."""


class FfnFailoverCheck(_Strict):
    """Streaming clients generate while the active FFN server is SIGKILLed,
    ``kills`` times in turn: a standby takes over each time and every stream
    ends with the colocated run's tokens; or, ``expect: fail``, the last kill
    finds no standby left and every stream fails within ``peer_timeout_s``."""

    concurrency: int = Field(default=16, ge=1)
    """Concurrent streaming greedy completions the kills land in."""
    max_tokens: int = Field(default=48, ge=2)
    """Tokens each stream asks for: enough that each kill lands while every
    stream still generates."""
    kills: int = Field(default=1, ge=1)
    """Active FFN servers SIGKILLed in turn, each after the previous failover."""
    expect: Literal["complete", "fail"] = "complete"
    """``complete``: every kill fails over (kills <= topology.ffn.standby) and
    every stream finishes; ``fail``: the last kill finds no standby (kills =
    standby + 1) and every stream ends with an error."""


class Checks(_Strict):
    """What a run must show."""

    parity: ParityCheck | None = None
    """Token parity against a colocated baseline."""
    gsm8k: Gsm8kCheck | None = None
    """GSM8K accuracy gate."""
    dual_ubatch_evidence: bool = False
    """At least one logged step that really ran two micro-batches."""
    cancel_recover: CancelRecoverCheck | None = None
    """Half of many streaming clients hang up; the deployment recovers."""
    cold_restart: ColdRestartCheck | None = None
    """Stop the AFD servers and start them again in the same run."""
    ffn_failover: FfnFailoverCheck | None = None
    """SIGKILL the active FFN server mid-generation; runs last."""


class Timeouts(_Strict):
    """Bounds of each phase, in seconds."""

    startup_s: float = Field(default=900, gt=0)
    """From launch until the attention API answers."""
    checks_s: float = Field(default=3600, gt=0)
    """Each GSM8K lm-eval run (AFD, then colocated) is killed after this long."""
    teardown_grace_s: float = Field(default=30, gt=0)
    """SIGTERM grace before SIGKILL."""


class Teardown(_Strict):
    """SIGKILL policy (AFD-I12)."""

    sigkill: Literal["fail", "marker-scan"] = "fail"
    """``fail``: any SIGKILL fails the run; ``marker-scan``: NPU async-CAM only."""
    budget_s: float | None = Field(default=None, gt=0)
    """Most seconds the whole teardown may take, from the first SIGTERM until
    every process of the run is gone; longer fails the run as a SIGKILL does.
    Each role's own time is in ``results.json`` either way."""


class Ports(_Strict):
    """Pinned ports; free ports are picked at run time when absent."""

    api: int | None = Field(default=None, ge=1, le=65535)
    """First API port (attention rank 0); others follow."""
    afd: int | None = Field(default=None, ge=1, le=65535)
    """AFD rendezvous port."""


NODE_NAME = r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$"
"""A logical node name: a DNS label (it names Kubernetes objects too)."""


class NodeSpec(_Strict):
    """One logical node of a placement; its address is found at run time."""

    interface: str | None = Field(default=None, min_length=1, max_length=15)
    """Network interface the node's collectives use (``GLOO_SOCKET_IFNAME``,
    plus ``NCCL_SOCKET_IFNAME`` on CUDA and ``HCCL_SOCKET_IFNAME`` on NPU);
    absent: the one that routes to the peers."""


class PlacementEntry(_Strict):
    """One server process: ``dp_local`` DP ranks of a role on one node."""

    node: str
    """A node named under ``placement.nodes``."""
    dp_local: int = Field(default=1, ge=1)
    """DP ranks this server runs (``--data-parallel-size-local``)."""
    devices: list[int] = Field(default_factory=list)
    """The node's accelerator ids, dp_local x tp of them (empty on CPU)."""


class StandbyEntry(_Strict):
    """One standby FFN server (one rank: no DP, no devices on the CPU)."""

    node: str
    """A node named under ``placement.nodes``."""


class Placement(_Strict):
    """Which node runs which servers. Absent: every server on one node."""

    nodes: dict[str, NodeSpec]
    """Logical node names (never addresses: the engine resolves them)."""
    attention: list[PlacementEntry] = Field(min_length=1)
    """The attention role's servers; the first serves the API, later ones
    run ``--headless`` and join its DP group."""
    ffn: list[PlacementEntry] = Field(default_factory=list)
    """The FFN role's servers; the first one's node hosts the rendezvous
    (attention's first one does when there are standbys)."""
    standby: list[StandbyEntry] = Field(default_factory=list)
    """Where each standby FFN server runs, one entry per
    ``topology.ffn.standby``; absent: every standby on the first FFN
    server's node."""


class Scenario(_Strict):
    """One end-to-end case; the id is the file name."""

    schema_version: Literal[1]
    """Always 1."""
    description: str
    """What this case proves."""
    backend: Backend
    """Where it runs: cpu, cuda or npu."""
    tier: Tier
    """``pr`` (PR gate), ``weekly`` or ``local`` (never in CI lists)."""
    model: ModelSpec
    """The model under test."""
    afd: bool = True
    """False for a colocated baseline scenario."""
    connector: ConnectorSpec | None = None
    """Required when ``afd``."""
    compute_gate_on_attention: bool = False
    """Gate placement (AFD-I7)."""
    model_runner: Literal["v1", "v2"] = "v1"
    """vLLM model runner version."""
    graph: GraphSpec = Field(default_factory=GraphSpec)
    """Graph mode."""
    dbo: DboSpec = Field(default_factory=DboSpec)
    """Dual-batch overlap."""
    topology: Topology = Field(default_factory=Topology)
    """Role layouts."""
    roles: RolesSpec = Field(default_factory=RolesSpec)
    """Extra vLLM args and env per role."""
    checks: Checks = Field(default_factory=Checks)
    """What the run must show."""
    timeouts: Timeouts = Field(default_factory=Timeouts)
    """Phase bounds."""
    teardown: Teardown = Field(default_factory=Teardown)
    """SIGKILL policy."""
    ports: Ports = Field(default_factory=Ports)
    """Pinned ports."""
    placement: Placement | None = None
    """Servers per node (multi-node); absent: one node, as before."""
    awaits: str | None = Field(default=None, min_length=1)
    """What this build still lacks for the case (a connector, the role workers
    of a platform, a role-split model), in words. Set, the linter accepts the
    plugin's "not in this build" answers and checks every other rule, and
    fails once nothing is missing; ``afd-e2e run`` refuses the case."""

    @property
    def shape(self) -> str:
        """``2A2F`` style label, or ``colocated DPxTP``."""
        a = self.topology.attention
        if not self.afd or self.topology.ffn is None:
            return f"colocated dp{a.dp}tp{a.tp}"
        return f"{a.ranks}A{self.topology.ffn.ranks}F"

    @property
    def devices(self) -> int:
        used = len(self.topology.attention.devices)
        if self.topology.ffn is not None:
            used += len(self.topology.ffn.devices)
        if self.placement is not None:
            entries = [*self.placement.attention, *self.placement.ffn]
            used += sum(len(e.devices) for e in entries)
        return used

    @property
    def standbys(self) -> int:
        """Standby FFN servers of the deployment (0 without an FFN role)."""
        ffn = self.topology.ffn
        return ffn.standby if self.afd and ffn is not None else 0

    @property
    def nodes(self) -> tuple[str, ...]:
        """Logical node names; empty for a one-node scenario."""
        return tuple(self.placement.nodes) if self.placement else ()


SCENARIO_FIELDS = tuple(Scenario.model_fields)


def _unwrap(annotation: Any) -> Any:
    """The model class inside ``X | None``, ``list[X]`` or ``dict[str, X]``."""
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def allowed_fields_at(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """Field names of the model that owns the last element of ``loc``."""
    model: Any = Scenario
    for part in loc[:-1]:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return ()
        field = model.model_fields.get(str(part))
        if field is None:
            return ()
        model = _unwrap(field.annotation)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return tuple(model.model_fields)
    return ()


@dataclass
class ScenarioSource:
    """One scenario file as read: its id, path, raw data and positions."""

    id: str
    path: Path
    display: str
    doc: YamlDoc

    @property
    def backend_dir(self) -> str:
        return self.path.parent.name


@dataclass
class LoadedScenario:
    """A resolved scenario (``extends`` applied) and where each value came from."""

    id: str
    source: ScenarioSource
    parent: ScenarioSource | None
    data: dict[str, Any]
    scenario: Scenario | None
    errors: list[Located] = field(default_factory=list)

    def error(self, path: tuple[Any, ...], message: str) -> Located:
        """A positioned error: from the child file when it sets ``path``."""
        doc = self.source.doc
        if self.parent is not None and _known_depth(
            self.parent.doc, path
        ) > _known_depth(doc, path):
            message += f" (inherited by '{self.id}' through extends)"
            return self.parent.doc.error(path, message)
        return doc.error(path, message)


def _known_depth(doc: YamlDoc, path: tuple[Any, ...]) -> int:
    """Length of the longest prefix of ``path`` that ``doc`` itself sets."""
    return next(
        (cut for cut in range(len(path), 0, -1) if path[:cut] in doc.positions), 0
    )


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else in ``override`` replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_source(path: Path, root: Path) -> ScenarioSource:
    try:
        display = str(path.relative_to(root))
    except ValueError:
        display = str(path)
    return ScenarioSource(
        id=path.stem, path=path, display=display, doc=load_file(path, display)
    )


def resolve(
    source: ScenarioSource, sources: dict[str, ScenarioSource]
) -> LoadedScenario:
    """Apply one level of ``extends`` and validate the schema."""
    data = source.doc.data
    errors = list(source.doc.errors)
    loaded = LoadedScenario(source.id, source, None, {}, None, errors)
    if not isinstance(data, dict):
        errors.append(source.doc.error((), "a scenario file must be a mapping"))
        return loaded
    data = dict(data)
    parent_id = data.pop("extends", None)
    if parent_id is not None:
        parent = sources.get(parent_id) if isinstance(parent_id, str) else None
        if parent is None:
            known = ", ".join(sorted(sources)) or "(none)"
            errors.append(
                source.doc.error(
                    ("extends",), f"no scenario named {parent_id!r}; known: {known}"
                )
            )
            return loaded
        if isinstance(parent.doc.data, dict) and "extends" in parent.doc.data:
            errors.append(
                source.doc.error(
                    ("extends",),
                    f"{parent_id} itself extends {parent.doc.data['extends']!r}; "
                    "only one level of extends is allowed",
                )
            )
            return loaded
        loaded.parent = parent
        parent_data = parent.doc.data if isinstance(parent.doc.data, dict) else {}
        data = deep_merge(parent_data, data)
    loaded.data = data
    try:
        loaded.scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            errors.append(
                loaded.error(loc, pydantic_message(err, allowed_fields_at(loc)))
            )
    return loaded
