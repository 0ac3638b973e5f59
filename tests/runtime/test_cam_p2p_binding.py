# SPDX-License-Identifier: Apache-2.0
"""The native binding of ``afd_ascend::a2e/e2a`` (``csrc/npu``), built by the
real ``setup.py`` (``AFD_BUILD_ASCEND_OPS=1 pip wheel``) on this CPU machine
and dispatched to with CPU tensors.

What stands in, at the narrowest seams (no CANN or torch_npu exists here):
a ``torch_npu`` package holding only what the build and the binding use
(``torch_npu.utils.cpp_extension.NpuExtension`` and the header with
``c10_npu::getCurrentNPUStream``), a toolkit directory, and a kernel library
whose two launch functions fill the outputs from the call they were given.
What is real: setup.py's decision and extension, the binding's compilation
against torch's headers, its registration into the Python-defined schemas,
its contract checks and the output shapes against the shape functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from repo_copy import build_env, copy_of_the_repo, pip_wheel

from afd_plugin import native_build as nb

ROOT = Path(__file__).resolve().parents[2]

NPU_STREAM_H = """
#pragma once
// Stand-in: the one torch_npu API the binding calls.
namespace c10_npu {
struct NPUStream {
  void* stream() const { return nullptr; }
};
inline NPUStream getCurrentNPUStream() { return NPUStream{}; }
}  // namespace c10_npu
"""

NPU_EXTENSION = '''
"""Stand-in: torch_npu's NpuExtension is a CppExtension with its headers."""
from pathlib import Path
from torch.utils.cpp_extension import CppExtension

def NpuExtension(name, sources, *args, **kwargs):
    include = str(Path(__file__).resolve().parents[2])
    kwargs["include_dirs"] = [*kwargs.get("include_dirs", []), include]
    return CppExtension(name, sources, *args, **kwargs)
