# SPDX-License-Identifier: Apache-2.0
"""Fuzzing of the scenario loader (``Catalogue.load``): every file a user writes.

Owns the property that any scenario file (random bytes or text, tricky YAML
scalars, tags and anchors, mappings of the schema's real keys with random
values, mutations of the real scenarios under ``scenarios/`` and their
``extends`` parents) is answered by located errors (``Located``: file, line,
column, field path, message) in ``Catalogue.errors`` that name a file the
user wrote, quickly; never by an exception; and that a YAML alias bomb is
refused without expanding it. The hand-written cases are in
tests/harness/test_scenarios.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from afd_e2e.define.catalogue import Catalogue
from afd_e2e.define.scenario import SCENARIO_FIELDS, Scenario
from afd_e2e.define.yamlpos import Located
from afd_plugin.config import ALLOWED_CONNECTORS
from afd_plugin.connectors.registry import AFDConnectorFactory

ROOT = Path(__file__).resolve().parents[2]
REAL: dict[str, Path] = {p.stem: p for p in sorted(ROOT.glob("scenarios/*/*.yaml"))}
BACKENDS = ("cpu", "cuda", "npu")

# One load of one or two files takes a few milliseconds; a second is a hang
# or an expansion. Sized so that the file runs in about 15 s on two cores.
FAST = settings(max_examples=120, deadline=1000)


def _write(root: Path, rel: str, content: str | bytes) -> str:
    path = root / "scenarios" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return f"scenarios/{rel}"


def _check_load(files: dict[str, str | bytes]) -> Catalogue:
    """Load a repository holding only ``files`` (``<backend>/<id>.yaml`` ->
    content). Any exception propagates and fails the test; every error must be
    a ``Located`` naming one of the files, at a real position."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        written = {
            _write(root, rel, content): len(content.splitlines()) + 1
            for rel, content in files.items()
        }
        catalogue = Catalogue.load(root)
    for err in catalogue.errors:
        assert isinstance(err, Located), err
        assert err.file in written, err
        assert 1 <= err.line <= written[err.file] and err.col >= 1, err
        assert isinstance(err.message, str) and err.message.strip(), err
        assert str(err).startswith(err.file)
    # An invalid scenario is never silent.
    if any(loaded.scenario is None for loaded in catalogue.loaded.values()):
        assert catalogue.errors
    for scenario in catalogue.scenarios().values():
        assert isinstance(scenario, Scenario)
    return catalogue


# --- (a) random bytes and text ---------------------------------------------

YAML_ALPHABET = "abcdefklmnoprstuy0129.:-_ ,[]{}&*!|>'\"#?<%@`\t\n"


# Catches: a file that is not UTF-8 (read_text raising UnicodeDecodeError)
# instead of a located "not UTF-8" error.
@FAST
@given(st.binary(max_size=300))
@example(b"\xff\n")
def test_random_bytes(data: bytes) -> None:
    _check_load({"cpu/fuzz.yaml": data})


# Catches: any text the YAML reader, the composer or the value construction
# turns into an exception (ReaderError, ComposerError, ConstructorError,
# ValueError) that the loader does not turn into a located error.
@FAST
@given(
    st.text(st.characters(codec="utf-8"), max_size=300)
    | st.text(alphabet=YAML_ALPHABET, max_size=300)
)
@example("!0")
def test_random_text(text: str) -> None:
    _check_load({"cpu/fuzz.yaml": text})


# --- tricky YAML: tags, anchors, timestamps, huge numbers --------------------

