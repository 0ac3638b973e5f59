# SPDX-License-Identifier: Apache-2.0
"""Tiers and their CI lists on generated scenario trees: ``ci render`` writes
``ci/nightly.yml`` beside the PR and weekly lists, and ``lint`` holds it to
the same rules (every nightly scenario there once, nothing else there)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lint_repo import edit, line_of

from afd_e2e.cli import main
from afd_e2e.publish.doc_tables import begin, core_blocks, end, scenario_blocks

READY = "ci/cuda/test-ready.yml"
MERGE = "ci/cuda/test-merge.yml"
NIGHTLY = "ci/nightly.yml"
WEEKLY = "ci/weekly.yml"

CUDA = """\
schema_version: 1
description: {sid}
backend: cuda
tier: {tier}
model:
  hub_id: deepseek-ai/DeepSeek-V2-Lite
  architecture: DeepseekV2ForCausalLM
connector:
  name: P2pNcclAFDConnector
topology:
  attention: {{dp: {a}, tp: 1, ep: true, devices: {a_devices}}}
  ffn: {{dp: {f}, tp: 1, ep: true, devices: {f_devices}}}
checks:
  gsm8k: {{samples: 200, threshold: 0.30, concurrency: 8, fewshot: 8}}
"""
NPU = """\
schema_version: 1
description: {sid}
backend: npu
tier: {tier}
model:
  hub_id: deepseek-ai/DeepSeek-V2-Lite
  architecture: DeepseekV2ForCausalLM
connector:
  name: CAMP2pAFDConnector
  extra: {{compute_gate_on_attention: false}}
compute_gate_on_attention: false
topology:
  attention: {{dp: {a}, tp: 1, ep: true, devices: {a_devices}}}
  ffn: {{dp: {f}, tp: 1, ep: true, devices: {f_devices}}}
checks:
  gsm8k: {{samples: 200, threshold: 0.30, concurrency: 8, fewshot: 8}}
