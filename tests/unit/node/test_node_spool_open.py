"""Opening a spool: only a damaged file is moved aside; any other error, or another process holding the spool,
stops the node with one line and leaves the spool as it is."""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.spool import Spool, SpoolUnavailable

ROOT = Path(__file__).resolve().parents[3]


def _healthy(path: Path) -> None:
    spool = Spool(path, 0.0)
    spool.open()
    spool.run_sync(Spool.op_set_setting("kept", "yes"))
    spool.close()


def test_a_spool_that_cannot_be_opened_now_is_left_as_it_is(tmp_path: Path) -> None:
    """A healthy spool whose WAL cannot be opened (here: a directory in its place; a full disk or an I/O error
    look the same to the node): not damaged, so not moved aside and replaced by an empty one."""
    path = tmp_path / "spool.db"
    _healthy(path)
    Path(f"{path}-wal").mkdir()
    spool = Spool(path, 0.0)
    with pytest.raises(SpoolUnavailable, match="cannot open the spool .*unable to open database file") as err:
        spool.open()
    assert "\n" not in str(err.value) and spool.quarantined is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spool.db", "spool.db-wal", "spool.db.lock"]
    os.rmdir(f"{path}-wal")
    spool.open()                  # the lock was let go; the spool is the one it was
    try:
        assert spool.run_sync(Spool.op_get_setting("kept")) == "yes"
    finally:
        spool.close()


def test_a_second_process_on_the_same_spool_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = Spool(tmp_path / "spool.db", 0.0)
    first.open()
    try:
        with pytest.raises(SpoolUnavailable, match=f"in use by process {os.getpid()}"):
            Spool(tmp_path / "spool.db", 0.0).open()
    finally:
        first.close()
    again = Spool(tmp_path / "spool.db", 0.0)       # closed: free again
    again.open()
    again.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_second_daemon_on_a_spool_in_use_touches_nothing_and_the_node_keeps_its_files_private(
        tmp_path: Path) -> None:
    """A node started on the spool of a running one stops before recovery, which would delete the running
    node's submission in progress (its pieces stored, its origin row not yet). The node's files are 0600."""
    cfg = tmp_path / "node.yaml"
    records = tmp_path / "n1"
    cfg.write_text(f"name: n1\ndata_listen: 127.0.0.1:{_free_port()}\nmgmt_listen: 127.0.0.1:{_free_port()}\n"
                   f"records_dir: {records}\n")
    cmd = [sys.executable, "-m", "node", "--config", str(cfg)]
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        spool = records / "spool.db"
        deadline = time.monotonic() + 30
        while "node n1 up" not in ((records / "node.log").read_text() if (records / "node.log").exists() else ""):
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() else ""
            time.sleep(0.05)
        with sqlite3.connect(spool) as c:          # the running node is storing a large submission
            c.execute("INSERT INTO frag VALUES ('n1-cut', 'n2', 0, 10, 0, 'n1', 'alice', '[\"\"]', 1, 0, 9e9, '', 1, "
                      "'queued', x'00')")
        second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert second.stderr.strip() == (f"node: the spool {spool} is in use by process {first.pid} "
                                          "(another node on the same spool?)")
        with sqlite3.connect(spool) as c:
            assert c.execute("SELECT COUNT(*) FROM frag WHERE msg_id = 'n1-cut'").fetchone()[0] == 1
        modes = {p.name: p.stat().st_mode & 0o777 for p in [records, *records.iterdir()]}
        assert modes == {"n1": 0o700, **{p.name: 0o600 for p in records.iterdir()}}, modes
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
