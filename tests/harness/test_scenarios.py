# SPDX-License-Identifier: Apache-2.0
"""Scenario catalogue: ids from file names, extends resolution, list/show/validate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from lint_repo import ROOT, make_repo

from afd_e2e.cli import main
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.define.deployment import additional_config

CATALOGUE_IDS = {
    "cpu-dbo-1a1f",
    "baseline-graph",
    "afd-eager-2a2f",
    "afd-graph-2a2f",
    "afd-graph-dbo-2a2f",
    "afd-eager-2a1f",
    "afd-graph-2a1f",
    "afd-graph-dbo-2a1f",
    "afd-v2-eager-dp2",
    "afd-v2-eager-tp2",
    "afd-v2-graph-dp2",
    "afd-v2-graph-tp2",
    "qwen3-30b-a3b-afd-graph-2a1f",
    "qwen3.6-35b-a3b-afd-eager-2a1f",
    "qwen3.6-35b-a3b-afd-graph-2a1f",
    "npu-afd-eager-2a2f",
    "npu-afd-graph-2a2f",
    "afd-eager-async-cam",
    "afd-dsv4-flash-async-cam-dp2tp4-ep8",
    "cpu-eager-1a1f",
    "cpu-eager-2a1f",
    "cpu-eager-1a1f-qwen3",
    "cpu-eager-1a1f-qwen3-next",
    "cpu-eager-1a1f-qwen3.5",
    "cpu-eager-2a1f-qwen3.5",
    "cpu-dbo-1a1f-qwen3.5",
    "cpu-dbo-2a1f",
    "cpu-eager-2a1f-qwen3",
    "cpu-eager-1a1f-kimi-k2",
    "cpu-eager-1a1f-camp2p",
    "cpu-eager-1a1f-camasync",
    "cpu-eager-2a1f-camasync",
    "cpu-eager-1a1f-gate-attn",
    "cpu-2node-1a1f",
    "cpu-2node-2a1f",
    "cpu-2node-2a1f-split",
    "cpu-eager-1a1f-failover",
    "cpu-dbo-1a1f-failover",
    "cpu-eager-2a1f-failover",
    "cpu-2node-1a1f-failover",
    "cpu-eager-1a1f-failover-twice",
    "cpu-eager-1a1f-failover-exhausted",
    "afd-eager-3node-16a8f",
    "npu-afd-eager-4node-24a8f",
}


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return Catalogue.load(ROOT)


def test_catalogue_is_complete_and_valid(catalogue: Catalogue) -> None:
    assert catalogue.errors == []
    assert set(catalogue.scenarios()) == CATALOGUE_IDS


def test_tiers_follow_the_gate_rules(catalogue: Catalogue) -> None:
    scenarios = catalogue.scenarios()
    pr = {i for i, s in scenarios.items() if s.tier == "pr"}
    assert pr == {
        "baseline-graph",
        "afd-eager-2a2f",
        "afd-graph-2a2f",
        "afd-graph-dbo-2a2f",
        "afd-v2-eager-dp2",
        "afd-v2-eager-tp2",
        "afd-v2-graph-dp2",
        "afd-v2-graph-tp2",
    }
    assert all(scenarios[i].shape in ("2A2F", "colocated dp4tp1") for i in pr)
    assert scenarios["afd-eager-2a1f"].tier == "local"
    assert scenarios["afd-graph-dbo-2a1f"].tier == "weekly"
    marker = {i for i, s in scenarios.items() if s.teardown.sigkill == "marker-scan"}
    assert marker == {"afd-eager-async-cam", "afd-dsv4-flash-async-cam-dp2tp4-ep8"}


def test_extends_merges_mappings_and_replaces_lists(catalogue: Catalogue) -> None:
    base = catalogue.get("afd-eager-2a2f")
    dbo = catalogue.get("afd-graph-dbo-2a2f")
    assert dbo.model == base.model and dbo.connector == base.connector
    assert dbo.graph.mode == "FULL_DECODE_ONLY" and dbo.dbo.enabled
    assert "--enable-dbo" in dbo.roles.common.args
    assert dbo.roles.common.env == base.roles.common.env  # merged from the parent
    assert dbo.checks.gsm8k is not None and dbo.checks.gsm8k.concurrency == 12


def test_additional_config_matches_the_topology(catalogue: Catalogue) -> None:
    s = catalogue.get("afd-graph-2a1f")
    cfg = additional_config(s, "ffn", "127.0.0.1", 7000)["afd"]
    assert (cfg["num_attention_ranks"], cfg["num_ffn_ranks"]) == (2, 1)
    assert cfg["role"] == "ffn" and cfg["connector"] == "P2pNcclAFDConnector"


def test_show_prints_the_resolved_scenario(capsys) -> None:
    assert main(["show", "afd-graph-dbo-2a1f", "--root", str(ROOT)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["id"] == "afd-graph-dbo-2a1f"
    assert "extends" not in shown
    assert shown["topology"]["ffn"]["devices"] == [2]
    assert shown["topology"]["attention"]["devices"] == [0, 1]  # from the parent


def test_show_unknown_id(capsys) -> None:
    assert main(["show", "nope", "--root", str(ROOT)]) == 2
    assert "known: afd-dsv4" in capsys.readouterr().err


def test_list_filters_and_json(capsys) -> None:
    assert main(["list", "--root", str(ROOT), "--tier", "pr", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["tier"] for r in rows} == {"pr"} and len(rows) == 8
    assert main(["list", "--root", str(ROOT), "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "cpu-eager-1a1f" in out and "afd-eager-2a2f" not in out


def test_validate_reports_all_errors_of_a_file(tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo")
    bad = repo / "scenarios/cpu/cpu-bad.yaml"
    bad.write_text(
        "schema_version: 2\n"
        "description: 7\n"
        "backend: tpu\n"
        "tier: hourly\n"
        "model: {tiny: {arch: llama}}\n"
        "checks: {gsm8k: {samples: 0}}\n"
    )
    assert main(["validate", "--root", str(repo), str(bad)]) == 1
    err = capsys.readouterr().err
    for expected in (
        "cpu-bad.yaml:1:1: schema_version: must be one of 1",
        "cpu-bad.yaml:2:1: description: must be a string",
        "cpu-bad.yaml:3:1: backend: must be one of 'cpu', 'cuda' or 'npu'",
        "cpu-bad.yaml:4:1: tier: must be one of",
        "cpu-bad.yaml:5:16: model.tiny.arch: must be one of",
        "cpu-bad.yaml:6:18: checks.gsm8k.samples: must be greater than",
        "cpu-bad.yaml:6:10: checks.gsm8k.threshold: is required",
    ):
        assert expected in err, expected
    assert (
        main(
            [
                "validate",
                "--root",
                str(repo),
                str(repo / "scenarios/cpu/cpu-eager-1a1f.yaml"),
            ]
        )
        == 0
    )


def test_yaml_syntax_error_is_positioned(tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "scenarios/cpu/broken.yaml").write_text("a: [1, 2\nb: 3\n")
    assert main(["validate", "--root", str(repo)]) == 1
    assert "scenarios/cpu/broken.yaml:2:" in capsys.readouterr().err


def test_validate_one_file_whose_parent_is_not_named(capsys) -> None:
    """A child scenario validated alone pulls in its parent (for the errors
    the parent already has) without tripping over its own bookkeeping."""
    child = ROOT / "scenarios/cpu/cpu-eager-1a1f-camasync.yaml"
    assert main(["validate", "--root", str(ROOT), str(child)]) == 0
    assert "1 scenario(s) valid" in capsys.readouterr().out


def test_cancel_recover_and_teardown_budget_are_checked(tmp_path: Path, capsys) -> None:
    repo = make_repo(tmp_path / "repo")
    bad = repo / "scenarios/cpu/cpu-bad.yaml"
    bad.write_text(
        "extends: cpu-eager-1a1f\n"
        "description: one client, no budget\n"
        "checks:\n"
        "  cancel_recover: {streams: 1}\n"
        "teardown: {budget_s: 0}\n"
    )
    late = repo / "scenarios/cpu/cpu-late.yaml"
    late.write_text(
        "extends: cpu-eager-1a1f\n"
        "description: a client that never leaves mid-generation\n"
        "checks:\n"
        "  cancel_recover: {hang_up_after: 8, max_tokens: 8}\n"
    )
    assert main(["validate", "--root", str(repo), str(bad), str(late)]) == 1
    err = capsys.readouterr().err
    for expected in (
        "cpu-bad.yaml:4:20: checks.cancel_recover.streams: must be greater than",
        "cpu-bad.yaml:5:12: teardown.budget_s: must be greater than 0",
        (
            "cpu-late.yaml:4:3: checks.cancel_recover: hang_up_after (8) must be "
            "below max_tokens (8)"
        ),
    ):
        assert expected in err, (expected, err)
