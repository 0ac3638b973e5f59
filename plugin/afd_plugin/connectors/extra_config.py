# SPDX-License-Identifier: Apache-2.0
"""Base class for the closed ``connector_extra_config`` schemas (AFD-I1).

Each backend's ``schema.py`` subclasses it; unknown fields are always errors.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ExtraConfigSchema(BaseModel):
    """A connector's own settings: strict types, no unknown fields, frozen."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        use_attribute_docstrings=True,
        allow_inf_nan=False,
    )

    def graph_refusal(self) -> tuple[str, str] | None:
        """``(field, why)`` when these settings cannot run inside a graph (the
        validator then refuses every graph mode); None when they can."""
        return None
