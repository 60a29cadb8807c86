"""Reading a run directory's JSON-lines file tolerantly: the JSON objects it holds, every other line skipped.

For readers that take what is on record and judge nothing (the clock mapping, the report's sections, the
reproduction statements, a pool instance's look at its predecessor's receipts). A writer killed mid-line leaves
a torn last line (no newline, not JSON): it is skipped like any line that is not a JSON object, the same way by
every reader. The loss checker's reader (testbed/accounting/records.py) is the strict one: it counts such
lines as problems, with file:line.

`path` is a pathlib.Path or any path-like with read_bytes() (the Spark analysis' HDFS paths). A missing or
unreadable file reads as empty; bytes that are not UTF-8 are replaced, so one bad byte costs its line only.
"""
from __future__ import annotations

import json
from typing import Any, Iterator


def numbered(path: Any) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number from 1, the line's JSON object or None when it is not one) for each non-blank line."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        yield lineno, rec if isinstance(rec, dict) else None


def objects(path: Any) -> list[dict[str, Any]]:
    """The file's JSON objects in order; lines that are not one (a torn last line among them) are skipped."""
    return [rec for _lineno, rec in numbered(path) if rec is not None]
