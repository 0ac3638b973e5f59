#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write the manifest of the vllm-ascend API the Ascend runtime relies on.

Reads a vllm-ascend git repository at one commit (no import, no torch_npu)
and records, for each class method and function in ``TARGETS``, its
parameters and its line, so that ``tests/unit/test_vllm_ascend_api.py`` can
check the runtime against that source on any CPU machine.

    python scripts/vllm_ascend_api.py GIT_DIR COMMIT > tests/data/vllm_ascend_api.json
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

# file -> {class or "" (module level): [names]}
TARGETS: dict[str, dict[str, list[str]]] = {
    "vllm_ascend/worker/worker.py": {
        "NPUWorker": [
            "__init__",
            "init_device",
            "_init_device",
            "load_model",
            "initialize_from_config",
            "compile_or_warm_up_model",
            "execute_model",
            "execute_dummy_batch",
            "determine_available_memory",
            "shutdown",
        ],
    },
    "vllm_ascend/worker/model_runner_v1.py": {
        "NPUModelRunner": [
            "__init__",
            "load_model",
            "get_model",
            "profile_run",
            "_dummy_run",
            "execute_model",
            "sample_tokens",
            "capture_model",
            "initialize_kv_cache",
        ],
    },
    "vllm_ascend/worker/v2/model_runner.py": {
        "NPUModelRunner": [
            "__init__",
            "execute_model",
            "profile_run",
            "initialize_kv_cache",
        ],
    },
    "vllm_ascend/ascend_forward_context.py": {
        "": ["set_ascend_forward_context", "override_mrv2_in_profile_run"],
    },
    "vllm_ascend/platform.py": {"NPUPlatform": ["check_and_update_config"]},
}


def parameters(node: ast.FunctionDef) -> dict[str, object]:
    a = node.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    return {
        "positional": positional,
        "keyword_only": [p.arg for p in a.kwonlyargs],
        "varargs": a.vararg is not None,
        "varkw": a.kwarg is not None,
        "line": node.lineno,
    }


def extract(git_dir: str, commit: str) -> dict[str, object]:
    entries: dict[str, object] = {}
    classes: dict[str, object] = {}
    for path, wanted in TARGETS.items():
        source = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        tree = ast.parse(source)
        module = path.removesuffix(".py").replace("/", ".")
        scopes: dict[str, list[ast.stmt]] = {"": tree.body}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                scopes[node.name] = node.body
                if node.name in wanted:
                    # Every method the class defines itself: an AFD override
                    # of one that is not recorded above is caught by the test.
                    classes[f"{module}:{node.name}"] = {
                        "file": path,
                        "line": node.lineno,
                        "bases": [ast.unparse(b) for b in node.bases],
                        "methods": sorted(
                            n.name
                            for n in node.body
                            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        ),
                    }
        for owner, names in wanted.items():
            functions = {
                n.name: n
                for n in scopes[owner]
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            for name in names:
                if name not in functions:
                    raise SystemExit(f"{path}: {owner}.{name} not found at {commit}")
                key = f"{module}:{owner + '.' if owner else ''}{name}"
                entries[key] = {"file": path, **parameters(functions[name])}
    return {
        "repository": "vllm-project/vllm-ascend",
        "commit": commit,
        "api": entries,
        "classes": classes,
    }


if __name__ == "__main__":
    git_dir, commit = sys.argv[1], sys.argv[2]
    json.dump(extract(git_dir, commit), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