"""
# id -> (backend, tier, attention ranks, FFN ranks). The nightly ones are
# larger than a pr scenario may be (8 devices; 2A1F).
WITH_NIGHTLY = {
    "pr-2a2f": ("cuda", "pr", 2, 2),
    "nightly-4a4f": ("cuda", "nightly", 4, 4),
    "nightly-npu-2a1f": ("npu", "nightly", 2, 1),
    "weekly-2a1f": ("cuda", "weekly", 2, 1),
    "local-2a1f": ("cuda", "local", 2, 1),
}
NO_NIGHTLY = {k: v for k, v in WITH_NIGHTLY.items() if v[1] != "nightly"}
DOCS: dict[str, tuple[str, ...]] = {}
for _block in [*core_blocks(), *scenario_blocks(Path("."))]:
    DOCS[_block.path] = (*DOCS.get(_block.path, ()), _block.name)


def make_tree(root: Path, scenarios: dict[str, tuple[str, str, int, int]]) -> Path:
    """A repository with these scenarios, its CI lists rendered and its
    generated tables written: clean for ``afd-e2e lint``."""
    (root / "pyproject.toml").parent.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'tree'\n")
    for sid, (backend, tier, a, f) in scenarios.items():
        body = (CUDA if backend == "cuda" else NPU).format(
            sid=sid,
            tier=tier,
            a=a,
            f=f,
            a_devices=list(range(a)),
            f_devices=list(range(a, a + f)),
        )
        path = root / "scenarios" / backend / f"{sid}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    for rel, names in DOCS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{begin(n)}\n{end(n)}\n" for n in names))
    assert main(["ci", "render", "--root", str(root)]) == 0
    assert main(["docs", "--write", "--root", str(root)]) == 0
    return root


def lint(root: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["lint", "--root", str(root), *extra])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def step_of(path: Path, sid: str) -> str:
    """Remove the step that runs ``sid`` from ``path`` and return it."""
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if f"e2e {sid} (" in line)
    end = start + 1
    while end < len(lines) and not lines[end].startswith("- "):
        end += 1
    path.write_text("".join(lines[:start] + lines[end:]))
    return "".join(lines[start:end])


def command(sid: str) -> str:
    """The run a rendered step starts (before its annotation)."""
    return f'afd-e2e run {sid} --model-root "$$AFD_MODEL_ROOT" --run-dir afd-runs/{sid}'


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "repo", WITH_NIGHTLY)


@pytest.mark.parametrize(
    "scenarios", [WITH_NIGHTLY, NO_NIGHTLY], ids=["nightly", "no-nightly"]
)
def test_rendered_lists_pass_the_linter(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, scenarios: dict
) -> None:
    monkeypatch.delenv("AFD_BUILDKITE_SCHEMA", raising=False)  # the next test's
    root = make_tree(tmp_path / "repo", scenarios)
    ok = f"afd-e2e lint: ok ({len(scenarios)} scenarios, 4 CI lists)\n"
    assert lint(root, capsys) == (0, ok)
    assert main(["ci", "render", "--check", "--root", str(root)]) == 0
    nightly = (root / NIGHTLY).read_text()
    runs = [
        line.split(";", 1)[0] for line in nightly.splitlines() if "command: " in line
    ]
    if scenarios is WITH_NIGHTLY:  # each nightly scenario once, in id order
        assert runs == [
            f"  command: {command('nightly-4a4f')}",
            f"  command: {command('nightly-npu-2a1f')}",
        ]
        assert "queue: npu_a3" in nightly and "queue: gpu_4" in nightly
    else:
        assert runs == []
        assert nightly.endswith(
            "# No scenario is nightly yet: the pipeline has no "
            "steps (Buildkite's schema\n# allows `steps: []`).\n"
            "steps: []\n"
        )
    for rel in (READY, MERGE, WEEKLY):  # nightly scenarios run nowhere else
        assert "nightly-" not in (root / rel).read_text()


# Where Buildkite's official schema is absent (it is on CI machines: .ci/run
# sets AFD_BUILDKITE_SCHEMA), the part of it an empty list could break: a
# mapping whose steps are an array.
MINIMAL_SCHEMA = (
    '{"type": "object", "required": ["steps"], "properties": '
    '{"steps": {"type": "array", "items": {"type": "object"}}}}'
)


@pytest.mark.parametrize(
    "scenarios", [WITH_NIGHTLY, NO_NIGHTLY], ids=["nightly", "no-nightly"]
)
def test_rendered_lists_pass_buildkites_schema(
    tmp_path: Path, capsys, scenarios: dict
) -> None:
    root = make_tree(tmp_path / "repo", scenarios)
    schema = Path(os.environ.get("AFD_BUILDKITE_SCHEMA", "/nonexistent"))
    if not schema.exists():
        schema = tmp_path / "schema.json"
        schema.write_text(MINIMAL_SCHEMA)
    code, out = lint(root, capsys, "--buildkite-schema", str(schema))
    checked = f"{len(scenarios)} scenarios, 4 CI lists, Buildkite schema"
    assert (code, out) == (0, f"afd-e2e lint: ok ({checked})\n")


def test_nightly_scenario_missing_from_the_nightly_list(tree: Path, capsys) -> None:
    step_of(tree / NIGHTLY, "nightly-npu-2a1f")
    code, out = lint(tree, capsys)
    assert code == 1
    assert (
        "scenarios/npu/nightly-npu-2a1f.yaml:1: nightly scenario 'nightly-npu-2a1f' "
        f"is in no list; add this step to {NIGHTLY} (or make it local):\n"
        "- label: e2e nightly-npu-2a1f (2A1F)\n"
    ) in out
    assert f"  command: {command('nightly-npu-2a1f')}" in out
    assert "  - afd-runs/nightly-npu-2a1f/results.json\n" in out


def test_a_missing_nightly_list_is_reported_per_scenario(tree: Path, capsys) -> None:
    (tree / NIGHTLY).unlink()
    code, out = lint(tree, capsys)
    assert code == 1
    for sid in ("nightly-4a4f", "nightly-npu-2a1f"):
        assert f"nightly scenario '{sid}' is in no list; add this step to" in out


def test_nightly_scenario_in_the_weekly_list(tree: Path, capsys) -> None:
    """weekly does not repeat nightly: it already runs every night."""
    with (tree / WEEKLY).open("a") as fh:
        fh.write(step_of(tree / NIGHTLY, "nightly-4a4f"))
    code, out = lint(tree, capsys)
    line = line_of(tree / WEEKLY, "afd-e2e run nightly-4a4f ")
    assert code == 1
    assert (
        f"{WEEKLY}:{line}: 'nightly-4a4f' is a nightly scenario and runs in "
        f"{NIGHTLY}; remove the line '{command('nightly-4a4f')}'"
    ) in out
    assert "nightly scenario 'nightly-4a4f' is in no list" in out


def test_nightly_scenario_in_the_pr_lists_is_not_promoted(tree: Path, capsys) -> None:
    step = step_of(tree / NIGHTLY, "nightly-4a4f")
    for rel in (READY, MERGE):
        with (tree / rel).open("a") as fh:
            fh.write(step)
    code, out = lint(tree, capsys)
    assert code == 1
    for rel in (READY, MERGE):
        line = line_of(tree / rel, "afd-e2e run nightly-4a4f ")
        assert (
            f"{rel}:{line}: 'nightly-4a4f' is tier nightly, which never runs in a pr "
            f"list; remove the line '{command('nightly-4a4f')}' (a list never "
            "promotes a scenario)"
        ) in out


@pytest.mark.parametrize(
    ("sid", "message"),
    [
        ("pr-2a2f", "is a pr scenario and runs in the PR lists; remove the line"),
        ("weekly-2a1f", "is tier weekly, which never runs in a nightly list;"),
        ("local-2a1f", "is tier local, which never runs in a nightly list;"),
        ("nightly-4a4f", "already runs at line {first}; remove the line"),
    ],
)
def test_nothing_else_in_the_nightly_list(
    tree: Path, capsys, sid: str, message: str
) -> None:
    if sid == "nightly-4a4f":
        message = message.format(first=line_of(tree / NIGHTLY, command(sid)))
    with (tree / NIGHTLY).open("a") as fh:
        fh.write(f"- label: extra\n  command: {command(sid)}\n")
    code, out = lint(tree, capsys)
    line = len((tree / NIGHTLY).read_text().splitlines())
    assert code == 1
    assert f"{NIGHTLY}:{line}: '{sid}' {message}" in out


@pytest.mark.parametrize(
    ("rel", "sid", "own"),
    [
        ("ci/npu/test-ready.yml", "pr-2a2f", f"{READY} and {MERGE}"),
        ("ci/cuda/nightly.yml", "nightly-4a4f", NIGHTLY),
        ("ci/extra.yml", "weekly-2a1f", WEEKLY),
    ],
)
def test_a_same_tier_list_elsewhere_is_not_its_list(
    tree: Path, capsys, rel: str, sid: str, own: str
) -> None:
    """Another backend's PR list or a second file of the tier's name: the
    scenario still runs in its own lists only."""
    (tree / rel).parent.mkdir(parents=True, exist_ok=True)
    (tree / rel).write_text(f"steps:\n- label: extra\n  command: {command(sid)}\n")
    code, out = lint(tree, capsys)
    assert code == 1
    assert (
        f"{rel}:3: '{sid}' runs in {own}, not here; remove the line '{command(sid)}'"
    ) in out


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "afd-e2e run nightly-4a4f ",
            "afd-e2e run nightly-4a4f -k graph ",
            "'-k' narrows what the gate runs; remove it",
        ),
        (
            "  command: afd-e2e run nightly-4a4f ",
            "  env: {AFD_GSM8K_LIMIT: '10'}\n  command: afd-e2e run nightly-4a4f ",
            "sets AFD_GSM8K_LIMIT; a gate runs every sample: remove",
        ),
        (
            "command: afd-e2e run nightly-4a4f ",
            "command: AFD_GSM8K_THRESHOLD=0.1 afd-e2e run nightly-4a4f ",
            "AFD_GSM8K_THRESHOLD=0.1 is below 'nightly-4a4f' threshold 0.3; remove",
        ),
    ],
)
def test_the_nightly_list_is_never_narrowed(
    tree: Path, capsys, old: str, new: str, message: str
) -> None:
    edit(tree / NIGHTLY, old, new)
    code, out = lint(tree, capsys)
    line = line_of(tree / NIGHTLY, "afd-e2e run nightly-4a4f")
    assert code == 1
    assert f"{NIGHTLY}:{line}: {message}" in out


def test_render_restores_the_nightly_list(tree: Path, capsys) -> None:
    with (tree / WEEKLY).open("a") as fh:
        fh.write(step_of(tree / NIGHTLY, "nightly-npu-2a1f"))
    assert main(["ci", "render", "--check", "--root", str(tree)]) == 1
    assert main(["ci", "render", "--root", str(tree)]) == 0
    assert main(["docs", "--write", "--root", str(tree)]) == 0
    assert lint(tree, capsys)[0] == 0


def test_list_filters_the_nightly_tier(tree: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["list", "--tier", "nightly", "--json", "--root", str(tree)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["backend"]) for r in rows] == [
        ("nightly-4a4f", "cuda"),
        ("nightly-npu-2a1f", "npu"),
    ]
