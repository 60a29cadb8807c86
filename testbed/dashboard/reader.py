"""Incremental readers of a run directory that is still being written.

JsonlReader reads a JSON-lines file from the offset where it stopped last time, in chunks, yielding one
record at a time: a 100 MB metrics.jsonl is streamed, never held whole. A file that shrank or was replaced
(another inode) is read again from the start; a malformed line, a record that does not match its kind in
node/schema.py, a line longer than any record, or a last line that stays unterminated are reported as
problems, never raised. JsonFile re-reads a whole JSON document (topology.json, experiment.json) when the
file changed: they are replaced atomically, so a changed inode, size or mtime means a new version.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from node import schema

CHUNK = 1 << 20            # bytes read at a time
MAX_LINE = 4 << 20         # no record is this long: a line beyond it is skipped, not buffered


@dataclass
class Item:
    """One thing a read produced: a record, or a problem (a sentence) about the file."""

    record: dict[str, Any] | None = None
    problem: str | None = None


@dataclass
class JsonlReader:
    path: Path
    kind: str | None = None            # node/schema.py record kind the lines must match; None: any JSON object
    chunk: int = CHUNK
    max_line: int = MAX_LINE
    offset: int = 0                    # bytes consumed: everything before it was a complete line
    lineno: int = 0                    # complete lines consumed
    _ino: int | None = field(default=None, repr=False)
    _skipping: bool = field(default=False, repr=False)          # inside an over-long line, up to its newline
    _stale_tail: tuple[int, int] | None = field(default=None, repr=False)     # (size, offset) of a seen tail
    _tail_reported: bool = field(default=False, repr=False)
    pending_problem: str | None = None     # a half-written last line, found by the last read (take_problem())

    def read(self) -> Iterator[Item]:
        """What was appended since the last call (nothing when the file does not exist yet)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if self._ino is not None and (st.st_ino != self._ino or st.st_size < self.offset):
            yield Item(problem=f"{self.path.name}: the file was truncated or replaced; reading it again from the "
                               f"start")
            self.offset, self.lineno, self._skipping, self._tail_reported = 0, 0, False, False
        self._ino = st.st_ino
        if st.st_size == self.offset:
            return
        try:
            f = open(self.path, "rb")
        except OSError as exc:
            yield Item(problem=f"{self.path.name}: cannot read it ({exc.strerror or exc})")
            return
        with f:
            f.seek(self.offset)
            buf = b""
            while True:
                data = f.read(self.chunk)
                if not data:
                    break
                buf += data
                start = 0
                while True:
                    nl = buf.find(b"\n", start)
                    if nl < 0:
                        break
                    line, start = buf[start:nl], nl + 1
                    self.offset += len(line) + 1
                    if self._skipping:      # the rest of an over-long line
                        self._skipping = False
                        continue
                    self.lineno += 1
                    item = self._parse(line)
                    if item is not None:
                        yield item
                buf = buf[start:]
                if len(buf) > self.max_line:
                    if not self._skipping:
                        self.lineno += 1
                        yield Item(problem=f"{self.path.name} line {self.lineno}: longer than {self.max_line} "
                                           f"bytes; skipped")
                    self._skipping = True
                    self.offset += len(buf)
                    buf = b""
        self._check_tail(st.st_size)

    def _check_tail(self, size: int) -> None:
        """An unterminated last line is normal while its writer is mid-write; the same one two reads in a row
        with no growth is a half-written line (a writer killed mid-line): say so once."""
        if size <= self.offset or self._skipping:
            self._stale_tail = None
            return
        if self._stale_tail == (size, self.offset) and not self._tail_reported:
            self._tail_reported = True
            self.pending_problem = (f"{self.path.name} line {self.lineno + 1}: half-written (no newline); "
                                    f"waiting for the rest")
        self._stale_tail = (size, self.offset)

    def take_problem(self) -> str | None:
        p, self.pending_problem = self.pending_problem, None
        return p

    def _parse(self, line: bytes) -> Item | None:
        if not line.strip():
            return None
        try:
            record = json.loads(line)
        except ValueError:
            return Item(problem=f"{self.path.name} line {self.lineno}: not JSON; skipped")
        if not isinstance(record, dict):
            return Item(problem=f"{self.path.name} line {self.lineno}: not a JSON object; skipped")
        if self.kind is not None:
            problems = schema.validate(self.kind, record)
            if problems:
                return Item(problem=f"{self.path.name} line {self.lineno}: {problems[0]}; skipped")
        return Item(record=record)


@dataclass
class JsonFile:
    """A JSON document that is replaced as a whole; changed() says when to read it again."""

    path: Path
    _key: tuple[int, int, int] | None = field(default=None, repr=False)

    def changed(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_ino, st.st_size, st.st_mtime_ns) != self._key

    def load(self) -> tuple[Any, str | None]:
        """(document, None), or (None, problem) when it cannot be read or parsed (kept unread: tried again)."""
        try:
            st = os.stat(self.path)
            text = self.path.read_text()
            doc = json.loads(text)
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as exc:
            return None, f"{self.path.name}: cannot be read ({exc})"
        self._key = (st.st_ino, st.st_size, st.st_mtime_ns)
        return doc, None
