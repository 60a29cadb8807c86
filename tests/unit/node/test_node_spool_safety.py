"""The spool's durability settings, and a damaged spool file met at start-up."""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
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


def _piece(hops: int, state: str, dst: str = "n9", off: int = 0):
    from node.piece import Piece
    return Piece("m1", dst, off, 2000, hops, "n1", "", [""], 1, 0.0, 4e9, "", 2, b"x" * 1000, state=state)


def test_a_copy_that_comes_back_round_a_loop_is_kept_a_retransmission_is_not(tmp_path: Path) -> None:
    from node.states import PieceState as S
    spool = Spool(tmp_path / "s.db", 0.0)
    spool.open()
    try:
        assert spool.run_sync(Spool.op_receive([_piece(2, S.QUEUED)])) == [True]
        assert spool.run_sync(Spool.op_receive([_piece(2, S.QUEUED)])) == [False]     # retransmission
        assert spool.run_sync(Spool.op_receive([_piece(4, S.QUEUED)])) == [False]     # still held here
        spool.run_sync(Spool.op_delete([("m1", "n9", 0)]))                           # handed on and acked
        assert spool.run_sync(Spool.op_receive([_piece(2, S.QUEUED)])) == [False]     # a late retransmission
        assert spool.run_sync(Spool.op_receive([_piece(4, S.QUEUED)])) == [True]      # back round a loop
        assert spool.run_sync(Spool.op_receive([_piece(4, S.QUEUED)])) == [False]     # ... once
        # at its destination a fragment is never taken twice, whatever its hops (reassembly counts bytes)
        assert spool.run_sync(Spool.op_receive([_piece(1, S.PART, dst="me", off=1000)])) == [True]
        assert spool.run_sync(Spool.op_receive([_piece(5, S.PART, dst="me", off=1000)])) == [False]
    finally:
        spool.close()


def test_a_spool_from_before_hop_counts_in_seen_opens_and_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE seen(msg_id TEXT, dst TEXT, off INTEGER, expires_ts REAL, "
                 "PRIMARY KEY(msg_id, dst, off)) WITHOUT ROWID")
    conn.execute("INSERT INTO seen VALUES ('m1', 'n9', 0, 4e9)")
    conn.commit()
    conn.close()
    spool = Spool(path, 0.0)
    spool.open()
    try:
        from node.states import PieceState as S
        assert spool.run_sync(Spool.op_receive([_piece(0, S.QUEUED)])) == [False]
        assert spool.run_sync(Spool.op_receive([_piece(3, S.QUEUED)])) == [True]
    finally:
        spool.close()


