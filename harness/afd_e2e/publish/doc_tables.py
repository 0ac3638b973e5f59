# SPDX-License-Identifier: Apache-2.0
"""Generated documentation tables and the markers that delimit them.

Each table is derived from code (connector registry, model support, serving
features, config schema) or from scenarios; ``afd-e2e docs`` writes or checks
them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args, get_origin

from afd_plugin.config import ALIASES, AFDConfig
from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.envs import ENV_VARS
from afd_plugin.graph_policy import allowed_graph_modes
from afd_plugin.metrics_catalog import metrics_table
from afd_plugin.model_support import MODEL_FAMILIES
from afd_plugin.serving_features import SERVING_FEATURES
from afd_plugin.validation import runner_not_in_build

# Platforms whose runtime this repository's own CI runs end to end
# (`tox -e e2e`); every other implemented path awaits a hardware run.
CI_PLATFORMS = ("cpu",)


def _status(platform: str, implemented: bool, cpu_reference: bool = False) -> str:
    if not implemented:
        return "not yet"
    if platform in CI_PLATFORMS:
        return "yes, run in CI"
    if cpu_reference:
        return "yes; its reference ops run in CI on the CPU, no hardware run yet"
    return "yes, no hardware run yet"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += [
        "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"
        for row in rows
    ]
    return "\n".join(lines)


def _code(items: Iterable[str]) -> str:
    return ", ".join(f"`{i}`" for i in items)


def _modes(platform: str, runner: str, modes: Iterable[str]) -> str:
    """The modes the rules allow, those this build's runners lack marked."""
    return ", ".join(
        f"`{m}`" + (" (not built)" if runner_not_in_build(platform, runner, m) else "")
        for m in modes
    )


def connector_table() -> str:
    rows = []
    for spec in AFDConnectorFactory.specs():
        modes = "; ".join(
            f"{runner}: {_modes(spec.platform, runner, found)}"
            for runner in ("v1", "v2")
            if (
                found := allowed_graph_modes(
                    spec.platform, runner, spec.has_control_plane
                )
            )
        )
        schema = spec.schema_class()
        rows.append(
            [
                f"`{spec.name}`",
                spec.platform,
                "sync" if spec.synchronous else "async",
                "yes" if spec.has_control_plane else "no",
                modes,
                _code(schema.model_fields) or "(none)",
                _status(spec.platform, spec.implemented, spec.cpu_reference),
                spec.notes,
            ]
        )
    return _table(
        [
            "Connector",
            "Platform",
            "Mode",
            "Control plane",
            "Graph modes",
            "`connector_extra_config` fields",
            "Implemented",
            "Notes",
        ],
        rows,
    )


def _runs(platforms: Iterable[str]) -> str:
    """Where a family's role-split model has run end to end."""
    ci = [p for p in platforms if p in CI_PLATFORMS]
    rest = [p for p in platforms if p not in CI_PLATFORMS]
    parts = [f"{', '.join(ci)} in CI"] if ci else []
    if rest:
        parts.append(f"{', '.join(rest)}: no hardware run yet")
    return "; ".join(parts)


def model_table() -> str:
    rows = [
        [
            fam.family,
            _code(fam.architectures),
            ", ".join(fam.platforms),
            _runs(fam.platforms)
            if any(fam.in_build(a) for a in fam.architectures)
            else "nowhere yet",
            "either side" if fam.gate_on_attention else "FFN only",
            "KV cache + linear-attention state" if fam.hybrid else "KV cache",
            _code(a for a in fam.architectures if fam.in_build(a)) or "not yet",
            ", ".join(fam.checkpoints),
            fam.notes,
        ]
        for fam in MODEL_FAMILIES
    ]
    header = ["Model family", "Architectures", "Platforms", "Run end to end", "Gate"]
    return _table(
        [
            *header,
            "State on attention",
            "Role-split model in this build",
            "Checkpoints",
            "Notes",
        ],
        rows,
    )


PLATFORM_NAMES = {"cpu": "CPU", "cuda": "CUDA (NVIDIA GPUs)", "npu": "Ascend NPU"}


def status_table() -> str:
    """What runs where: per platform, its connectors, the model families with
    a role-split model there, and whether this repository's CI runs it."""
    rows = []
    for platform, name in PLATFORM_NAMES.items():
        specs = [s for s in AFDConnectorFactory.specs() if s.platform == platform]
        families = [
            fam.family
            for fam in MODEL_FAMILIES
            if platform in fam.platforms
            and any(fam.in_build(a) for a in fam.architectures)
        ]
        if platform in CI_PLATFORMS:
            status = "runs end to end in CI, through real vLLM"
        elif any(s.cpu_reference for s in specs):
            status = (
                "built to the contract; its connectors' reference ops run in CI "
                "on the CPU; no hardware run yet"
            )
        else:
            status = (
                "built to the contract; tested on the CPU where no device is "
                "needed; no hardware run yet"
            )
        rows.append([name, _code(s.name for s in specs), ", ".join(families), status])
    return _table(["Platform", "Connectors", "Models", "Status"], rows)


