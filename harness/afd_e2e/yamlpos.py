# SPDX-License-Identifier: Apache-2.0
"""Strict YAML reading that remembers where every value came from.

Duplicate keys are errors (PyYAML would keep the last one silently), and each
value's ``file:line:col`` is kept so later checks can point at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

try:  # the C loader composes ~10x faster; fall back to pure Python
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Located:
    """A problem at a place in a file: ``file:line:col: path: message``."""

    file: str
    line: int
    col: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}"
        return (
            f"{where}: {self.path}: {self.message}"
            if self.path
            else f"{where}: {self.message}"
        )


@dataclass
class YamlDoc:
    """Plain data plus the position of every mapping key and sequence item."""

    file: str
    data: Any
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    errors: list[Located] = field(default_factory=list)

    def where(self, path: Path_) -> tuple[int, int]:
        """Position of ``path``, or of its nearest ancestor that has one."""
        for cut in range(len(path), -1, -1):
            if path[:cut] in self.positions:
                return self.positions[path[:cut]]
        return (1, 1)

    def error(self, path: Path_, message: str) -> Located:
        line, col = self.where(path)
        return Located(self.file, line, col, dotted(path), message)


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += (
            f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        )
    return out


def _mark(node: yaml.Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


_CONSTRUCTOR = yaml.constructor.SafeConstructor()


def _build(node: yaml.Node, path: Path_, doc: YamlDoc) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return _CONSTRUCTOR.construct_object(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            doc.positions[(*path, index)] = _mark(item)
            items.append(_build(item, (*path, index), doc))
        return items
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = _build(key_node, path, doc)
        line, col = _mark(key_node)
        if not isinstance(key, str):
            doc.errors.append(
                Located(
                    doc.file, line, col, dotted(path), f"key {key!r} must be a string"
                )
            )
            continue
        if key in out:
            first = doc.positions[(*path, key)][0]
            doc.errors.append(
                Located(
                    doc.file,
                    line,
                    col,
                    dotted((*path, key)),
                    f"duplicate key (first defined on line {first}); keep one",
                )
            )
            continue
        doc.positions[(*path, key)] = (line, col)
        out[key] = _build(value_node, (*path, key), doc)
    return out


def load_text(text: str, file: str) -> YamlDoc:
    """Parse one YAML document; syntax errors become positioned errors."""
    doc = YamlDoc(file=file, data=None)
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
        doc.errors.append(Located(file, line, col, "", f"YAML syntax error: {problem}"))
        return doc
    if node is not None:
        doc.positions[()] = _mark(node)
        doc.data = _build(node, (), doc)
    return doc


def load_file(path: Path, display: str | None = None) -> YamlDoc:
    return load_text(path.read_text(encoding="utf-8"), display or str(path))
