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
MAX_DEPTH = 64
"""Deepest nesting a scenario may have (the real ones use five levels)."""
_PLAIN_TAGS = ("tag:yaml.org,2002:seq", "tag:yaml.org,2002:map")


class _Refused(Exception):
    """A node this reader does not build; the document gets one error."""

    def __init__(self, node: yaml.Node, message: str) -> None:
        super().__init__(message)
        self.mark = _mark(node)


def _scalar(node: yaml.ScalarNode) -> Any:
    try:
        return _CONSTRUCTOR.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, KeyError, AttributeError, TypeError) as exc:
        problem = getattr(exc, "problem", None) or str(exc) or type(exc).__name__
        message = f"cannot read the value {node.value[:40]!r}: {problem}"
        raise _Refused(node, message) from None


def _build(
    node: yaml.Node, path: Path_, doc: YamlDoc, seen: set[int], depth: int = 0
) -> Any:
    if depth > MAX_DEPTH:
        raise _Refused(node, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, yaml.ScalarNode):
        return _scalar(node)
    if id(node) in seen:
        # compose() hands out one node for an anchor and all its aliases:
        # building it again would expand an alias bomb (or loop on itself).
        raise _Refused(
            node, "YAML aliases of collections are not allowed here (use extends:)"
        )
    seen.add(id(node))
    if node.tag not in _PLAIN_TAGS:
        raise _Refused(node, f"unsupported YAML tag {node.tag[:60]!r}")
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            doc.positions[(*path, index)] = _mark(item)
            items.append(_build(item, (*path, index), doc, seen, depth + 1))
        return items
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = _build(key_node, path, doc, seen, depth + 1)
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
        out[key] = _build(value_node, (*path, key), doc, seen, depth + 1)
    return out


def load_text(text: str, file: str) -> YamlDoc:
    """Parse one YAML document; syntax errors and values this reader refuses
    become positioned errors (never another exception)."""
    doc = YamlDoc(file=file, data=None)
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
        doc.errors.append(Located(file, line, col, "", f"YAML syntax error: {problem}"))
        return doc
    except RecursionError:
        doc.errors.append(Located(file, 1, 1, "", "YAML nested too deep"))
        return doc
    if node is not None:
        doc.positions[()] = _mark(node)
        try:
            doc.data = _build(node, (), doc, set())
        except _Refused as exc:
            line, col = exc.mark
            doc.errors.append(Located(file, line, col, "", str(exc)))
            doc.data = None
    return doc


def load_file(path: Path, display: str | None = None) -> YamlDoc:
    name = display or str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        doc = YamlDoc(file=name, data=None)
        doc.errors.append(
            Located(name, 1, 1, "", f"not UTF-8 text (byte {exc.start}): {exc.reason}")
        )
        return doc
    return load_text(text, name)
