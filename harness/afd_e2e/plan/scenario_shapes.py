# SPDX-License-Identifier: Apache-2.0
"""A scenario id as a model shape: a tiny model's config from
``afd_e2e.tiny_model``, or a hub model's config.json under the model root."""

from __future__ import annotations

from pathlib import Path

from afd_e2e.plan.types import ModelShape, PlanInputError


def scenario_shape(
    scenario_id: str, root: Path | None, model_root: Path | None
) -> ModelShape | None:
    """None when no scenario has this id (or there is no repository)."""
    from afd_e2e.define.catalogue import Catalogue
    from afd_e2e.plan.shapes import read_config_file, shape_from_config
    from afd_e2e.repo import find_root

    try:
        repo = root or find_root()
    except (OSError, RuntimeError, ValueError):
        return None
    catalogue = Catalogue.load(repo)
    if scenario_id not in catalogue.loaded:
        return None
    try:
        scenario = catalogue.get(scenario_id)
    except ValueError as exc:
        raise PlanInputError(f"--model: {exc}") from None
    model = scenario.model
    if model.tiny is not None:
        from afd_e2e.tiny_model import ARCH_CONFIGS

        where = f"scenario {scenario_id}: tiny {model.tiny.arch} (afd_e2e.tiny_model)"
        return shape_from_config(
            ARCH_CONFIGS[model.tiny.arch], where, name=f"tiny-{model.tiny.arch}"
        )
    assert model.hub_id is not None
    if model_root is None:
        from afd_e2e.tiny_model import default_root

        model_root = default_root()
    plain = model_root / model.hub_id / "config.json"
    cache = model_root / ("models--" + model.hub_id.replace("/", "--")) / "snapshots"
    snapshot = cache / (model.revision or "") / "config.json"
    for candidate in (snapshot, plain) if model.revision else (plain,):
        if candidate.is_file():
            return read_config_file(candidate)
    raise PlanInputError(
        f"--model: scenario {scenario_id} uses {model.hub_id}, whose config.json "
        f"is not at {plain}; pass --model-root or the config.json path"
    )
