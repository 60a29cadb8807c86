"""Reading a run directory's JSON-lines files: the valid records, and every bad line counted with file:line.

Shared by the loss checker (testbed/accounting/) and summary.json
(testbed/experiment/summary.py), so both judge a line by the same rule: it must
be a JSON object that conforms to its record kind in node/schema.py. A missing
file counts as empty; an unreadable file or a bad line is a problem, never a crash.

One bad line is expected, not a problem: the torn last line of a writer the
testbed killed on purpose (`pool_kill`), which left KILLED_MARK beside the file
before its SIGKILL. The writer died once, so it tore at most one line, the last
it wrote; a later writer (the killed instance's successor) ends that line with a
newline and appends after it. So in a file with the mark, one line that is not
JSON is its torn tail, counted in `torn_tails`; a second one makes both problems.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from node import schema

MAX_PROBLEM_SAMPLES = 10
KILLED_MARK = "killed.json"     # beside the files of a writer the testbed sent SIGKILL


@dataclass
class RecordReader:
    """Reads JSON-lines files below `root`, collecting problems (file:line: what) instead of raising."""

    root: Path
    problems: int = 0
    samples: list[str] = field(default_factory=list)     # the first MAX_PROBLEM_SAMPLES problems
    lines: int = 0                                        # non-blank lines read
    torn_tails: int = 0                                   # killed writers' torn last lines (not problems)

    def records(self, path: Path, kind: str) -> Iterator[dict[str, Any]]:
        """The valid records of one file; nothing when it is missing."""
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        except OSError as exc:
            self.problem(f"{self.rel(path)}: cannot read ({exc.strerror})")
            return
        excusable = (Path(path).parent / KILLED_MARK).exists()    # its writer may have torn one line
        torn: int | None = None           # that line's number, while it is the file's only line that is not JSON
        with f:
            try:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    self.lines += 1
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        if excusable:
                            torn, excusable = lineno, False
                            continue
                        if torn is not None:      # a second one: the first was not only the kill's doing
                            self.problem(f"{self.rel(path)}:{torn}: not a JSON line")
                            torn = None
                        # a daemon killed mid-write leaves a partial last line: reported, not fatal
                        self.problem(f"{self.rel(path)}:{lineno}: not a JSON line")
                        continue
                    if not conforms(kind, rec):
                        issues = schema.validate(kind, rec) or ["does not conform"]
                        self.problem(f"{self.rel(path)}:{lineno}: {kind} record: {issues[0]}")
                        continue
                    yield rec
            except OSError as exc:       # e.g. a directory where the file should be
                self.problem(f"{self.rel(path)}: cannot read ({exc.strerror or exc})")
        if torn is not None:
            self.torn_tails += 1

    def problem(self, text: str) -> None:
        self.problems += 1
        if len(self.samples) < MAX_PROBLEM_SAMPLES:
            self.samples.append(text)

    def rel(self, path: Path) -> str:
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)


def recipients(dst: str | list) -> list[str]:
    """The recipient nodes of a submission record's `dst` (a node name or a list of them)."""
    return [dst] if isinstance(dst, str) else [d for d in dst if isinstance(d, str)]


def reason_group(reason: str) -> str:
    """A reason up to its first ": ", so details such as sizes do not split a group."""
    return reason.split(": ", 1)[0].strip() or "(no reason given)"


# schema.RECORDS flattened once: (name, types, bool allowed); the fast check runs per line of a long run,
# schema.validate (which explains the problem) only for the lines that fail it
_SCHEMA: dict[str, tuple[tuple[str, tuple[type, ...], bool], ...]] = {
    kind: tuple((f.name, f.types, bool in f.types) for f in fields) for kind, fields in schema.RECORDS.items()}
_MISSING = object()


def conforms(kind: str, record: object) -> bool:
    """True when `record` has every field node/schema.py requires for `kind`, with the right types."""
    if type(record) is not dict:
        return False
    for name, types, bool_ok in _SCHEMA[kind]:
        value = record.get(name, _MISSING)
        if value is _MISSING or not isinstance(value, types) or (value is True or value is False) and not bool_ok:
            return False
    return True