'''

# The launches fill what a caller can check: ids with the rank, weights with
# aiv_num, the handle with batch_size per served slot, valid true; a group
# not named "afd..." fails with status 5.
STUB_KERNELS = """
#include <string.h>
#include "afd_cam_p2p_kernels.h"

static int64_t served(const AfdCamCall* c) {
  if (c->rank >= c->expert_rank_size) return 0;
  return (c->attention_rank_size - c->rank + c->expert_rank_size - 1) /
         c->expert_rank_size;
}

int32_t afd_cam_p2p_a2e_launch(const AfdCamCall* c, const AfdCamA2eBuffers* b,
                               bool compute_gate, void* stream) {
  (void)compute_gate; (void)stream;
  if (strncmp(c->group_ep, "afd", 3) != 0) return 5;
  int32_t* ids = (int32_t*)b->expert_ids_out;
  float* weights = (float*)b->weights_out;
  for (int64_t i = 0; i < b->gathered_rows * c->topk; ++i) {
    ids[i] = (int32_t)c->rank;
    weights[i] = (float)c->aiv_num;
  }
  memset(b->expand_x, 0, (size_t)(b->gathered_rows * c->hidden_size * 2));
  memset(b->valid, 1, (size_t)b->gathered_rows);
  int32_t* handle = (int32_t*)b->atten_batch_size;
  for (int64_t s = 0; s < served(c); ++s) handle[s] = (int32_t)c->batch_size;
  return 0;
}

int32_t afd_cam_p2p_e2a_launch(const AfdCamCall* c, const AfdCamE2aBuffers* b,
                               void* stream) {
  (void)stream;
  if (strncmp(c->group_ep, "afd", 3) != 0) return 5;
  memset(b->out, 0, (size_t)(b->out_rows * c->hidden_size * 2));
  return 0;
}
"""

CHECK = textwrap.dedent(
    """
    import importlib.util, json, sys
    from dataclasses import astuple
    import torch
    so, order = sys.argv[1], sys.argv[2]

    def load_native():
        spec = importlib.util.spec_from_file_location("afd_plugin._C_ascend", so)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)

    if order == "native-first":
        load_native()
    from afd_plugin.connectors.npu import cam_p2p_ops as ops
    if order == "schemas-first":
        load_native()
    ops.ensure_cam_p2p_ops_available()  # torch_npu and the module, then kernels
    NPU = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
    A2E, E2A = torch.ops.afd_ascend.a2e.default, torch.ops.afd_ascend.e2a.default

    def a2e(x, call, gate=False):
        return A2E.redispatch(NPU, x, None, None, *astuple(call), gate)

    def e2a(rows, handle, call):
        return E2A.redispatch(NPU, rows, handle, *astuple(call))

    out = {"shapes": [], "errors": {}}
    H, B = 16, 3
    for attention, ffn in ((2, 1), (3, 2), (4, 4)):
        for rank in range(attention + ffn):
            call = ops.CamCall(B, H, 2, ffn, attention, rank, "afd1", 8)
            rows = call.gathered_rows if call.is_ffn else B
            x = torch.ones(rows if not call.is_ffn else 0, H, dtype=torch.bfloat16)
            got = a2e(x, call)
            want = ops._a2e_shape(x, None, None, *astuple(call), False)
            handle = got[3]
            back = e2a(torch.zeros(rows, H, dtype=torch.bfloat16), handle, call)
            want_back = ops._e2a_shape(got[0], handle, *astuple(call))
            out["shapes"].append({
                "layout": [attention, ffn, rank],
                "match": [tuple(g.shape) == tuple(w.shape) and g.dtype == w.dtype
                          for g, w in zip([*got, back], [*want, want_back])],
                "ids": sorted(set(got[1].flatten().tolist())),
                "weights": sorted(set(got[2].flatten().tolist())),
                "handle": handle.tolist(),
                "valid": bool(got[4].all()),
            })
    call = ops.CamCall(B, H, 2, 1, 2, 1, "afd", 8)  # attention rank 0 of 2A1F
    cases = {
        "float32": lambda: a2e(torch.ones(B, H), call),
        "rows": lambda: a2e(torch.ones(B + 1, H, dtype=torch.bfloat16), call),
        "gate": lambda: a2e(torch.ones(B, H, dtype=torch.bfloat16), call, True),
        "rank": lambda: a2e(torch.ones(B, H, dtype=torch.bfloat16),
                            ops.CamCall(B, H, 2, 1, 2, 3, "afd", 8)),
        "group": lambda: a2e(torch.ones(B, H, dtype=torch.bfloat16),
                             ops.CamCall(B, H, 2, 1, 2, 1, "other", 8)),
        "handle": lambda: e2a(torch.zeros(0, H, dtype=torch.bfloat16),
                              torch.zeros(5, dtype=torch.int32), call),
    }
    for name, case in cases.items():
        try:
            case()
            out["errors"][name] = None
        except RuntimeError as exc:
            out["errors"][name] = str(exc).splitlines()[0]
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def binding(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the built ``_C_ascend`` library, the stand-in torch_npu's root)."""
    tmp = tmp_path_factory.mktemp("binding")
    standin = tmp / "standin"
    header = standin / "torch_npu/csrc/core/npu/NPUStream.h"
    header.parent.mkdir(parents=True)
    header.write_text(NPU_STREAM_H)
    (standin / "torch_npu/__init__.py").write_text('"""Stand-in torch_npu."""\n')
    (standin / "torch_npu/utils").mkdir()
    (standin / "torch_npu/utils/__init__.py").write_text("")
    (standin / "torch_npu/utils/cpp_extension.py").write_text(NPU_EXTENSION)
    toolkit = tmp / "ascend-toolkit"
    toolkit.mkdir()
    kernels = tmp / "stub_kernels.o"
    (tmp / "stub_kernels.c").write_text(STUB_KERNELS)
    subprocess.run(
        [
            "cc",
            "-c",
            "-fPIC",
            "-O1",
            f"-I{ROOT / nb.SOURCE_DIR}",
            str(tmp / "stub_kernels.c"),
            "-o",
            str(kernels),
        ],
        check=True,
        timeout=60,
    )
    src = copy_of_the_repo(tmp / "src")
    env = build_env(
        **{
            nb.SWITCH: "1",
            "ASCEND_HOME_PATH": str(toolkit),
            nb.KERNEL_LIBRARY_ENV: str(kernels),
            "PYTHONPATH": str(standin),
            "MAX_JOBS": "2",
        }
    )
    wheels = tmp / "wheels"
    built = pip_wheel(src, wheels, env, 900)
    log = built.stdout + built.stderr
    assert built.returncode == 0, log[-6000:]
    assert f"afd-plugin: building the Ascend ops ({nb.EXTENSION})" in log, log[-3000:]
    [wheel] = list(wheels.glob("*.whl"))
    assert wheel.name.endswith("linux_x86_64.whl") or "-cp3" in wheel.name, wheel
    with zipfile.ZipFile(wheel) as whl:
        [name] = [n for n in whl.namelist() if n.startswith("afd_plugin/_C_ascend")]
        so = tmp / Path(name).name
        so.write_bytes(whl.read(name))
    return so, standin


@pytest.mark.parametrize("order", ["schemas-first", "native-first"])
def test_the_binding_implements_the_python_schemas(
    binding: tuple[Path, Path], order: str
) -> None:
    so, standin = binding
    env = {**os.environ, "PYTHONPATH": str(standin)}
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(so), order],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert len(result["shapes"]) == 3 + 5 + 8
    for case in result["shapes"]:
        attention, ffn, rank = case["layout"]
        assert all(case["match"]), case  # five a2e outputs and e2a's, shaped
        is_ffn = rank < ffn
        served = len(range(rank, attention, ffn)) if is_ffn else 0
        assert case["ids"] == ([rank] if is_ffn else []), case
        assert case["weights"] == ([8.0] if is_ffn else []), case
        assert case["valid"]
        slots = -(-attention // ffn)
        assert case["handle"] == [3] * served + [0] * (slots - served), case
    errors = result["errors"]
    assert "x must be bfloat16" in errors["float32"]
    assert "x must be (3, 16), got [4, 16]" in errors["rows"]
    assert "run the gate on the FFN side" in errors["gate"]
    assert "rank 3 is outside the 3 ranks" in errors["rank"]
    assert (
        "the kernel launch failed on rank 1 (group_ep other): error 5"
        in (errors["group"])
    )
    assert "atten_batch_size must be the handle a2e returned" in errors["handle"]


def test_without_the_kernel_library_the_binding_stops_at_its_error(
    tmp_path: Path,
) -> None:
    """The macro setup.py defines only when it links a kernel library: without
    it the preprocessor stops with what is missing."""
    header = tmp_path / "torch_npu/csrc/core/npu/NPUStream.h"
    header.parent.mkdir(parents=True)
    header.write_text(NPU_STREAM_H)
    from torch.utils.cpp_extension import include_paths

    includes = [f"-I{p}" for p in [*include_paths(), tmp_path, ROOT / nb.SOURCE_DIR]]
    import sysconfig

    includes.append(f"-I{sysconfig.get_paths()['include']}")
    done = subprocess.run(
        [
            "c++",
            "-std=c++17",
            "-E",
            *includes,
            str(ROOT / nb.SOURCE_DIR / "afd_ascend_ops.cpp"),
            "-o",
            os.devnull,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "needs the AscendC CAM P2P kernels" in done.stderr, done.stderr[-2000:]
