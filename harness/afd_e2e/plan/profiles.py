# SPDX-License-Identifier: Apache-2.0
"""Hardware profiles: the YAML schema, strict loading with line numbers, and
the built-in profiles under ``afd_e2e/plan_profiles/`` (each names its source).

A profile describes one device and the instance (server) built from it: peak
FLOP/s per dtype, memory bandwidth and capacity per device, the instance's
network bandwidth (all its NICs) and the price of a device-hour.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from afd_e2e.define.yamlpos import load_file
from afd_e2e.plan.types import DTYPES, PlanInputError
from afd_plugin.errors import pydantic_message

PROFILE_DIR = Path(__file__).resolve().parent.parent / "plan_profiles"
"""Where the built-in profiles live (``<name>.yaml``)."""


class HardwareProfile(BaseModel):
    """One accelerator and the instance made of it. Fields left out (null)
    are unknown: the roofline needs FLOP/s, bandwidth and network, and without
    them ``--calibration`` must supply the stage times."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )

    schema_version: Literal[1]
    """Always 1."""
    name: str = Field(min_length=1)
    """Short name, e.g. ``H800``."""
    description: str = ""
    """What this profile is, in words."""
    sources: list[str] = Field(min_length=1)
    """Where every number comes from (paper and table, datasheet)."""
    devices_per_instance: int = Field(default=1, ge=1)
    """Devices in one attention or FFN instance (a server: 8 GPUs)."""
    peak_flops: dict[Literal["fp8", "bf16", "fp16", "fp32"], float] = Field(
        default_factory=dict
    )
    """Dense peak FLOP/s of one device, per dtype."""
    compute_dtype: Literal["fp8", "bf16", "fp16", "fp32"] | None = None
    """The dtype matmuls run in by default (a key of ``peak_flops``)."""
    memory_bandwidth: float | None = Field(default=None, gt=0)
    """Memory bandwidth of one device, bytes/s."""
    memory_bytes: float | None = Field(default=None, gt=0)
    """Memory capacity of one device, bytes (no capacity check when null)."""
    network_bandwidth: float | None = Field(default=None, gt=0)
    """Network bandwidth of one instance, all its NICs together, bytes/s (the
    ``Net`` of Step-3 section 5.4: 8 x 400 Gb/s = 400e9 B/s for H800)."""
    shared_host_cores: int | None = Field(default=None, ge=1)
    """All instances of a deployment share one host of this many cores, each
    instance one single-threaded engine process (a development machine, as in
    the CPU end-to-end scenarios). Calibrated stage times then scale by
    processor sharing: ``max(1, (A + F) / cores)`` over the calibration
    deployment's ``max(1, 2 / cores)``. Null: every instance has its own."""
    cost_per_device_hour: float | None = Field(default=None, gt=0)
    """Price of one device for one hour, USD; an instance costs
    ``devices_per_instance`` times this."""

    def flops(self, dtype: str) -> float | None:
        """Peak FLOP/s of one device in ``dtype`` (None when unknown)."""
        return self.peak_flops.get(dtype)  # type: ignore[call-overload]

    @property
    def instance_cost_per_hour(self) -> float | None:
        if self.cost_per_device_hour is None:
            return None
        return self.cost_per_device_hour * self.devices_per_instance

    @property
    def has_roofline(self) -> bool:
        """Enough numbers to predict stage times without measurements."""
        return bool(
            self.peak_flops and self.memory_bandwidth and self.network_bandwidth
        )


FIELDS = tuple(HardwareProfile.model_fields)


def builtin_profiles() -> dict[str, Path]:
    """Built-in profile names (file stems, lower case) and their files."""
    return {path.stem: path for path in sorted(PROFILE_DIR.glob("*.yaml"))}


def load_profile(name_or_path: str) -> HardwareProfile:
    """A built-in profile by name (case-insensitive) or a profile YAML file.

    Raises ``PlanInputError`` listing every problem, each with file and line.
    """
    builtins = builtin_profiles()
    path = builtins.get(name_or_path.lower())
    if path is None:
        path = Path(name_or_path)
        if not path.is_file():
            known = ", ".join(builtins) or "(none)"
            raise PlanInputError(
                f"--hardware: no built-in profile or file {name_or_path!r}; "
                f"built-in profiles: {known}"
            )
    return parse_profile_file(path)


def _exponent_hint(err: Mapping[str, Any]) -> str:
    """YAML reads ``9.89e14`` (no sign, or no dot) as text; say how to write it."""
    value = err.get("input")
    if err["type"] != "float_type" or not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    return f" (YAML read it as text; write {number:.6g} as {number:.3e})"


def parse_profile_file(path: Path) -> HardwareProfile:
    doc = load_file(path)
    problems = [str(err) for err in doc.errors]
    if problems:
        raise PlanInputError(problems)
    if not isinstance(doc.data, dict):
        raise PlanInputError(f"{path}:1:1: a hardware profile must be a mapping")
    try:
        profile = HardwareProfile.model_validate(doc.data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            allowed = FIELDS if len(loc) == 1 else DTYPES
            message = pydantic_message(err, allowed) + _exponent_hint(err)
            problems.append(str(doc.error(loc, message)))
        raise PlanInputError(problems) from None
    if (
        profile.compute_dtype is not None
        and profile.flops(profile.compute_dtype) is None
    ):
        known = ", ".join(profile.peak_flops) or "(none)"
        raise PlanInputError(
            str(
                doc.error(
                    ("compute_dtype",),
                    f"{profile.compute_dtype!r} has no peak_flops entry; "
                    f"peak_flops has: {known}",
                )
            )
        )
    return profile
