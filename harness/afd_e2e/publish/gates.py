# SPDX-License-Identifier: Apache-2.0
"""CI gate lists under ``ci/``: reading them, rendering them from scenario
tiers, and the linter that keeps them symmetric and honest (AFD-I12)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from afd_e2e.define import policy
from afd_e2e.define.scenario import TIER_RANK, Scenario
from afd_e2e.define.yamlpos import YamlDoc, load_file

RUN_RE = re.compile(r"afd-e2e\s+run\s+([A-Za-z0-9][\w.\-]*)")
NARROWING = ("-k", "-m", "--deselect", "--lf", "--last-failed")
NARROWING_WORDS = ("skip", "xfail")


def pr_lists(backend: str) -> tuple[str, str]:
    """The two PR-gate lists of a backend; a pr id must be in both."""
    return (f"ci/{backend}/test-ready.yml", f"ci/{backend}/test-merge.yml")


NIGHTLY_LIST = "ci/nightly.yml"
WEEKLY_LIST = "ci/weekly.yml"
# The one list of each scheduled tier, every backend together.
SCHEDULED_LISTS = {"nightly": NIGHTLY_LIST, "weekly": WEEKLY_LIST}
LIST_TIER = {
    "test-ready.yml": "pr",
    "test-merge.yml": "pr",
    "nightly.yml": "nightly",
    "weekly.yml": "weekly",
}

QUEUES = {"cuda": "gpu_4", "npu": "npu_a3", "cpu": "cpu"}


@dataclass
class GateRef:
    """One scenario run by one step of one list."""

    scenario_id: str
    line: int
    text: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class GateList:
    """One CI list file as read."""

    path: str
    tier: str
    doc: YamlDoc
    refs: list[GateRef] = field(default_factory=list)
    commands: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)

    def ids(self) -> set[str]:
        return {r.scenario_id for r in self.refs}


def _env_of(mapping: Any) -> dict[str, str]:
    if not isinstance(mapping, dict):
        return {}
    return {str(k): str(v) for k, v in mapping.items()}


def _walk_steps(
    doc: YamlDoc, steps: Any, path: tuple, env: dict[str, str], out: GateList
):
    if not isinstance(steps, list):
        return
    for index, step in enumerate(steps):
        here = (*path, index)
        if not isinstance(step, dict):
            continue
        step_env = {**env, **_env_of(step.get("env"))}
        if "steps" in step:  # a group step
            _walk_steps(doc, step["steps"], (*here, "steps"), step_env, out)
            continue
        for key in ("command", "commands"):
            value = step.get(key)
            items = value if isinstance(value, list) else [value]
            for i, cmd in enumerate(items):
                if not isinstance(cmd, str):
                    continue
                sub = (*here, key, i) if isinstance(value, list) else (*here, key)
                line = doc.where(sub)[0]
                out.commands.append((line, cmd, step_env))
                for match in RUN_RE.finditer(cmd):
                    # The run itself, not the shell around it (the summary's
                    # annotation after the ';').
                    text = cmd[match.start() :].split(";", 1)[0].strip()
                    out.refs.append(GateRef(match.group(1), line, text, step_env))


def read_list(root: Path, rel: str) -> GateList:
    doc = load_file(root / rel, rel)
    gate = GateList(path=rel, tier=LIST_TIER.get(Path(rel).name, "weekly"), doc=doc)
    data = doc.data if isinstance(doc.data, dict) else {}
    _walk_steps(doc, data.get("steps"), ("steps",), _env_of(data.get("env")), gate)
    return gate


def discover_lists(root: Path) -> list[str]:
    ci = root / "ci"
    if not ci.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in ci.rglob("*.yml"))


def step_text(scenario_id: str, scenario: Scenario) -> str:
    """The canonical step for one scenario (what ``ci render`` writes)."""
    step = render_step(scenario_id, scenario)
    return yaml.safe_dump([step], sort_keys=False, width=100).rstrip()


CLUSTER_QUEUES = {"cuda": "gpu_cluster", "npu": "npu_cluster", "cpu": "cpu"}
"""Agents of a multi-node scenario: a machine attached to a Ray cluster whose
workers offer the scenario's ``afd-node-<name>`` resources."""


