# SPDX-License-Identifier: Apache-2.0
"""The evidence check over real-looking role logs: marks, counts, verdicts.

Logs mix vLLM lines, records with prefixes, interleaved and partial lines.
"""

from __future__ import annotations

from pathlib import Path

from afd_e2e.checks.evidence import check_dual_ubatch, count_evidence, mark_logs
from afd_plugin.evidence import format_dual_ubatch

STARTUP = """\
[attention:0] INFO 12-02 10:00:01 [api_server.py:1801] vLLM API server version 0.32.0
[attention:0] INFO 12-02 10:00:09 [gpu_model_runner.py:2201] Model loading took 1.2 GiB
[attention:0] INFO 12-02 10:00:12 [launcher.py:37] Route: /v1/completions, Methods: POST
"""


def _record(role: str, rank: int, step: int, tokens: list[int]) -> str:
    prefix = f"[{role}:{rank}] INFO 12-02 10:01:{step % 60:02d} [ubatching.py:311] "
    return prefix + format_dual_ubatch(role, rank, step, tokens) + "\n"


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)


def test_only_records_after_the_mark_count(tmp_path: Path) -> None:
    attn, ffn = tmp_path / "attention-0.log", tmp_path / "ffn-0.log"
    _append(attn, STARTUP + _record("attention", 0, 1, [3, 3]))  # warm-up, before
    _append(ffn, _record("ffn", 0, 1, [3, 3]))
    marks = mark_logs([attn, ffn])
    _append(attn, "".join(_record("attention", 0, s, [6, 5]) for s in range(10, 13)))
    _append(attn, "[attention:0] INFO 12-02 10:01:13 [logger.py:39] Received request\n")
    _append(ffn, _record("ffn", 0, 10, [6, 5]))
    result = check_dual_ubatch(marks)
    assert result.passed
    assert result.counts == {"attention:0": 3, "ffn:0": 1}
    assert result.message == (
        "PASS evidence dual_ubatch 4 records (attention:0=3, ffn:0=1)"
    )


def test_zero_records_fail_the_dbo_scenario(tmp_path: Path) -> None:
    attn = tmp_path / "attention-0.log"
    _append(attn, STARTUP + _record("attention", 0, 1, [3, 3]))
    marks = mark_logs([attn])
    _append(attn, "[attention:0] INFO 12-02 10:02:00 [engine.py:88] Avg prompt tput\n")
    result = check_dual_ubatch(marks)
    assert not result.passed
    assert result.total == 0
    assert result.message.startswith(
        "FAIL evidence dual_ubatch: no step ran with two micro-batches"
    )
    assert str(attn) in result.message


def test_interleaved_and_partial_lines_are_not_counted(tmp_path: Path) -> None:
    log = tmp_path / "roles.log"
    marks = mark_logs([log])  # the file does not exist yet: read from its start
    whole = format_dual_ubatch("attention", 1, 40, [7, 7])
    lines = [
        _record("attention", 1, 39, [7, 7]),
        # another process wrote into the middle of a record: not a record
        whole[:30] + "[ffn:0] DEBUG step done\n",
        # a record from a second process glued to the end of this one's line
        "[ffn:0] DEBUG recv 14 tokens " + whole + "\n",
        "\x1b[32m[attention:1]\x1b[0m " + _record("attention", 1, 41, [2, 1]),
        # the writer is mid-line: the last line has no newline yet
        whole[:-1],
    ]
    _append(log, "".join(lines))
    counts, notes = count_evidence(marks)
    assert counts == {"attention:1": 3}
    assert notes == []


def test_expected_ranks_must_each_show_evidence(tmp_path: Path) -> None:
    logs = [tmp_path / f"attention-{r}.log" for r in (0, 1)]
    marks = mark_logs(logs)
    _append(logs[0], _record("attention", 0, 5, [4, 4]))
    result = check_dual_ubatch(marks, expect_keys=["attention:0", "attention:1"])
    assert not result.passed
    assert result.counts == {"attention:0": 1}
    assert result.message == (
        "FAIL evidence dual_ubatch: no record from attention:1 (records: attention:0=1)"
    )


def test_a_replaced_log_is_read_from_its_start_and_noted(tmp_path: Path) -> None:
    log = tmp_path / "ffn-0.log"
    _append(log, STARTUP * 3)
    marks = mark_logs([log])
    log.write_text(_record("ffn", 0, 2, [1, 2]))  # rotated: shorter than the mark
    result = check_dual_ubatch(marks)
    assert result.passed and result.counts == {"ffn:0": 1}
    assert "read from the start" in result.notes[0]