def feature_table() -> str:
    rows = []
    for feature in SERVING_FEATURES:
        if feature.works:
            note = f"; {feature.reason}" if feature.reason else ""
            said = f"`{feature.evidence}`{note}"
        else:
            said = feature.reason
        rows.append(
            [
                feature.name,
                _code(feature.flags) or "(none)",
                "works: parity-tested in CI" if feature.works else "refused at start",
                said,
            ]
        )
    return _table(["Feature", "Flags", "Under AFD", "Evidence or reason"], rows)


def _type_name(annotation: object) -> str:
    if get_origin(annotation) is Literal:
        return " | ".join(f"`{a}`" for a in get_args(annotation))
    return getattr(annotation, "__name__", None) or str(annotation)


def config_table() -> str:
    rows = []
    inverse = {v: k for k, v in ALIASES.items()}
    for name, field in AFDConfig.model_fields.items():
        default = (
            "required"
            if field.is_required()
            else f"`{field.get_default(call_default_factory=True)!r}`"
        )
        alias = f"`{inverse[name]}`" if name in inverse else ""
        rows.append(
            [
                f"`{name}`",
                _type_name(field.annotation),
                default,
                alias,
                field.description or "",
            ]
        )
    return _table(["Field", "Type", "Default", "Alias", "Meaning"], rows)


@dataclass(frozen=True)
class Generated:
    """One generated block: which file, which marker name, how to build it."""

    path: str
    name: str
    build: Callable[[], str]


def begin(name: str) -> str:
    return f"<!-- afd-e2e:begin {name} (generated by `afd-e2e docs --write`) -->"


def end(name: str) -> str:
    return f"<!-- afd-e2e:end {name} -->"


def replace_block(text: str, name: str, content: str) -> str:
    pattern = re.compile(re.escape(begin(name)) + r".*?" + re.escape(end(name)), re.S)
    if not pattern.search(text):
        raise KeyError(f"markers for '{name}' not found")
    return pattern.sub(
        lambda _: f"{begin(name)}\n{content}\n{end(name)}", text, count=1
    )


def env_table() -> str:
    rows = [
        [f"`{v.name}`", "unset" if v.default is None else f"`{v.default}`", v.doc]
        for v in ENV_VARS.values()
    ]
    return _table(["Variable", "Default", "Meaning"], rows)


def core_blocks() -> list[Generated]:
    return [
        Generated("README.md", "status", status_table),
        Generated("docs/index.md", "status", status_table),
        Generated("docs/configuration.md", "config", config_table),
        Generated("docs/connectors.md", "connectors", connector_table),
        Generated("docs/models.md", "models", model_table),
        Generated("docs/features.md", "features", feature_table),
        Generated("docs/configuration.md", "envs", env_table),
        Generated("docs/metrics.md", "metrics", metrics_table),
    ]


def stale_blocks(root: Path, blocks: Iterable[Generated]) -> list[str]:
    """``file:line: message`` for every generated block that is out of date."""
    problems = []
    for block in blocks:
        path = root / block.path
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        try:
            updated = replace_block(text, block.name, block.build())
        except KeyError:
            problems.append(
                f"{block.path}:1: missing generated block '{block.name}'; add the "
                f"lines '{begin(block.name)}' and '{end(block.name)}', then run "
                "`afd-e2e docs --write`"
            )
            continue
        if updated != text:
            line = text[: text.index(begin(block.name))].count("\n") + 1
            problems.append(
                f"{block.path}:{line}: generated block '{block.name}' is out of date; "
                "run `afd-e2e docs --write`"
            )
    return problems


def write_blocks(root: Path, blocks: Iterable[Generated]) -> list[str]:
    changed = []
    for block in blocks:
        path = root / block.path
        text = path.read_text(encoding="utf-8")
        updated = replace_block(text, block.name, block.build())
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            changed.append(f"{block.path} ({block.name})")
    return changed


def scenario_table(root: Path) -> str:
    """Every scenario with its tier, shape and the CI lists that run it."""
    from afd_e2e.define.catalogue import Catalogue
    from afd_e2e.publish.gates import discover_lists, read_list

    scenarios = Catalogue.load(root).scenarios()
    runs: dict[str, list[str]] = {}
    for rel in discover_lists(root):
        for sid in sorted(read_list(root, rel).ids()):
            runs.setdefault(sid, []).append(rel.removeprefix("ci/"))
    rows = []
    for sid, s in scenarios.items():
        checks = []
        if s.checks.parity:
            checks.append("parity")
        if s.checks.gsm8k:
            g = s.checks.gsm8k
            checks.append(f"gsm8k n={g.samples} >= {g.threshold} c={g.concurrency}")
        if s.checks.dual_ubatch_evidence:
            checks.append("dual-ubatch evidence")
        if s.checks.ffn_failover:
            f = s.checks.ffn_failover
            checks.append(
                f"ffn failover {f.kills} kill(s), {s.standbys} standby, "
                f"expect {f.expect}"
            )
        rows.append(
            [
                f"`{sid}`",
                s.backend,
                s.tier,
                s.shape,
                s.connector.name if s.connector else "(colocated)",
                s.model_runner,
                s.graph.mode,
                "yes" if s.dbo.enabled else "",
                "; ".join(checks),
                ", ".join(runs.get(sid, [])) or "(none)",
            ]
        )
    return _table(
        [
            "Scenario",
            "Backend",
            "Tier",
            "Shape",
            "Connector",
            "Runner",
            "Graph",
            "DBO",
            "Checks",
            "CI lists",
        ],
        rows,
    )