TRICKY_VALUES = st.sampled_from(
    [
        "2001-02-30",  # a timestamp that is no date: ValueError in the constructor
        "2001-12-14t21:59:43.10-05:00",
        "!!timestamp nope",
        "!!int abc",
        "!!float abc",
        "!!bool maybe",
        "!!binary '%%%'",
        "!!null x",
        "!!str {a: 1}",
        "!!set {a, b}",
        "!!omap 1",
        "!!omap [a: 1]",
        "!!value x",
        "!!yaml x",
        "!!python/name:os.system ''",
        "!!python/object/apply:os.system [true]",
        "!custom x",
        "!<tag:example.com,2000:x> y",
        "&anchor [1, 2]",
        "&self [*self]",  # a recursive alias: infinite recursion when built
        "&me {a: *me}",
        "*undefined",
        "{a: 1, a: 2}",
        "{? [1]: 2}",
        "{1: 2, null: 3, true: 4, 1.5: 5}",
        "0x1F",
        "0o17",
        "1_000",
        ".nan",
        "-.inf",
        "~",
        "'\\x00'",
        '"\\x00\\u202e"',
        "|\n  block\n",
        "[" * 5 + "]" * 5,
        "",
    ]
)
BIG_NUMBERS = st.builds(
    lambda digits, sign: sign + "9" * digits,
    st.integers(4290, 4400),
    st.sampled_from("-+"),
)
TRICKY_KEYS = st.sampled_from([*SCENARIO_FIELDS, "extends", "<<", "? [x]", "~", "1"])


@st.composite
def tricky_documents(draw: st.DrawFn) -> str:
    lines = []
    for key, value in draw(
        st.lists(st.tuples(TRICKY_KEYS, TRICKY_VALUES | BIG_NUMBERS), max_size=6)
    ):
        body = value.replace("\n", "\n  ")
        lines.append(f"{key}: {body}")
    return "\n".join(lines) + "\n"


# Catches: YAML that composes but whose values cannot be constructed, or that
# refers to itself: a plain `2001-02-30` or a 4301-digit integer (ValueError),
# an unknown or Python tag, a merge key `<<` or a bad `!!omap`
# (ConstructorError), `&a [*a]` (RecursionError); each must be a located error.
@FAST
@given(tricky_documents())
@example("description: 2001-02-30\n")
@example("schema_version: " + "9" * 4301 + "\n")
@example("tier: !custom x\n")
@example("<<: {a: 1}\n")
@example("model: &self [*self]\n")
@example("model: !!int abc\n")
def test_tricky_yaml(text: str) -> None:
    _check_load({"cpu/fuzz.yaml": text})


# Catches: nesting deep enough to exhaust the stack while building the values:
# libyaml accepts up to 999 levels, more than Python's default recursion limit
# lets the builder recurse. Not a hypothesis test on purpose: hypothesis
# raises the recursion limit while a test runs, which hides exactly this.
@pytest.mark.parametrize("depth", [500, 998])
@pytest.mark.parametrize("opener", ["[", "{a: "])
def test_deep_nesting(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    leaf = "" if opener == "[" else "1"
    _check_load({"cpu/fuzz.yaml": "model: " + opener * depth + leaf + closer * depth})


# --- (b) mappings of the schema's real keys with random values ---------------

WORDS = st.sampled_from(
    [
        *BACKENDS,
        "pr",
        "nightly",
        "weekly",
        "local",
        "eager",
        "FULL",
        "FULL_DECODE_ONLY",
        "fail",
        "marker-scan",
        "deepseek_v2",
        "qwen3_moe",
        "v1",
        "v2",
        *ALLOWED_CONNECTORS,
        *REAL,
        "",
        "\u202e",
        "\U0001f600",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**63, -(2**63) - 1, 10**100, 10**4299])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec="utf-8"), max_size=30)
    | WORDS
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=10) | WORDS, inner, max_size=4)
    ),
    max_leaves=12,
)
EXTRA_NAMES = sorted(
    {
        name
        for spec in AFDConnectorFactory.specs()
        for name in spec.schema_class().model_fields
    }
)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _typed(annotation: Any, info: FieldInfo | None) -> st.SearchStrategy[Any]:
    """Values of a field's own type (most likely to pass the schema)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if origin in (Union, types.UnionType):
        return st.one_of([_typed(arg, info) for arg in get_args(annotation)])
    if annotation is type(None):
        return st.none()
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-2, 70_000)
    if annotation is float:
        return st.floats(0, 1e5) | st.sampled_from([0.0, math.inf])
    if annotation is str:
        return WORDS | st.text(max_size=20)
    if origin is list:
        return st.lists(_typed(get_args(annotation)[0], None), max_size=4)
    if origin is dict:
        keys = st.sampled_from(EXTRA_NAMES) | st.text(max_size=10)
        return st.dictionaries(keys, SCALARS, max_size=4)
    model = _model_of(annotation)
    if model is not None:
        return model_mappings(model)
    return VALUES


def model_mappings(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """A mapping of ``model``'s real field names (and one stray key), each
    holding a value of its type or anything."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        fields = model.model_fields
        names = [*fields, "stray"] + (["extends"] if model is Scenario else [])
        out: dict[str, Any] = {}
        for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=8)):
            info = fields.get(name)
            if name == "extends":
                out[name] = draw(st.sampled_from(sorted(REAL)) | VALUES)
            elif info is None:
                out[name] = draw(VALUES)
            else:
                out[name] = draw(_typed(info.annotation, info) | VALUES)
        return out

    return st.deferred(build)