RUN_DIR = "afd-runs/{scenario_id}"
"""Where a rendered step's run writes: uploaded as the step's artifacts."""
ARTIFACTS = ("results.json", "junit.xml", "summary.md", "*.log")
"""The run directory's files a Buildkite user opens: the record, the JUnit
report, the Markdown summary and every role's log."""


def render_step(scenario_id: str, s: Scenario) -> dict[str, Any]:
    """One Buildkite step: the scenario's run, its summary posted as an
    annotation when the agent is there (whatever the outcome; the step keeps
    the run's exit code), its run directory uploaded as artifacts."""
    minutes = int((s.timeouts.startup_s + s.timeouts.checks_s) / 60) + 15
    key = "e2e-" + re.sub(r"[^a-z0-9-]", "-", scenario_id.lower())
    run_dir = RUN_DIR.format(scenario_id=scenario_id)
    run = (
        f'afd-e2e run {scenario_id} --model-root "$$AFD_MODEL_ROOT" --run-dir {run_dir}'
    )
    queue = QUEUES[s.backend]
    if len(s.nodes) > 1:  # placed on several machines: through their Ray cluster
        run += ' --engine ray --ray-address "$$AFD_RAY_ADDRESS"'
        queue = CLUSTER_QUEUES[s.backend]
    annotate = (
        f"if command -v buildkite-agent >/dev/null && [ -f {run_dir}/summary.md ]; "
        f"then buildkite-agent annotate --context {key} --style "
        '"$$([ $$status -eq 0 ] && echo success || echo error)" '
        f"< {run_dir}/summary.md; fi"
    )
    return {
        "label": f"e2e {scenario_id} ({s.shape})",
        "key": key,
        "command": f"{run}; status=$$?; {annotate}; exit $$status",
        "artifact_paths": [f"{run_dir}/{name}" for name in ARTIFACTS],
        "agents": {"queue": queue},
        "timeout_in_minutes": minutes,
        "retry": {"automatic": False},
    }


HEADERS = {
    "pr": (
        "# {path}: PR gate for {backend} ({which}). Generated by `afd-e2e ci render`;\n"
        "# hand edits are allowed and `afd-e2e lint` decides. Every pr scenario is in\n"
        "# both test-ready.yml and test-merge.yml. Keys: label (shown in Buildkite),\n"
        "# key (stable step id), command (one scenario per step, never narrowed),\n"
        "# agents.queue (a {backend} machine), timeout_in_minutes (startup + checks +\n"
        "# 15 min), retry.automatic false (a retry would hide a flaky failure).\n"
    ),
    "nightly": (
        "# {path}: nightly gate, every backend (the multi-node hardware\n"
        "# scenarios). Generated by `afd-e2e ci render`; hand edits are allowed and\n"
        "# `afd-e2e lint` decides. Every nightly scenario is here once and nothing\n"
        "# else is: pr and weekly scenarios run in their own lists. Keys as in the\n"
        "# PR lists.\n"
    ),
    "weekly": (
        "# {path}: weekly gate, every backend. Generated by `afd-e2e ci render`;\n"
        "# hand edits are allowed and `afd-e2e lint` decides. Keys as in the PR\n"
        "# lists.\n"
    ),
}
EMPTY_NOTE = (
    "# No scenario is {tier} yet: the pipeline has no steps (Buildkite's schema\n"
    "# allows `steps: []`).\n"
)


def render_lists(scenarios: dict[str, Scenario]) -> dict[str, str]:
    """Every CI list file, rendered from the scenarios' tiers."""
    files: dict[str, str] = {}
    backends = sorted({s.backend for s in scenarios.values() if s.tier == "pr"})
    for backend in backends:
        ids = [
            i
            for i, s in sorted(scenarios.items())
            if s.tier == "pr" and s.backend == backend
        ]
        steps = [render_step(i, scenarios[i]) for i in ids]
        for rel, which in zip(pr_lists(backend), ("ready", "merge"), strict=True):
            header = HEADERS["pr"].format(path=rel, backend=backend, which=which)
            files[rel] = header + yaml.safe_dump(
                {"steps": steps}, sort_keys=False, width=100
            )
    for tier, rel in SCHEDULED_LISTS.items():
        steps = [
            render_step(i, s) for i, s in sorted(scenarios.items()) if s.tier == tier
        ]
        header = HEADERS[tier].format(path=rel)
        if not steps:
            header += EMPTY_NOTE.format(tier=tier)
        files[rel] = header + yaml.safe_dump(
            {"steps": steps}, sort_keys=False, width=100
        )
    return files


