# SPDX-License-Identifier: Apache-2.0
"""Micro-batch evidence check: count dual-ubatch records logged after a mark.

The record format is afd_plugin.evidence; marks are byte offsets, not timestamps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from afd_plugin.evidence import TAG, parse_line


def mark_logs(paths: Iterable[Path]) -> dict[Path, int]:
    """Byte offset of each log now (0 for a file that does not exist yet).

    Take the mark just before the evaluation starts; ``count_evidence`` then
    reads only what was written after it.
    """
    return {
        Path(p): (Path(p).stat().st_size if Path(p).is_file() else 0) for p in paths
    }


@dataclass(frozen=True)
class EvidenceResult:
    """Dual-ubatch records found after the marks, counted per ``role:rank``."""

    passed: bool
    counts: dict[str, int]
    message: str
    files: tuple[Path, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def count_evidence(marks: Mapping[Path, int]) -> tuple[Counter[str], list[str]]:
    """Records per ``role:rank`` written after each file's mark, and notes.

    Only complete lines count: a last line without its newline may still be
    being written. A file shorter than its mark was truncated or replaced and is
    read from its start (noted).
    """
    counts: Counter[str] = Counter()
    notes: list[str] = []
    for path, offset in marks.items():
        if not path.is_file():
            notes.append(f"{path}: no such log file")
            continue
        size = path.stat().st_size
        start = offset
        if size < offset:
            notes.append(
                f"{path}: shorter ({size} B) than at the mark ({offset} B); "
                "read from the start"
            )
            start = 0
        with path.open("rb") as fh:
            fh.seek(start)
            data = fh.read()
        complete, _, _partial = data.rpartition(b"\n")
        if TAG.encode() not in complete:
            continue
        for line in complete.decode("utf-8", errors="replace").split("\n"):
            record = parse_line(line)
            if record is not None:
                counts[record.key] += 1
    return counts, notes


def check_dual_ubatch(
    marks: Mapping[Path, int], *, expect_keys: Collection[str] = ()
) -> EvidenceResult:
    """Pass when at least one record was logged after the marks.

    ``expect_keys`` (``"attention:0"``, ...) additionally requires a record
    from each of those role ranks.
    """
    counts, notes = count_evidence(marks)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "none"
    missing = sorted(k for k in expect_keys if counts.get(k, 0) == 0)
    total = sum(counts.values())
    if total == 0:
        files = ", ".join(str(p) for p in marks) or "(no log files given)"
        message = (
            "FAIL evidence dual_ubatch: no step ran with two micro-batches after "
            f"the evaluation started (0 records in {files})"
        )
    elif missing:
        message = (
            f"FAIL evidence dual_ubatch: no record from {', '.join(missing)} "
            f"(records: {shown})"
        )
    else:
        message = f"PASS evidence dual_ubatch {total} records ({shown})"
    return EvidenceResult(
        passed=total > 0 and not missing,
        counts=dict(sorted(counts.items())),
        message=message,
        files=tuple(marks),
        notes=tuple(notes),
    )