BENCH_RESULTS = "benchmarks/results"
"""Where ``afd-e2e bench`` results worth keeping are committed."""


def _bench_rows(data: dict) -> list[tuple[str, dict, dict]]:
    """(concurrency, colocated, AFD) figures of one saved ``afd-e2e bench``
    result: ``bench.json`` (``results``) or ``bench-summary.json``
    (``by_concurrency``), the two files a bench run writes."""
    if "by_concurrency" in data:
        return [
            (c, r["colocated"], r["afd"]) for c, r in data["by_concurrency"].items()
        ]
    results = data["results"]
    return [(c, results["colocated"][c], results["afd"][c]) for c in results["afd"]]


def bench_table(root: Path) -> str:
    """Every committed ``afd-e2e bench`` result: AFD against colocated vLLM."""
    import json

    rows = []
    for path in sorted((root / BENCH_RESULTS).glob("bench_*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        options = data["options"]
        for concurrency, colocated, afd in _bench_rows(data):
            rows.append(
                [
                    f"`{path.name}`",
                    f"`{data['scenario']}`",
                    f"{options['input_len']}/{options['output_len']}",
                    concurrency,
                    f"{colocated['output_throughput']:.0f}",
                    f"{afd['output_throughput']:.0f}",
                    f"{afd['output_throughput'] / colocated['output_throughput']:.2f}",
                    f"{afd['p50_tpot_ms'] / colocated['p50_tpot_ms']:.2f}",
                    data.get("machine", "(not recorded)"),
                ]
            )
    return _table(
        [
            "Result",
            "Scenario",
            "In/out tokens",
            "Concurrency",
            "Colocated tok/s",
            "AFD tok/s",
            "AFD/colocated tok/s",
            "AFD/colocated TPOT p50",
            "Machine",
        ],
        rows,
    )


FAILOVER_RESULT = "benchmarks/results/failover.json"


def failover_table(root: Path) -> str:
    """The committed ``benchmarks/failover.py`` result: per failover, the
    stall, the step time of the same run and where the stall went."""
    import json

    path = root / FAILOVER_RESULT
    if not path.exists():
        return "(no failover result committed yet)"
    data = json.loads(path.read_text(encoding="utf-8"))
    rounds = data["rounds"]
    header = [
        "",
        *(f"failover {i} (killed {r['killed']})" for i, r in enumerate(rounds, 1)),
    ]
    rows = [
        [
            "step: median gap between tokens (ms)",
            *(f"{r['step_ms']:.1f}" for r in rounds),
        ],
        [
            "stall: largest gap between tokens after the kill (ms)",
            *(f"{r['stall_ms']:.1f}" for r in rounds),
        ],
        ["stall / step", *(f"{r['stall_over_step']:.1f}x" for r in rounds)],
    ]
    rows += [  # the parts in the order the benchmark wrote them
        [f"- {part} (ms)", *(f"{r['parts_ms'][part]:.1f}" for r in rounds)]
        for part in rounds[0]["parts_ms"]
    ]
    rows.append(
        [
            "streams completed",
            *(f"{r['completed']}/{data['concurrency']}" for r in rounds),
        ]
    )
    return (
        _table(header, rows)
        + f"\n\n{data['machine']}; {data['concurrency']} streams of "
        f"{data['max_tokens']} tokens."
    )


def ci_step_example(root: Path) -> str:
    """The step ``afd-e2e ci render`` writes for the first PR-gate scenario
    (by id): what a Buildkite user's pipeline runs."""
    from afd_e2e.define.catalogue import Catalogue
    from afd_e2e.publish.gates import step_text

    scenarios = Catalogue.load(root).scenarios()
    gated = sorted(sid for sid, s in scenarios.items() if s.tier == "pr")
    if not gated:
        return "(no scenario is in a PR gate yet)"
    return "```yaml\n" + step_text(gated[0], scenarios[gated[0]]) + "\n```"


def scenario_blocks(root: Path) -> list[Generated]:
    build = lambda: scenario_table(root)  # noqa: E731
    return [
        Generated("docs/design/e2e_testing.md", "scenarios", build),
        Generated("tests/e2e/README.md", "scenarios", build),
        Generated("docs/harness/ci.md", "ci-step", lambda: ci_step_example(root)),
        Generated("docs/benchmarks.md", "bench-results", lambda: bench_table(root)),
        Generated("docs/benchmarks.md", "failover", lambda: failover_table(root)),
    ]


def all_blocks(root: Path) -> list[Generated]:
    return core_blocks() + scenario_blocks(root)
