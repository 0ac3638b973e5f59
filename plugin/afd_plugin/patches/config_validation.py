# SPDX-License-Identifier: Apache-2.0
"""Patch: the current platform's ``check_and_update_config`` (vLLM 0.32.0).

What: wraps the classmethod so that, right after the platform normalised the
config, an AFD config gets its role worker (``worker_cls="auto"``), passes the
one deployment validator and the vLLM version check, and is logged once.
Why: vLLM's platforms replace only ``"auto"``, with their own worker, and know
nothing of AFD (AFD-I11); no general-plugin hook selects a worker.
vLLM version: 0.32.0 (``check_target`` fails when the classmethod is gone or
its parameters changed).
Delete when: vLLM lets a general plugin choose the worker class.
Applied: from ``register()``, once per process.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from afd_plugin.config import parse_afd_config
from afd_plugin.patches import startup_interrupt
from afd_plugin.rendezvous_protocol import load_secret
from afd_plugin.version import check_vllm_version, installed_vllm_version
from afd_plugin.vllm_view import current_platform_name, validate_role
from afd_plugin.worker_selection import resolve_worker_cls

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger("afd_plugin")

TARGET = "check_and_update_config"
EXPECTED_PARAMETERS = ("vllm_config",)
_MARK = "__afd_config_validation__"
_logged: set[str] = set()


def normalize_afd_config(
    vllm_config: VllmConfig, requested_worker: str, requested_dbo: bool
) -> None:
    """Map the worker, validate and version-check an AFD config; leave any
    other config untouched. ``requested_*`` are the values before the
    platform rewrote them."""
    afd = parse_afd_config(vllm_config.additional_config)
    if afd is None:
        return

    installed = installed_vllm_version()
    warning = check_vllm_version(
        installed[1] if installed else None, afd.allow_unsupported_vllm_version
    )
    if warning:
        logger.warning("afd-plugin: %s", warning)
    # A stop asked for while the engines start must end the server (scoped
    # patch: only processes that run an AFD role get it).
    startup_interrupt.apply()
    # The rendezvous secret is read now, so that a missing one fails the
    # server at start naming the field, not its rendezvous later.
    load_secret(afd.secret_env, afd.secret_file)
    platform = current_platform_name()
    worker = resolve_worker_cls(requested_worker, platform, afd)
    vllm_config.parallel_config.worker_cls = worker
    if platform == "npu" and requested_worker == "auto":
        # Ascend's platform resolved (this runs inside its config hook): the
        # fix vllm-ascend applied for "auto" workers, which the AFD worker
        # replaces (compat/npu/runtime_config.py).
        from afd_plugin.compat.npu.runtime_config import apply_non_sp_all2all

        apply_non_sp_all2all(vllm_config)
    validate_role(vllm_config, afd, platform, enable_dbo=requested_dbo)
    if not afd.is_attention:
        # The FFN role holds no KV cache; vLLM's prefix-caching coordinator
        # needs at least one cache group, so caching is off there.
        _no_cache_on_ffn(vllm_config)
    resolved = afd.model_dump_json()
    if resolved not in _logged:
        _logged.add(resolved)
        logger.info(
            "afd-plugin: AFD %s role on %s, worker %s, config %s",
            afd.role,
            platform,
            worker,
            resolved,
        )


def _no_cache_on_ffn(vllm_config: VllmConfig) -> None:
    """The FFN role holds no KV cache and no linear-attention state: prefix
    caching goes off (vLLM's coordinator needs at least one cache group), and
    for a hybrid model the mamba settings vLLM's hook derived from it go back
    to what it picks without prefix caching (its check refuses a mamba block
    size without prefix caching)."""
    cache = vllm_config.cache_config
    cache.enable_prefix_caching = False
    if cache.mamba_block_size is not None:
        cache.mamba_cache_mode = "none"
        cache.mamba_block_size = vllm_config.model_config.max_model_len


def _check_target(platform_cls: type) -> Any:
    from vllm import __version__ as vllm_version

    original = getattr(platform_cls, TARGET, None)
    if original is None:
        raise RuntimeError(
            f"vLLM {vllm_version}: {platform_cls.__name__}.{TARGET} is gone; "
            "afd_plugin.patches.config_validation needs an update"
        )
    parameters = tuple(inspect.signature(original).parameters)
    if parameters != EXPECTED_PARAMETERS:
        raise RuntimeError(
            f"vLLM {vllm_version}: {platform_cls.__name__}.{TARGET} takes "
            f"{parameters}, expected {EXPECTED_PARAMETERS}; "
            "afd_plugin.patches.config_validation needs an update"
        )
    return original


def check_target() -> None:
    """Raise when the current platform's target drifted."""
    from vllm.platforms import current_platform

    _check_target(type(current_platform))


def apply() -> None:
    from vllm.platforms import current_platform

    from afd_plugin.logs import use_vllm_handlers

    use_vllm_handlers()

    platform_cls = type(current_platform)
    original = _check_target(platform_cls)
    if getattr(original, _MARK, False):
        return
    original_func = original.__func__

    def check_and_update_config(cls: type, vllm_config: VllmConfig) -> None:
        parallel = vllm_config.parallel_config
        requested_worker, requested_dbo = parallel.worker_cls, parallel.enable_dbo
        original_func(cls, vllm_config)
        normalize_afd_config(vllm_config, requested_worker, requested_dbo)

    setattr(check_and_update_config, _MARK, True)
    setattr(platform_cls, TARGET, classmethod(check_and_update_config))
