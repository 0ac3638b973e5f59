# SPDX-License-Identifier: Apache-2.0
"""Renderers: a scenario's launch plan written out for a system that runs it
elsewhere (``afd-e2e render ID --engine k8s``: Kubernetes manifests).

Pure: they build plain data from the plan and start, import or contact nothing
(no torch, vLLM, Ray or Kubernetes client)."""

from __future__ import annotations

RENDER_ENGINES = ("k8s",)
"""Names accepted by ``afd-e2e render --engine``."""
