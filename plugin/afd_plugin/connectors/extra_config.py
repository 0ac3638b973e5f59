"""Base class for the closed ``connector_extra_config`` schemas (AFD-I1).

Each backend's ``schema.py`` subclasses it; unknown fields are always errors.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ExtraConfigSchema(BaseModel):
    """A connector's own settings: strict types, no unknown fields, frozen."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )
