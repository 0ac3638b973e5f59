# SPDX-License-Identifier: Apache-2.0
"""The pure core and the harness import with torch, vLLM and torch_npu poisoned.

Each check runs in a fresh interpreter so nothing else already imported them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE_MODULES = [
    "afd_plugin",
    "afd_plugin.config",
    "afd_plugin.errors",
    "afd_plugin.validation",
    "afd_plugin.topology",
    "afd_plugin.wire",
    "afd_plugin.rendezvous_protocol",
    "afd_plugin.graph_policy",
    "afd_plugin.envs",
    "afd_plugin.version",
    "afd_plugin.model_support",
    "afd_plugin.serving_features",
    "afd_plugin.evidence",
    "afd_plugin.worker_selection",
    "afd_plugin.patches",
    "afd_plugin.models",
    "afd_plugin.connectors.base",
    "afd_plugin.connectors.registry",
    "afd_plugin.connectors.cpu.schema",
    "afd_plugin.connectors.cpu.shm_ring",
    "afd_plugin.connectors.gpu.schema",
    "afd_plugin.connectors.npu.schema",
    "afd_plugin.step_kind",
    "afd_plugin.step_protocol",
    "afd_plugin.failover_resume",
    "afd_plugin.vllm_view",
    "afd_plugin.logs",
    "afd_plugin.metrics",
    "afd_plugin.metrics_catalog",
    "afd_plugin.metrics_file",
    "afd_plugin.runtime.ffn_schedule",
    "afd_plugin.runtime.ffn_graphs",
    "afd_plugin.runtime.ffn_daemon",
]
HARNESS_MODULES = [
    "afd_e2e",
    "afd_e2e.cli",
    "afd_e2e.publish.doc_tables",
    "afd_e2e.define.policy",
    "afd_e2e.define.scenario",
    "afd_e2e.define.catalogue",
    "afd_e2e.publish.gates",
    "afd_e2e.launch.plan",
    "afd_e2e.runner",
    "afd_e2e.processes.process_manager",
    "afd_e2e.processes.role_errors",
    "afd_e2e.processes.role_logs",
    "afd_e2e.processes.role_process",
    "afd_e2e.processes.teardown",
    "afd_e2e.processes.teardown_record",
    "afd_e2e.processes.terminal",
    "afd_e2e.publish.report",
    "afd_e2e.tiny_model",
    "afd_e2e.checks.parity",
    "afd_e2e.checks.answer_agreement",
    "afd_e2e.checks.evidence",
    "afd_e2e.checks.gsm8k",
    "afd_e2e.checks.gsm8k.data",
    "afd_e2e.checks.gsm8k.gate",
    "afd_e2e.checks.gsm8k.items",
    "afd_e2e.checks.gsm8k.lmeval",
    "afd_e2e.checks.gsm8k.protocol",
    "afd_e2e.checks.gsm8k.request",
    "afd_e2e.checks.gsm8k.run",
    "afd_e2e.checks.gsm8k.worker",
]

POISON = """
import sys
for name in ("torch", "vllm", "torch_npu", "vllm_ascend"):
    sys.modules[name] = None
import importlib
for module in sys.argv[1:]:
    importlib.import_module(module)
from afd_plugin.connectors.registry import AFDConnectorFactory
for name in AFDConnectorFactory.names():
    AFDConnectorFactory.parse_extra_config(name, {})
import afd_plugin
afd_plugin.register()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "vllm"))
assert all(sys.modules[m] is None for m in loaded), loaded
print("clean")
"""


@pytest.mark.parametrize(
    "modules", [PURE_MODULES, HARNESS_MODULES], ids=["core", "harness"]
)
def test_imports_without_torch_or_vllm(modules: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", POISON, *modules],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"


def test_harness_cli_help_without_torch_or_vllm() -> None:
    code = (
        "import sys\n"
        "for n in ('torch', 'vllm', 'torch_npu'): sys.modules[n] = None\n"
        "from afd_e2e.cli import main\n"
        "sys.argv = ['afd-e2e', '--help']\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "lint" in result.stdout and "run" in result.stdout
