# SPDX-License-Identifier: Apache-2.0
"""All scenarios of a repository: discovery, resolution and validation.

``Catalogue.load(root)`` reads ``scenarios/*/*.yaml`` once; ids are file names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from afd_e2e.define.rules import check_scenario
from afd_e2e.define.scenario import (
    LoadedScenario,
    Scenario,
    ScenarioSource,
    read_source,
    resolve,
)
from afd_e2e.define.yamlpos import Located


def _key(err: Located) -> tuple[str, int, int, str]:
    return (err.file, err.line, err.col, err.path)


@dataclass
class Catalogue:
    root: Path
    loaded: dict[str, LoadedScenario] = field(default_factory=dict)
    errors: list[Located] = field(default_factory=list)

    @classmethod
    def load(cls, root: Path, files: Iterable[Path] | None = None) -> Catalogue:
        cat = cls(root=root)
        paths = sorted((root / "scenarios").glob("*/*.yaml"))
        sources: dict[str, ScenarioSource] = {}
        for path in paths:
            src = read_source(path, root)
            if src.id in sources:
                cat.errors.append(
                    Located(
                        src.display,
                        1,
                        1,
                        "",
                        f"scenario id {src.id!r} is also defined in "
                        f"{sources[src.id].display}; ids are unique",
                    )
                )
                continue
            sources[src.id] = src
        chosen = sources.values()
        if files is not None:
            wanted = {Path(f).resolve() for f in files}
            chosen = [s for s in sources.values() if s.path.resolve() in wanted]
            for extra in wanted - {s.path.resolve() for s in chosen}:
                src = read_source(extra, root)
                sources.setdefault(src.id, src)
                chosen.append(src)
        own: dict[str, list[Located]] = {}
        for src in chosen:
            loaded = resolve(src, sources)
            cat.loaded[src.id] = loaded
            own[src.id] = check_scenario(loaded)
        for sid, errors in list(own.items()):
            parent = cat.loaded[sid].parent
            if parent is not None:
                if parent.id not in own:  # validate the parent once, for its errors
                    own[parent.id] = check_scenario(resolve(parent, sources))
                seen = {_key(e) for e in own[parent.id]}
                errors = [e for e in errors if _key(e) not in seen]
            cat.errors += errors
        return cat

    def get(self, scenario_id: str) -> Scenario:
        loaded = self.loaded.get(scenario_id)
        if loaded is None:
            known = ", ".join(sorted(self.loaded)) or "(none)"
            raise KeyError(f"no scenario {scenario_id!r}; known: {known}")
        if loaded.scenario is None:
            raise ValueError(
                f"scenario {scenario_id!r} is invalid; run afd-e2e validate"
            )
        return loaded.scenario

    def scenarios(self) -> dict[str, Scenario]:
        return {k: v.scenario for k, v in sorted(self.loaded.items()) if v.scenario}