def _with_parent(data: Any) -> dict[str, str | bytes]:
    """The real parent of an ``extends`` naming one, beside the file."""
    parent = data.get("extends") if isinstance(data, dict) else None
    if isinstance(parent, str) and parent in REAL:
        path = REAL[parent]
        return {f"{path.parent.name}/{path.name}": path.read_text()}
    return {}


# Catches: a value of a real field of any type (a list where a model is
# expected, a float rank, a non-string env value, a bad `extends`) escaping
# the pydantic errors, the rules or the plugin validator as an exception, or
# an error located in a file the user did not write.
@FAST
@given(model_mappings(Scenario), st.sampled_from(BACKENDS))
def test_schema_keys_with_random_values(data: dict[str, Any], backend: str) -> None:
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    _check_load({f"{backend}/fuzz-scenario.yaml": text, **_with_parent(data)})


# --- (c) mutations of the real scenarios --------------------------------------


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += _paths(value, (*prefix, index))
    return out


def _mutate(data: Any, path: tuple[Any, ...], op: str, value: Any) -> Any:
    if not path:
        return value if op == "replace" else data
    head, rest = path[0], path[1:]
    if isinstance(data, dict):
        data = dict(data)
        if not rest and op == "delete":
            data.pop(head)
        elif not rest and op == "add" and isinstance(data[head], dict):
            data[head] = {**data[head], "stray_key": value}
        else:
            data[head] = _mutate(data[head], rest, op, value)
    elif isinstance(data, list):
        data = list(data)
        if not rest and op == "delete":
            data.pop(head)
        else:
            data[head] = _mutate(data[head], rest, op, value)
    return data


@st.composite
def mutated_real_scenarios(draw: st.DrawFn) -> dict[str, str | bytes]:
    """A real scenario (and its parent) with one value replaced, deleted or
    given a stray sibling; either the child or the parent is the one changed."""
    sid = draw(st.sampled_from(sorted(REAL)))
    path = REAL[sid]
    files: dict[str, str | bytes] = {
        f"{path.parent.name}/{path.name}": path.read_text()
    }
    child = yaml.safe_load(path.read_text())
    files.update(_with_parent(child))
    target = draw(st.sampled_from(sorted(files)))
    data = yaml.safe_load(files[target])
    where = draw(st.sampled_from(_paths(data)))
    op = draw(st.sampled_from(["replace", "delete", "add"]))
    mutated = _mutate(data, where, op, draw(VALUES | WORDS))
    files[target] = yaml.safe_dump(mutated, sort_keys=False, allow_unicode=True)
    return files


# Catches: a one-value change of a real scenario (or of the parent it extends)
# that crashes the merge of extends, the schema, the rules or the plugin
# validator, or whose errors point at a file other than the two loaded.
@FAST
@given(mutated_real_scenarios())
def test_mutated_real_scenarios(files: dict[str, str | bytes]) -> None:
    _check_load(files)


