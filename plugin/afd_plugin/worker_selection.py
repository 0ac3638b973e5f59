# SPDX-License-Identifier: Apache-2.0
"""Which worker class an AFD role runs: ``worker_cls="auto"`` mapping (AFD-I11),
and which platforms' role workers this build holds.

Pure: the config patch calls ``resolve_worker_cls`` after vLLM's platform has
normalised the parallel config; the validator asks ``worker_in_build``.
"""

from __future__ import annotations

import importlib.util
from functools import cache

from afd_plugin.config import AFDConfig
from afd_plugin.errors import AFDConfigError, FieldError

_RUNTIME = "afd_plugin.runtime"

# (platform, role) -> the role worker ``worker_cls="auto"`` selects.
AUTO_WORKERS: dict[tuple[str, str], str] = {
    ("cpu", "attention"): f"{_RUNTIME}.cpu.attention_worker.AFDAttentionCPUWorker",
    ("cpu", "ffn"): f"{_RUNTIME}.cpu.ffn_worker.AFDFFNCPUWorker",
    ("cuda", "attention"): f"{_RUNTIME}.gpu.attention_worker.AFDAttentionGPUWorker",
    ("cuda", "ffn"): f"{_RUNTIME}.gpu.ffn_worker.AFDFFNGPUWorker",
    ("npu", "attention"): f"{_RUNTIME}.npu.attention_worker.AFDAttentionNPUWorker",
    ("npu", "ffn"): f"{_RUNTIME}.npu.ffn_worker.AFDFFNNPUWorker",
}

# Every class path that is an AFD role worker, by role (explicit paths are
# accepted for older launch commands, but they are not a stable interface).
AFD_WORKERS: dict[str, frozenset[str]] = {
    role: frozenset(p for (_, r), p in AUTO_WORKERS.items() if r == role)
    for role in ("attention", "ffn")
}

WORKER_PATH = "parallel_config.worker_cls"


@cache
def worker_in_build(path: str) -> bool:
    """Whether this build ships the module of worker class ``path`` (found
    without importing it: no vLLM is loaded here)."""
    module = path.rpartition(".")[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is absent
        return False


def platforms_in_build() -> tuple[str, ...]:
    """Platforms whose attention and FFN role workers are both in this build."""
    platforms = dict.fromkeys(p for p, _ in AUTO_WORKERS)
    return tuple(
        p
        for p in platforms
        if all(worker_in_build(AUTO_WORKERS[(p, r)]) for r in ("attention", "ffn"))
    )


def worker_not_in_build(path: str) -> str:
    """Why the AFD worker ``path`` cannot run here."""
    platform, role = next(k for k, p in AUTO_WORKERS.items() if p == path)
    return (
        f"the AFD {role} worker for {platform} ({path}) is not in this build; "
        f"this build runs AFD on: {', '.join(platforms_in_build()) or 'none'}"
    )


def resolve_worker_cls(worker_cls: str, platform: str, afd: AFDConfig | None) -> str:
    """The worker class this process must run.

    Non-AFD configs and explicit AFD worker paths come back untouched; ``auto``
    becomes the platform's role worker; anything else with AFD is an error.
    """
    if afd is None:
        return worker_cls
    if worker_cls == "auto":
        path = AUTO_WORKERS.get((platform, afd.role))
        if path is None:
            raise AFDConfigError(
                [
                    FieldError(
                        WORKER_PATH,
                        f"AFD has no {afd.role} worker for platform {platform!r}; "
                        f"supported platforms: cpu, cuda, npu",
                    )
                ]
            )
        worker_cls = path
    if worker_cls in AFD_WORKERS[afd.role]:
        if not worker_in_build(worker_cls):
            raise AFDConfigError(
                [FieldError(WORKER_PATH, worker_not_in_build(worker_cls))]
            )
        return worker_cls
    other = "ffn" if afd.is_attention else "attention"
    if worker_cls in AFD_WORKERS[other]:
        why = f"is the {other} worker but additional_config.afd.role is {afd.role!r}"
    else:
        why = f"{worker_cls!r} is not an AFD {afd.role} worker"
    raise AFDConfigError(
        [
            FieldError(
                WORKER_PATH,
                f"{why}; leave --worker-cls unset ('auto') or use "
                f"{AUTO_WORKERS.get((platform, afd.role), 'an AFD role worker')}",
            )
        ]
    )


def is_afd_worker(worker_cls: str) -> bool:
    return any(worker_cls in paths for paths in AFD_WORKERS.values())
