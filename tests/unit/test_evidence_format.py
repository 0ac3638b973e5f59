# SPDX-License-Identifier: Apache-2.0
"""The dual-ubatch evidence line: format, parse back, reject what is not a record.

afd_plugin.evidence is pure; it imports with torch and vLLM poisoned.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from afd_plugin.evidence import (
    DualUbatchRecord,
    format_dual_ubatch,
    parse_line,
    parse_lines,
)

LINE = (
    "AFD_EVIDENCE dual_ubatch v=1 role=attention rank=0 step=17 ubatches=2 tokens=5,4"
)


def test_the_documented_line_round_trips() -> None:
    assert format_dual_ubatch("attention", 0, 17, [5, 4]) == LINE
    record = parse_line(LINE)
    assert record == DualUbatchRecord("attention", 0, 17, (5, 4))
    assert record is not None and (record.key, record.ubatches) == ("attention:0", 2)


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "[attention:0] INFO 12-02 10:11:12 [gpu_model_runner.py:1234] ",
        "(EngineCore_DP1 pid=4242) \x1b[32mINFO\x1b[0m 12-02 10:11:12 [ubatch.py:88] ",
        "2026-12-02T10:11:12.345Z ffn-1 | ",
    ],
)
def test_any_log_prefix_is_accepted(prefix: str) -> None:
    line = prefix + format_dual_ubatch("ffn", 1, 3, [8, 8]) + "\r\n"
    assert parse_line(line) == DualUbatchRecord("ffn", 1, 3, (8, 8))


@pytest.mark.parametrize(
    "line",
    [
        LINE[:-2],  # truncated in the token list: 5 only, but ubatches=2
        LINE[:40],  # truncated in the middle
        LINE + " extra",  # something written after the record
        "X" + LINE,  # tag glued to another word
        LINE.replace("v=1", "v=2"),  # a version this parser does not know
        LINE.replace("attention", "sampler"),
        LINE.replace("tokens=5,4", "tokens=5,0"),  # an empty micro-batch
        LINE.replace("ubatches=2 tokens=5,4", "ubatches=1 tokens=5"),
        "INFO a step ran with ubatches=2 tokens=5,4",
    ],
)
def test_non_records_are_rejected(line: str) -> None:
    assert parse_line(line) is None


def test_records_run_together_count_only_a_cleanly_separated_last_one() -> None:
    second = format_dual_ubatch("attention", 1, 2, [1, 1])
    assert list(parse_lines([LINE + second])) == []  # "...tokens=5,4AFD_EVIDENCE"
    spaced = list(parse_lines([LINE + " " + second]))
    assert spaced == [DualUbatchRecord("attention", 1, 2, (1, 1))]


def test_formatter_refuses_what_would_not_parse_back() -> None:
    with pytest.raises(ValueError) as info:
        format_dual_ubatch("sampler", -1, 0, [4])
    message = str(info.value)
    assert "role must be one of" in message
    assert "rank must be an int >= 0" in message
    assert "tokens must list >= 2 micro-batches" in message
    with pytest.raises(ValueError, match="tokens must be ints >= 1"):
        format_dual_ubatch("ffn", 0, 0, [3, 0])


def test_three_micro_batches_are_also_evidence() -> None:
    line = format_dual_ubatch("ffn", 0, 9, [3, 3, 2])
    assert line.endswith("ubatches=3 tokens=3,3,2")
    assert parse_line(line) == DualUbatchRecord("ffn", 0, 9, (3, 3, 2))


def test_imports_without_torch_or_vllm() -> None:
    code = (
        "import sys\n"
        "for m in ('torch', 'vllm', 'torch_npu'):\n"
        "    sys.modules[m] = None\n"
        "import afd_plugin.evidence as e\n"
        "print(e.format_dual_ubatch('attention', 0, 1, [2, 2]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("AFD_EVIDENCE dual_ubatch v=1 ")