@st.composite
def edited_real_texts(draw: st.DrawFn) -> dict[str, str | bytes]:
    """A real scenario file's text (comments kept) with one line deleted or
    duplicated, or random YAML-ish text inserted at a random offset."""
    sid = draw(st.sampled_from(sorted(REAL)))
    path = REAL[sid]
    text = path.read_text()
    files: dict[str, str | bytes] = dict(_with_parent(yaml.safe_load(text)))
    lines = text.splitlines(keepends=True)
    index = draw(st.integers(0, len(lines) - 1))
    op = draw(st.sampled_from(["delete", "duplicate", "insert"]))
    if op == "delete":
        del lines[index]
        text = "".join(lines)
    elif op == "duplicate":
        lines.insert(index, lines[index])
        text = "".join(lines)
    else:
        offset = draw(st.integers(0, len(text)))
        noise = draw(st.text(alphabet=YAML_ALPHABET, max_size=12))
        text = text[:offset] + noise + text[offset:]
    files[f"{path.parent.name}/{path.name}"] = text
    return files


# Catches: an edited real file (a duplicated key, a broken indentation, stray
# characters) raising instead of giving positioned errors in that file.
@FAST
@given(edited_real_texts())
def test_edited_real_scenario_texts(files: dict[str, str | bytes]) -> None:
    _check_load(files)


# --- the alias bomb ------------------------------------------------------------

BOMB_LEVELS = 9
"""Nine anchors each holding nine aliases of the previous one: 446 bytes that
expand to 9**8 (43 million) leaves when the aliases are built out."""

LOAD_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from afd_e2e.define.catalogue import Catalogue
    start = time.perf_counter()
    cat = Catalogue.load(Path(sys.argv[1]))
    print(json.dumps({"seconds": time.perf_counter() - start,
                      "errors": [e.file for e in cat.errors]}))
    """
)


def _bomb() -> str:
    lines = ["a0: &a0 [lol]"]
    for level in range(1, BOMB_LEVELS):
        aliases = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{aliases}]")
    return "\n".join(lines) + "\n"


def _address_space_limit() -> None:  # runs in the child before exec
    import resource

    limit = 1 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _load_in_child(root: Path) -> dict[str, Any]:
    """``Catalogue.load(root)`` in a separate process under a 1 GiB
    address-space cap and a 6 s timeout (neither touches the test runner):
    the load's seconds and the files its errors name."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", LOAD_SCRIPT, str(root)],
            capture_output=True,
            text=True,
            timeout=6,
            preexec_fn=_address_space_limit,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the load was still running after 6 s") from None
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


# Catches: the loader building every alias out (a "billion laughs" document):
# today each anchor level costs ~9x time and memory (7 levels, 338 bytes:
# 3.5 s and ~340 MB; 8 levels, 392 bytes: 2.8 GB then MemoryError after a
# minute). The loader must refuse it with a located error within a second.
def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    _write(tmp_path, "cpu/bomb.yaml", _bomb())
    result = _load_in_child(tmp_path)
    assert result["seconds"] < 1.0, result["seconds"]
    assert result["errors"], "the alias bomb must be refused, not accepted"
    assert set(result["errors"]) == {"scenarios/cpu/bomb.yaml"}


# Catches: a cap or a timeout too tight for any load, which would make the
# bomb test above fail for a reason other than the aliases: the same document
# with its anchors and aliases turned into plain words loads in the child.
def test_the_child_loads_a_plain_document_of_the_bomb_size(tmp_path: Path) -> None:
    _write(tmp_path, "cpu/plain.yaml", _bomb().replace("*", "x").replace("&", "y"))
    result = _load_in_child(tmp_path)
    assert result["seconds"] < 1.0, result["seconds"]
    assert set(result["errors"]) == {"scenarios/cpu/plain.yaml"}
