"""The spool's durability settings, and a damaged spool file met at start-up."""
from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from node.spool import Spool


def test_every_commit_is_synced_to_disk(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    spool.open()
    try:
        got = spool.run_sync(lambda c: (c.execute("PRAGMA journal_mode").fetchone()[0],
                                        c.execute("PRAGMA synchronous").fetchone()[0]))
    finally:
        spool.close()
    assert got == ("wal", 2)          # WAL, synchronous=FULL: an ack means the WAL is on disk


@pytest.mark.parametrize("damage", [b"this is not a database" * 100, b"SQLite format 3\0" + b"\xff" * 4000])
def test_a_damaged_spool_is_moved_aside_with_one_log_line(tmp_path: Path, damage: bytes,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spool.db"
    path.write_bytes(damage)
    spool = Spool(path)
    with caplog.at_level(logging.ERROR, logger="node.spool"):
        spool.open()
    try:
        assert spool.run_sync(lambda c: c.execute("SELECT COUNT(*) FROM frag").fetchone()[0]) == 0
    finally:
        spool.close()
    assert spool.quarantined is not None and spool.quarantined.read_bytes() == damage
    lines = [r for r in caplog.records if r.name == "node.spool"]
    assert len(lines) == 1 and "damaged" in lines[0].getMessage() and lines[0].exc_info is None
    with sqlite3.connect(path) as c:                                   # the new spool is a sound one
        assert c.execute("PRAGMA quick_check").fetchone()[0] == "ok"