def tier_lists(s: Scenario) -> tuple[str, ...]:
    """The lists that run ``s``; no other list may (none for ``local``)."""
    if s.tier == "pr":
        return pr_lists(s.backend)
    if s.tier in SCHEDULED_LISTS:
        return (SCHEDULED_LISTS[s.tier],)
    return ()


def _narrowing(cmd: str) -> str | None:
    try:
        tokens = shlex.split(cmd)
    except ValueError:
        tokens = cmd.split()
    for token in tokens:
        flag = token.split("=", 1)[0]
        if flag in NARROWING:
            return flag
        lowered = token.lower()
        if any(word in lowered for word in NARROWING_WORDS):
            return token
    return None


def _inline_env(cmd: str) -> dict[str, str]:
    return dict(re.findall(r"\b(AFD_GSM8K_\w+)=(\S+)", cmd))


def lint_lists(
    root: Path, scenarios: dict[str, Scenario], positions: dict[str, str]
) -> list[str]:
    """``file:line: message`` for every gate-list problem.

    ``positions`` maps scenario id -> ``scenarios/<backend>/<id>.yaml`` for
    messages about scenarios themselves.
    """
    problems: list[str] = []
    lists = {rel: read_list(root, rel) for rel in discover_lists(root)}
    for gate in lists.values():
        problems += [str(e) for e in gate.doc.errors]
        problems += _lint_commands(gate, scenarios)
        first_line: dict[str, int] = {}
        for ref in gate.refs:
            if ref.scenario_id in first_line:
                problems.append(
                    f"{gate.path}:{ref.line}: '{ref.scenario_id}' already runs at "
                    f"line {first_line[ref.scenario_id]}; remove the line "
                    f"'{ref.text}' (a list runs a scenario once)"
                )
                continue
            first_line[ref.scenario_id] = ref.line
            s = scenarios.get(ref.scenario_id)
            if s is None and ref.scenario_id in positions:
                continue  # the scenario exists but is invalid: reported on its own
            if s is None:
                problems.append(
                    f"{gate.path}:{ref.line}: '{ref.scenario_id}' has no scenario "
                    "file; "
                    f"remove the line '{ref.text}' or add "
                    f"scenarios/<backend>/{ref.scenario_id}.yaml"
                )
                continue
            if TIER_RANK[s.tier] < TIER_RANK[gate.tier]:
                problems.append(
                    f"{gate.path}:{ref.line}: '{ref.scenario_id}' is tier {s.tier}, "
                    f"which never runs in a {gate.tier} list; remove the line "
                    f"'{ref.text}' (a list never promotes a scenario)"
                )
            elif s.tier != gate.tier:  # a more frequent tier: it already runs
                where = "the PR lists" if s.tier == "pr" else SCHEDULED_LISTS[s.tier]
                problems.append(
                    f"{gate.path}:{ref.line}: '{ref.scenario_id}' is a {s.tier} "
                    f"scenario and runs in {where}; remove the line '{ref.text}'"
                )
            elif gate.path not in tier_lists(s):  # another backend's, or stray
                problems.append(
                    f"{gate.path}:{ref.line}: '{ref.scenario_id}' runs in "
                    f"{' and '.join(tier_lists(s))}, not here; remove the line "
                    f"'{ref.text}'"
                )
    problems += _lint_symmetry(lists, scenarios, positions)
    return problems


