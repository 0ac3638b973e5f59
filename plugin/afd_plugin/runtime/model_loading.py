# SPDX-License-Identifier: Apache-2.0
"""Build and load a role's model with vLLM's own loader, choosing the class.

vLLM's configured loader does everything (dtype, device, weights, post-load
processing); only its ``create_model`` step gets the role's class, bound to
the typed AFD config (vLLM builds models from ``vllm_config`` alone).
"""

from __future__ import annotations

from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.model_loader import get_model_loader
from vllm.model_executor.model_loader.base_loader import BaseModelLoader
from vllm.model_executor.model_loader.utils import initialize_model

from afd_plugin.config import AFDConfig
from afd_plugin.models import role_model_class
from afd_plugin.models.role_model import bind_afd_config


def _with_model_class(
    base: type[BaseModelLoader], model_class: type[nn.Module]
) -> type[BaseModelLoader]:
    class RoleModelLoader(base):  # type: ignore[valid-type, misc]
        def create_model(
            self, vllm_config: VllmConfig, model_config, prefix: str = ""
        ) -> nn.Module:
            return initialize_model(
                vllm_config=vllm_config,
                model_config=model_config,
                prefix=prefix,
                model_class=model_class,
            )

    RoleModelLoader.__name__ = f"AFD{base.__name__}"
    return RoleModelLoader


def load_role_model(vllm_config: VllmConfig, afd: AFDConfig) -> nn.Module:
    """This role's half of the configured model, weights loaded."""
    model_config = vllm_config.model_config
    architectures = getattr(model_config.hf_config, "architectures", None) or [""]
    model_class = bind_afd_config(role_model_class(architectures[0], afd.role), afd)
    base = type(get_model_loader(vllm_config.load_config))
    loader = _with_model_class(base, model_class)(vllm_config.load_config)
    return loader.load_model(vllm_config=vllm_config, model_config=model_config)
