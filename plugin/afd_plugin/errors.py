# SPDX-License-Identifier: Apache-2.0
"""Error types of the pure core and the field-path formatting they share.

Every user-facing error lists all problems at once, each naming its field path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: ``path`` is dotted, ``message`` says why."""

    path: str
    message: str
    not_in_build: bool = False
    """The rules allow it, but this build lacks the implementation (a
    connector, a role worker or a role-split model)."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class AFDConfigError(ValueError):
    """Invalid AFD configuration or deployment; carries every problem found."""

    def __init__(self, errors: Sequence[FieldError] | str):
        if isinstance(errors, str):
            errors = [FieldError("additional_config.afd", errors)]
        self.errors: tuple[FieldError, ...] = tuple(errors)
        super().__init__(self._render())

    def _render(self) -> str:
        if len(self.errors) == 1:
            return f"invalid AFD configuration: {self.errors[0]}"
        lines = [f"invalid AFD configuration ({len(self.errors)} problems):"]
        lines += [f"  - {err}" for err in self.errors]
        return "\n".join(lines)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(err.path for err in self.errors)


def describe(value: Any) -> str:
    """A short ``repr`` of a user value with its type, for error messages."""
    huge = isinstance(value, int) and not isinstance(value, bool)
    if huge and value.bit_length() > 128:
        # repr() refuses ints of more than 4300 digits; nobody reads that many.
        sign = "-" if value < 0 else ""
        return f"{sign}<an integer of {value.bit_length()} bits> (int)"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def join_path(prefix: str, loc: Iterable[Any]) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        parts.append(f"[{item}]" if isinstance(item, int) else str(item))
    return ".".join(parts).replace(".[", "[")


def pydantic_message(err: Mapping[str, Any], allowed_fields: Sequence[str] = ()) -> str:
    """Our wording for one pydantic error entry (allowed values, got what)."""
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        allowed = ", ".join(sorted(allowed_fields)) or "(none)"
        return f"unknown field; allowed fields: {allowed}"
    if kind == "missing":
        return "is required"
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"must be one of {expected}, got {describe(value)}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer (not a float or bool), got {describe(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {describe(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, got {describe(value)}"
    if kind == "string_type":
        return f"must be a string, got {describe(value)}"
    if kind == "list_type":
        return f"must be a list, got {describe(value)}"
    if kind in ("dict_type", "model_type"):
        return f"must be a mapping, got {describe(value)}"
    if kind == "value_error":  # a model validator's own sentence, whole
        return str(err.get("ctx", {}).get("error", err["msg"]))
    if kind.startswith(("greater_than", "less_than")):
        return f"{err['msg'].replace('Input should', 'must')}, got {describe(value)}"
    return f"{err['msg']}, got {describe(value)}"


def from_pydantic(
    exc: ValidationError | Iterable[Mapping[str, Any]],
    prefix: str,
    allowed_fields: Sequence[str] = (),
) -> list[FieldError]:
    """Turn pydantic's errors (an exception or its error entries) into field
    errors with our paths and wording."""
    entries = exc.errors(include_url=False) if isinstance(exc, ValidationError) else exc
    return [
        FieldError(join_path(prefix, err["loc"]), pydantic_message(err, allowed_fields))
        for err in entries
    ]


FFN_REFUSAL = (
    "this is an AFD ffn server: it runs only the FFN blocks for its attention "
    "servers and serves no requests; send requests to the attention server"
)
"""What an FFN server answers to scheduler work and to text-generation calls."""