def _lint_commands(gate: GateList, scenarios: dict[str, Scenario]) -> list[str]:
    problems = []
    for line, cmd, env in gate.commands:
        merged = {**env, **_inline_env(cmd)}
        ids = [m.group(1) for m in RUN_RE.finditer(cmd)]
        if policy.GSM8K_LIMIT_ENV in merged:
            problems.append(
                f"{gate.path}:{line}: sets {policy.GSM8K_LIMIT_ENV}; a gate runs every "
                f"sample: remove {policy.GSM8K_LIMIT_ENV}="
                f"{merged[policy.GSM8K_LIMIT_ENV]}"
            )
        if policy.GSM8K_THRESHOLD_ENV in merged:
            raw = merged[policy.GSM8K_THRESHOLD_ENV]
            try:
                value = float(raw)
            except ValueError:
                value = float("-inf")
            for sid in ids:
                s = scenarios.get(sid)
                if s is None or s.checks.gsm8k is None:
                    continue
                if value < s.checks.gsm8k.threshold:
                    problems.append(
                        f"{gate.path}:{line}: {policy.GSM8K_THRESHOLD_ENV}={raw} is "
                        "below "
                        f"'{sid}' threshold {s.checks.gsm8k.threshold}; remove it"
                    )
        narrowed = _narrowing(cmd)
        if narrowed is not None:
            problems.append(
                f"{gate.path}:{line}: '{narrowed}' narrows what the gate runs; "
                "remove it "
                f"from '{cmd.strip()}'"
            )
    return problems


def _lint_symmetry(
    lists: dict[str, GateList],
    scenarios: dict[str, Scenario],
    positions: dict[str, str],
) -> list[str]:
    problems = []
    for sid, s in sorted(scenarios.items()):
        if s.tier == "pr":
            ready, merge = pr_lists(s.backend)
            present = {
                rel: lists[rel].ids() if rel in lists else set()
                for rel in (ready, merge)
            }
            inside = [rel for rel, ids in present.items() if sid in ids]
            step = step_text(sid, s)
            if not inside:
                problems.append(
                    f"{positions[sid]}:1: pr scenario '{sid}' is in no PR list; "
                    "add this "
                    f"step to {ready} and {merge} (or change its tier):\n{step}"
                )
            elif len(inside) == 1:
                other = merge if inside[0] == ready else ready
                ref = next(r for r in lists[inside[0]].refs if r.scenario_id == sid)
                problems.append(
                    f"{other}:1: pr scenario '{sid}' is in {inside[0]}:{ref.line} "
                    "but not "
                    f"here; add this step:\n{step}"
                )
        elif s.tier in SCHEDULED_LISTS:
            rel = SCHEDULED_LISTS[s.tier]
            gate = lists.get(rel)
            if gate is None or sid not in gate.ids():
                problems.append(
                    f"{positions[sid]}:1: {s.tier} scenario '{sid}' is in no list; "
                    "add this "
                    f"step to {rel} (or make it local):\n{step_text(sid, s)}"
                )
    return problems


def _deepest(err: Any) -> Any:
    """Inside anyOf/oneOf, the error of the alternative the value nearly matched:
    one whose errors all sit below the value (its shape matched), fewest first."""
    import jsonschema.exceptions

    while err.context:
        depth = len(err.absolute_path)
        branches: dict[Any, list[Any]] = {}
        for sub in err.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        near = [
            errs
            for errs in branches.values()
            if all(len(e.absolute_path) > depth for e in errs)
        ]
        if near:
            err = min(near, key=len)[0]
        else:
            err = jsonschema.exceptions.best_match(err.context)
    return err


def schema_problems(root: Path, schema_path: Path, rels: Iterable[str]) -> list[str]:
    """Check list files against Buildkite's official pipeline JSON schema."""
    import json

    import jsonschema

    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    problems = []
    for rel in rels:
        doc = load_file(root / rel, rel)
        if doc.data is None:
            continue
        for top in sorted(validator.iter_errors(doc.data), key=lambda e: list(e.path)):
            err = _deepest(top)
            line = doc.where(tuple(err.absolute_path))[0]
            where = ".".join(str(p) for p in err.absolute_path) or "(top)"
            problems.append(
                f"{rel}:{line}: Buildkite schema: {where}: {err.message[:200]}"
            )
    return problems
