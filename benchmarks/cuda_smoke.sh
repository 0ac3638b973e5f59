#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CUDA smoke run of the AFD runtime on ONE GPU, for a session lent one GPU
# (one H200, 15 minutes of device time). Installs nothing: the machine has no
# network, so the venv given as AFD_SMOKE_VENV (default .venv-cuda, carried
# along with the working tree) must already hold vllm==0.32.0 (CUDA build)
# and this repository (pip install -e .[eval]).
#
#   AFD_SMOKE_VENV=.venv-cuda benchmarks/cuda_smoke.sh [--skip-servers]
#
# Writes benchmarks/results/cuda_smoke.json and cuda_smoke.log (and, with
# servers, the server logs in a cuda_smoke-* folder); exit status 0 only when
# every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${AFD_SMOKE_VENV:-.venv-cuda}"
out="${OUT:-benchmarks/results}"
if [ ! -x "$venv/bin/python" ]; then
  echo "no venv at $venv: build one with vllm==0.32.0 and this repo first" >&2
  exit 2
fi
"$venv/bin/python" -c "import vllm, torch; assert vllm.__version__ == '0.32.0', vllm.__version__; assert torch.cuda.is_available()"
mkdir -p "$out"
"$venv/bin/python" benchmarks/cuda_smoke.py --out "$out" "$@" 2>&1 | tee "$out/cuda_smoke.log"
exit "${PIPESTATUS[0]}"