class _FailingCommits:
    """A connection whose COMMIT fails while `failing` is set: what SQLite reports when fsync fails
    (SQLITE_IOERR at commit). Everything else goes to the real connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.failing = False

    def execute(self, sql: str, *args):
        if self.failing and sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error (injected: fsync failed)")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


class _SpoolWithFailingFsync(Spool):
    def _connect(self):
        self.wrapped = _FailingCommits(super()._connect())
        return self.wrapped


def test_a_failing_fsync_refuses_instead_of_acknowledging(tmp_path: Path) -> None:
    import asyncio
    import json
    import time

    from node import registry
    from node.mta import make_engine
    from node.records import Records
    from node.piece import Piece

    cfg = registry.config_from_dict({"name": "n3", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                                     "neighbours": {"n2": "127.0.0.1:3"}, "records_dir": str(tmp_path)})

    def transit(msg: str) -> Piece:
        return Piece(msg, "n2", 0, 10, 1, "n1", "alice", ["bob"], 1, time.time(), time.time() + 60, "", 1, b"x" * 10)

    async def go() -> tuple:
        spool = _SpoolWithFailingFsync(cfg.spool_path, 0.0)
        spool.open()
        eng = make_engine(cfg, spool, Records(tmp_path, "n3"))
        await eng.recover()
        spool.wrapped.failing = True
        submitted = await eng.submit("alice", [("n2", "bob")], b"hello", None)
        try:        # the link layer answers a failed store with "store failed, try later" (test_node_frame_checks)
            received = await eng.receive("n2", [transit("m1")])
        except sqlite3.OperationalError as exc:
            received = exc
        spool.wrapped.failing = False
        submitted_after = await eng.submit("alice", [("n2", "bob")], b"hello", None)
        received_after = await eng.receive("n2", [transit("m2")])
        stored = spool.run_sync(lambda c: [r[0] for r in c.execute("SELECT msg_id FROM frag ORDER BY msg_id")])
        await eng.settle()
        spool.close()
        eng.records.close()
        return submitted, received, submitted_after, received_after, stored

    submitted, received, submitted_after, received_after, stored = asyncio.run(go())
    assert submitted[0] is False and submitted[2]           # refused, with a reason: never "accepted"
    assert isinstance(received, sqlite3.OperationalError)   # the store failed: no ack (None) for m1
    assert submitted_after[0] is True and received_after == [None]
    assert stored == sorted([submitted_after[1], "m2"])     # only what was acknowledged is in the spool
    lines = [json.loads(x) for x in (tmp_path / "submissions.jsonl").read_text().splitlines()]
    assert [x["accepted"] for x in lines] == [False, True]


def _cut(off: int, n: int, total: int, msg: str = "m7"):
    from node.piece import Piece
    from node.states import PieceState as S
    return Piece(msg, "n9", off, total, 1, "n1", "", [""], 1, 0.0, 4e9, "", 3, b"y" * n, state=S.QUEUED)


def test_a_piece_that_overlaps_stored_bytes_or_changes_the_total_is_refused(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", 0.0)
    spool.open()
    try:
        recv = lambda *ps: spool.run_sync(Spool.op_receive(list(ps)))     # noqa: E731
        assert recv(_cut(0, 1000, 3000), _cut(2000, 1000, 3000)) == [True, True]
        # the same cut again is a duplicate; the missing middle piece fits exactly
        assert recv(_cut(0, 1000, 3000)) == [False]
        assert recv(_cut(1000, 1000, 3000)) == [True]
        # a neighbour whose pieces contradict the stored ones: refused with the reason, nothing stored
        over = recv(_cut(500, 1000, 3000, "m8"), _cut(1200, 100, 3000, "m8"))
        assert over == [True, "byte range 1200+100 overlaps the stored range 500+1000"]
        assert "overlaps the stored range 0+1000" in recv(_cut(999, 1, 3000))[0]
        assert "overlaps the stored range 500+1000" in recv(_cut(0, 600, 3000, "m8"))[0]      # the next one
        assert recv(_cut(1500, 500, 4000, "m8"))[0] == ("total size 4000 differs from the 3000 bytes of the "
                                                        "message's other pieces")
        # within one batch too
        assert recv(_cut(0, 100, 100, "m9"), _cut(50, 50, 100, "m9"))[1].startswith("byte range 50+50 overlaps")
        rows = spool.run_sync(lambda c: c.execute("SELECT msg_id, off FROM frag ORDER BY msg_id, off").fetchall())
        assert rows == [("m7", 0), ("m7", 1000), ("m7", 2000), ("m8", 500), ("m9", 0)]
    finally:
        spool.close()


def test_prune_forgets_expired_messages_and_keeps_what_can_still_arrive(tmp_path: Path) -> None:
    import time as _time

    from node.piece import Piece
    from node.states import PieceState as S
    spool = Spool(tmp_path / "s.db", 0.0)
    spool.open()
    now = _time.time()
    try:
        def whole(msg: str, expires: float) -> Piece:
            return Piece(msg, "me", 0, 3, 1, "n1", "", [""], 1, 0.0, expires, "", 1, b"abc", state=S.WHOLE)
        assert spool.run_sync(Spool.op_receive([whole("old", now + 100), whole("live", now + 100)])) == [True, True]
        spool.run_sync(lambda c: c.execute("UPDATE done SET expires_ts = ? WHERE msg_id = 'old'", (now - 100,)))
        spool.run_sync(Spool.op_ndr_once("old", "n9", now - 100))
        spool.run_sync(Spool.op_ndr_once("live", "n9", now + 100))
        spool.run_sync(Spool.op_origin("o-old", "", ["n9"], 3, 1, 0.0, now - 100))
        spool.run_sync(Spool.op_origin("o-held", "", ["n9"], 3, 1, 0.0, now - 100))
        spool.run_sync(Spool.op_insert([Piece("o-held", "n9", 0, 3, 0, "me", "", [""], 1, 0.0, now - 100, "", 1,
                                              b"abc")]))
        spool.run_sync(Spool.op_prune(now - 60))
        left = spool.run_sync(lambda c: {t: sorted(r[0] for r in c.execute(f"SELECT msg_id FROM {t}"))
                                         for t in ("done", "ndr", "origin")})
        # what expired went; a held piece keeps its message's origin row (recovery would drop it otherwise)
        assert left == {"done": ["live"], "ndr": ["live"], "origin": ["o-held"]}
        # a late duplicate of a live message is still recognised
        assert spool.run_sync(Spool.op_receive([whole("live", now + 100)])) == [False]
    finally:
        spool.close()


def test_an_old_spool_gains_the_expiry_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE done(msg_id TEXT, dst TEXT, outcome TEXT, ts REAL, PRIMARY KEY(msg_id, dst)) WITHOUT ROWID")
    conn.execute("CREATE TABLE ndr(msg_id TEXT, dst TEXT, PRIMARY KEY(msg_id, dst)) WITHOUT ROWID")
    conn.execute("INSERT INTO done VALUES ('m1', 'n9', 'delivered', 1.0)")
    conn.commit()
    conn.close()
    spool = Spool(path, 0.0)
    spool.open()
    try:
        # a row from before the column is kept for FORGET_UNDATED from its ts (1970)
        spool.run_sync(Spool.op_prune(time.time() - 60))
        assert spool.run_sync(lambda c: c.execute("SELECT COUNT(*) FROM done").fetchone()[0]) == 0
        assert spool.run_sync(Spool.op_ndr_once("m1", "n9", 5.0)) is True
    finally:
        spool.close()


def test_a_deferred_change_rides_the_next_commit_or_commits_alone_when_due(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db", commit_window=0.0)
    spool.open()
    try:
        spool.run_sync(lambda c: c.execute("CREATE TABLE t(x)"))
        before = spool.commits
        spool.defer(lambda c: c.execute("INSERT INTO t VALUES (1)"), within=5.0)
        # the next operation runs after it, in the same commit
        assert spool.run_sync(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0]) == 1
        assert spool.commits == before + 1
        within = 0.2
        spool.defer(lambda c: c.execute("INSERT INTO t VALUES (2)"), within)
        t0 = time.monotonic()
        while spool.commits == before + 1 and time.monotonic() - t0 < 20 * within:
            time.sleep(within / 20)
        assert spool.commits == before + 2 and time.monotonic() - t0 >= within * 0.9    # alone, once due
        spool.defer(lambda c: c.execute("INSERT INTO t VALUES (3)"), within=60.0)
    finally:
        spool.close()                     # a change still deferred is committed before the spool closes
    with sqlite3.connect(tmp_path / "spool.db") as c:
        assert [x for (x,) in c.execute("SELECT x FROM t ORDER BY x")] == [1, 2, 3]


def test_the_commit_window_is_waited_only_while_work_is_flowing(tmp_path: Path) -> None:
    window = 0.5
    spool = Spool(tmp_path / "spool.db", commit_window=window)
    spool.open()
    try:
        t0 = time.monotonic()
        spool.run_sync(lambda c: None)            # the writer was idle: nobody to wait for
        assert time.monotonic() - t0 < window / 2

        async def burst() -> int:
            before = spool.commits
            await asyncio.gather(*(spool.run(lambda c: None) for _ in range(50)))
            return spool.commits - before
        assert asyncio.run(burst()) <= 3          # what queued meanwhile shares commits
    finally:
        spool.close()


def test_reads_asked_while_the_reader_is_busy_come_back_together_and_fail_alone(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    spool.open()
    slow = 0.2
    try:
        async def go() -> tuple[list[bool], str, list[int]]:
            gate = threading.Event()
            first = spool.read(lambda c: gate.wait(30) and 1)
            await asyncio.sleep(0.05)                    # the reader thread is busy with `first`

            def bad(c: sqlite3.Connection) -> int:
                raise sqlite3.OperationalError("no such table: nowhere")
            waiting = [spool.read(lambda c: 2), spool.read(bad),
                       spool.read(lambda c: time.sleep(slow) or 3), spool.read(lambda c: time.sleep(slow) or 4)]
            gate.set()
            assert await first == 1
            assert await waiting[0] == 2
            # the reads that waited ran as one job on the reader thread and came back in one callback: the
            # slow ones are done too (one hand-off per read would deliver the fast one alone, `slow` earlier)
            together = [f.done() for f in waiting]
            with pytest.raises(sqlite3.OperationalError) as err:
                await waiting[1]
            return together, str(err.value), [await waiting[2], await waiting[3]]
        together, error, rest = asyncio.run(go())
    finally:
        spool.close()
    assert together == [True, True, True, True]
    assert error == "no such table: nowhere" and rest == [3, 4]      # the failing read fails alone


def test_one_transaction_wakes_the_event_loop_once(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    spool.open()
    loop = asyncio.new_event_loop()
    wakes = []
    real = loop.call_soon_threadsafe

    def counted(*args, **kw):
        wakes.append(threading.current_thread().name)
        return real(*args, **kw)
    loop.call_soon_threadsafe = counted        # type: ignore[method-assign]
    try:
        async def go() -> list[int]:
            gate = threading.Event()
            held = spool.run(lambda c: gate.wait(30))
            await asyncio.sleep(0.05)                   # the writer is inside `held`: the next ones queue up
            ops = [spool.run(lambda c, i=i: i) for i in range(50)]
            gate.set()
            await held
            return list(await asyncio.gather(*ops))
        assert loop.run_until_complete(go()) == list(range(50))      # each caller its own result, in order
    finally:
        loop.close()
        spool.close()
    # `held` alone, then the 50 together: a wake-up per transaction, not one per operation
    assert wakes.count("spool-writer") == 2
