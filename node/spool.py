"""The durable spool: SQLite in WAL mode behind one group-committing writer thread.

Every change goes through `Spool.run(op)`: the writer thread gathers the
operations that arrive while the previous fsync is in progress (plus a short
commit window while work is flowing: not for an operation that finds the
writer idle), runs them in ONE transaction, commits (synchronous=FULL, so the
WAL is fsynced) and only then resolves each caller's future. A caller that
awaited `run` therefore knows its change is durable — that is when a
submission is acknowledged and when a neighbour's frame is acked. A change
nobody waits for and a crash may lose (`defer`: deleting pieces the next hop
acked) rides in the next transaction instead of costing an fsync of its own.

Where a piece of a message lives is the `state` column of `frag`, like
Postfix's queues: queued, held, part, orphan (named once, in node/states.py).
Tables `seen` (duplicates by message id, destination and byte range), `done`
(messages delivered or aborted here), `mailbox`, `origin` (what this node
accepted from its users, for Status) and `ndr` (reports already sent).

Mail (kind "") and reports (kind "ndr") are delivered into `mailbox`; a message
of any other kind is a subsystem's (the broker's "pub") and is delivered into
`inbox`, where that subsystem takes it from (its message kind: node/subsystem.py `message_kinds`).
A subsystem keeps its own tables in this file too (node/broker/store.py).
"""
from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import fcntl
import json
import logging
import os
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable

from node.errors import UserError
from node.piece import Piece
from node.states import PieceState

log = logging.getLogger("node.spool")

MAIL_KINDS = ("", "ndr")     # delivered into `mailbox`; every other kind into `inbox`

SCHEMA = """
CREATE TABLE IF NOT EXISTS frag(
  msg_id TEXT NOT NULL, dst TEXT NOT NULL, off INTEGER NOT NULL, total INTEGER NOT NULL,
  hops INTEGER NOT NULL, src TEXT NOT NULL, originator TEXT NOT NULL, users TEXT NOT NULL,
  prio INTEGER NOT NULL, submit_ts REAL NOT NULL, expires_ts REAL NOT NULL, kind TEXT NOT NULL,
  fragments INTEGER NOT NULL, state TEXT NOT NULL, data BLOB NOT NULL,
  PRIMARY KEY(msg_id, dst, off));
CREATE TABLE IF NOT EXISTS seen(msg_id TEXT, dst TEXT, off INTEGER, expires_ts REAL,
  hops INTEGER NOT NULL DEFAULT 0, len INTEGER NOT NULL DEFAULT -1, total INTEGER NOT NULL DEFAULT -1,
  PRIMARY KEY(msg_id, dst, off)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS done(msg_id TEXT, dst TEXT, outcome TEXT, ts REAL, expires_ts REAL NOT NULL DEFAULT 0,
  PRIMARY KEY(msg_id, dst)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mailbox(msg_id TEXT, user TEXT, src TEXT, size INTEGER, fragments INTEGER,
  hops INTEGER, submit_ts REAL, deliver_ts REAL, kind TEXT, payload BLOB, PRIMARY KEY(msg_id, user));
CREATE TABLE IF NOT EXISTS origin(msg_id TEXT PRIMARY KEY, originator TEXT, dsts TEXT, size INTEGER,
  prio INTEGER, submit_ts REAL, expires_ts REAL);
CREATE TABLE IF NOT EXISTS ndr(msg_id TEXT, dst TEXT, expires_ts REAL NOT NULL DEFAULT 0,
  PRIMARY KEY(msg_id, dst)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS setting(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox(msg_id TEXT PRIMARY KEY, kind TEXT NOT NULL, src TEXT NOT NULL,
  hops INTEGER NOT NULL, submit_ts REAL NOT NULL, deliver_ts REAL NOT NULL, payload BLOB NOT NULL);
"""


def _rows(pieces: list[Piece]) -> list[tuple]:
    """Spool rows for pieces; the users JSON is made once per list object (a run's pieces share one)."""
    users: dict[int, str] = {}
    out = []
    for p in pieces:
        u = users.get(id(p.users))
        if u is None:
            u = users[id(p.users)] = json.dumps(p.users)
        out.append((p.msg_id, p.dst, p.off, p.total, p.hops, p.src, p.originator, u, p.prio, p.submit_ts,
                    p.expires_ts, p.kind, p.fragments, p.state, p.data))
    return out


def _spans(pieces: list[Piece]) -> list[tuple[str, str, int, int]]:
    """(msg_id, dst, first offset, last offset) of each stretch of pieces that tile consecutive byte ranges of
    one message copy: a range delete over such a stretch removes exactly these rows, because the pieces of a
    message copy at one hop never overlap (one originator cut them all the same way)."""
    out: list[tuple[str, str, int, int]] = []
    for p in sorted(pieces, key=lambda x: (x.msg_id, x.dst, x.off)):
        if out:
            m, d, a, b = out[-1]
            if m == p.msg_id and d == p.dst and p.off == end:
                out[-1] = (m, d, a, p.off)
                end = p.off + max(1, p.size)
                continue
        out.append((p.msg_id, p.dst, p.off, p.off))
        end = p.off + max(1, p.size)
    return out


_COLS = "msg_id, dst, off, total, hops, src, originator, users, prio, submit_ts, expires_ts, kind, fragments, state, data"
# recovery without the payloads: length() reads a blob's size from the record header, not its pages; the first
# piece of a copy keeps its bytes when `?1` is set (the router's body keyword rules read them)
_COLS_LAZY = _COLS.replace(", data", ", CASE WHEN ?1 AND off = 0 THEN data END, length(data)")


def _piece(row: tuple) -> Piece:
    (msg_id, dst, off, total, hops, src, originator, users, prio, submit_ts, expires_ts, kind,
     fragments, state, data) = row
    return Piece(msg_id, dst, off, total, hops, src, originator, json.loads(users), prio, submit_ts,
                 expires_ts, kind, fragments, bytes(data), PieceState(state))


Op = Callable[[sqlite3.Connection], Any]

# the writer's queue also carries these markers: a deferred change is waiting (`Spool.defer`), and (made by the
# writer itself) the deferred changes are due
_LATER = object()
_LATER_DUE = object()
LATER_RETRY = 1.0      # seconds before deferred changes whose transaction failed are tried again

# (table, column, type, default, then) added since the first spools: open() adds them to an older file, and runs
# `then` once. The `done` rows of a spool from before their expiry column are forgotten FORGET_UNDATED after
# they were made (their message's lifetime is unknown; a week is what such spools kept them).
FORGET_UNDATED = 7 * 86400.0
_ADDED_COLUMNS = (("seen", "hops", "INTEGER", 0, ""), ("seen", "len", "INTEGER", -1, ""),
                  ("seen", "total", "INTEGER", -1, ""),
                  ("done", "expires_ts", "REAL", 0, f"UPDATE done SET expires_ts = ts + {FORGET_UNDATED}"),
                  ("ndr", "expires_ts", "REAL", 0, ""))


def _came_back(c: sqlite3.Connection, p: "Piece", hops_then: int) -> bool:
    """A piece seen here before that is NOT a retransmission: it passed through here with fewer hops and
    has come back round a routing loop (two nodes' maps disagreed for a moment). Dropping it as a
    duplicate would lose it: this node handed its copy on long ago. Only in transit (at its
    destination `done` and the byte ranges keep reassembly exact) and only when no copy is held here."""
    if p.hops <= hops_then or p.state not in (PieceState.QUEUED, PieceState.HELD, PieceState.ORPHAN):
        return False
    if c.execute("SELECT 1 FROM frag WHERE msg_id=? AND dst=? AND off=?", (p.msg_id, p.dst, p.off)).fetchone():
        return False
    log.warning("%s for %s (offset %d) came back with %d hops (%d when it passed here): a routing loop",
                p.msg_id, p.dst, p.off, p.hops, hops_then)
    return True


# Why a piece whose lifetime ended before it arrived is refused. Its duplicate-check rows may be pruned already
# (op_prune), so it cannot be told from a new piece: storing it could deliver a message twice, or report one
# that was delivered. Its sender still holds it and reports it (node/mta.py `refused`).
EXPIRED_ON_ARRIVAL = "lifetime expired before it arrived"

_SEEN_AROUND = """SELECT off, hops, len, total FROM seen WHERE msg_id=?1 AND dst=?2 AND off BETWEEN
  ifnull((SELECT max(off) FROM seen WHERE msg_id=?1 AND dst=?2 AND off < ?3), ?3) AND
  ifnull((SELECT min(off) FROM seen WHERE msg_id=?1 AND dst=?2 AND off > ?4), ?4)"""


class _Ranges:
    """The byte ranges of one message copy stored here, as far as one batch needs them (the seen rows in the
    batch's offset span plus the nearest one on either side), and the copy's total size. Rows from spools
    older than these columns have len/total -1 and are not compared."""

    def __init__(self, rows: list[tuple]) -> None:
        self.spans = {o: n for o, _h, n, _t in rows if n >= 0}
        totals = {t for _o, _h, _n, t in rows if t >= 0}
        self.total = next(iter(totals)) if totals else None
        self.starts = sorted(self.spans)

    def take(self, p: "Piece") -> str | None:
        """Why `p` (an offset not stored yet) cannot be stored, or None (and its range counts from now on)."""
        if self.total is not None and p.total != self.total:
            return f"total size {p.total} differs from the {self.total} bytes of the message's other pieces"
        end = p.off + max(1, p.size)
        k = bisect.bisect_left(self.starts, p.off)
        if k > 0:
            prev = self.starts[k - 1]
            if prev + max(1, self.spans[prev]) > p.off:
                return f"byte range {p.off}+{p.size} overlaps the stored range {prev}+{self.spans[prev]}"
        if k < len(self.starts) and self.starts[k] < end:
            nxt = self.starts[k]
            return f"byte range {p.off}+{p.size} overlaps the stored range {nxt}+{self.spans[nxt]}"
        self.starts.insert(k, p.off)
        self.spans[p.off] = p.size
        self.total = p.total
        return None


def _lazy_pieces(rows) -> list[Piece]:
    """Pieces from _COLS_LAZY rows; the users lists and message ids of a copy's pieces are shared objects (a
    restarted node holds one Piece per stored piece, so what each one costs is what recovery costs)."""
    users: dict[str, list[str]] = {}
    ids: dict[str, str] = {}
    out = []
    for (msg_id, dst, off, total, hops, src, originator, u, prio, submit_ts, expires_ts, kind,
         fragments, state, data, size) in rows:
        lst = users.get(u)
        if lst is None:
            lst = users[u] = json.loads(u)
        msg_id = ids.setdefault(msg_id, msg_id)
        out.append(Piece(msg_id, dst, off, total, hops, src, originator, lst, prio, submit_ts, expires_ts, kind,
                         fragments, data, PieceState(state), size=size))
    return out


class SpoolUnavailable(UserError):
    """The spool cannot be opened now (held by another process, locked, I/O error, disk full): the node does not
    start, and the spool is left as it is."""


class _IntegrityCheckFailed(sqlite3.DatabaseError):
    """PRAGMA quick_check found damage."""


# SQLite's primary result codes that mean the file itself is damaged (extended codes keep them in the low byte)
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


def _damaged(exc: sqlite3.Error) -> bool:
    """True when `exc` says the spool file is damaged, not that it cannot be used now."""
    if isinstance(exc, _IntegrityCheckFailed):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


class SpoolLock:
    """An exclusive lock on `<spool>.lock` beside the spool file, held while a process has the spool open: a
    second node started on the same spool stops before it reads or writes anything in it. The file names the
    holder's pid. (A file of its own: closing a descriptor of the spool file opened beside SQLite's would drop
    SQLite's own locks on it, and a damaged spool file is renamed away.)"""

    def __init__(self, spool: Path) -> None:
        self.path = Path(f"{spool}.lock")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise SpoolUnavailable(f"cannot open the spool lock {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise SpoolUnavailable(f"the spool {spool} is in use by {who} (another node on the same spool?)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)       # closing the descriptor drops the lock
            self._fd = None


class Spool:
    """One SQLite file, one writer thread, group commit; see the module docstring."""

    def __init__(self, path: Path, commit_window: float = 0.002, max_commit: int = 4096) -> None:
        self.path = Path(path)
        self.commit_window = commit_window
        self.max_commit = max_commit
        self._q: queue.SimpleQueue = queue.SimpleQueue()      # no Condition per put: one per operation adds up
        self._thread: threading.Thread | None = None
        self.commits = 0
        self.ops = 0
        # changes nobody waits for, carried by the next transaction (`defer`): guarded, the writer takes them
        self._later: list[Op] = []
        self._later_due = 0.0
        self._later_lock = threading.Lock()
        self.quarantined: Path | None = None     # where a damaged spool file was moved at open()
        # reads of payloads for sending (`read`): their own connection and thread, so they wait neither for
        # the writer's fsync nor block the event loop (WAL: readers and the writer do not block each other)
        self._reader: concurrent.futures.ThreadPoolExecutor | None = None
        self._reads: list[tuple[Op, asyncio.Future, asyncio.AbstractEventLoop]] = []    # waiting for the reader
        self._reading = False          # a reader job is queued or running: it takes what `read` adds meanwhile
        self._reads_lock = threading.Lock()
        self._rconn: sqlite3.Connection | None = None
        self._lock: SpoolLock | None = None

    # -- lifecycle -------------------------------------------------------
    def open(self) -> None:
        """Take the spool's lock, then open it. A damaged file (SQLite says corrupt or not a database, or the
        integrity check fails) is moved aside and the node starts with an empty spool; any other error (locked,
        I/O error, disk full, cannot open) raises SpoolUnavailable and leaves the spool as it is."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolUnavailable(f"cannot open the spool {self.path}: {exc.strerror or exc}") from None
        self._lock = SpoolLock(self.path)
        try:
            conn = self._open_or_quarantine()
        except BaseException:
            self._lock.release()
            self._lock = None
            raise
        self._thread = threading.Thread(target=self._writer, args=(conn,), name="spool-writer", daemon=True)
        self._thread.start()

    def _open_or_quarantine(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.Error as exc:
            if not _damaged(exc):
                raise SpoolUnavailable(f"cannot open the spool {self.path}: {exc}; leaving it as it is") from None
            # a damaged file must not become a crash loop: keep it aside for inspection, start afresh
            self.quarantined = self._quarantine()
            log.error("spool %s is damaged (%s): moved aside to %s; starting with an empty spool",
                      self.path, exc, self.quarantined)
        try:
            return self._connect()
        except sqlite3.Error as exc:
            raise SpoolUnavailable(f"cannot make a new spool {self.path}: {exc}") from None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")   # fsync the WAL at every commit: acks mean durable
            conn.executescript(SCHEMA)
            for table, column, kind, default, then in _ADDED_COLUMNS:       # spools from before these columns
                if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind} NOT NULL DEFAULT {default}")
                    if then:
                        conn.execute(then)
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise _IntegrityCheckFailed("integrity check failed")
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def _quarantine(self) -> Path:
        """Rename the spool file (and its WAL and shared-memory files) with a timestamp."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            f = Path(f"{self.path}{suffix}")
            if f.exists():
                f.rename(Path(f"{target}{suffix}"))
        return target

    def close(self) -> None:
        if self._reader is not None:
            self._reader.submit(self._close_reader)
            self._reader.shutdown(wait=True)
            self._reader = None
        writing = False
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=30)
            writing = self._thread.is_alive()
            self._thread = None
        if self._lock is not None and not writing:
            self._lock.release()          # after the writer's last commit (else at exit): the next process may have it
            self._lock = None

    # -- the group-commit writer --------------------------------------------
    def _writer(self, conn: sqlite3.Connection) -> None:
        stop = False
        busy = False
        while not stop:
            with self._later_lock:
                wait = max(0.0, self._later_due - time.monotonic()) if self._later else None
            try:
                first = self._q.get(timeout=wait)
            except queue.Empty:
                first = _LATER_DUE       # deferred changes waited long enough: they commit alone
            if first is None:
                break
            if first is _LATER:          # a deferred change arrived: wait for work at most until it is due
                continue
            batch = [] if first is _LATER_DUE else [first]
            # the window only while work is flowing (the last transaction carried several operations): one that
            # finds the writer idle has nobody to wait for, and commits at once
            deadline = time.monotonic() + (self.commit_window if busy else 0.0)
            while len(batch) < self.max_commit:
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    left = deadline - time.monotonic()
                    if left <= 0 or not batch:
                        break
                    try:
                        item = self._q.get(timeout=left)
                    except queue.Empty:
                        break
                if item is None:
                    stop = True
                    break
                if item is not _LATER:
                    batch.append(item)
            self._commit(conn, batch)
            busy = len(batch) > 1
        if self._later:
            self._commit(conn, [])       # the deferred changes still waiting, before the spool closes
        conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list) -> None:
        """One transaction: the deferred changes first (so every operation in it sees them), then `batch`."""
        with self._later_lock:
            later, self._later = self._later, []
        results = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op in later:
                conn.execute("SAVEPOINT op")
                try:
                    op(conn)
                    conn.execute("RELEASE op")
                except Exception as exc:  # nobody waits for it: it was allowed to be lost
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    log.warning("a deferred spool change failed: %s", exc)
            for op, _fut, _loop in batch:
                # a savepoint per operation: one bad operation fails alone, the rest commit
                conn.execute("SAVEPOINT op")
                try:
                    results.append((True, op(conn)))
                    conn.execute("RELEASE op")
                except Exception as exc:  # reported to that caller only
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    results.append((False, exc))
            conn.execute("COMMIT")
            self.commits += 1
            self.ops += len(batch) + len(later)
        except Exception as exc:  # the whole transaction failed (disk full...): everyone hears it
            log.error("spool commit failed: %s", exc)
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            results = [(False, exc)] * len(batch)
            if later:                     # kept for a later transaction, not tried again at once
                with self._later_lock:
                    self._later[:0] = later
                    self._later_due = time.monotonic() + LATER_RETRY
        # one callback per event loop for the whole transaction, its operations' results in order (a callback per
        # operation woke the loop once each)
        done: dict[Any, list[tuple[Any, bool, Any]]] = {}
        for (_op, fut, loop), (ok, value) in zip(batch, results):
            if fut is not None:
                done.setdefault(loop, []).append((fut, ok, value))
        for loop, items in done.items():
            loop.call_soon_threadsafe(_resolve_all, items)

    def defer(self, op: Op, within: float) -> None:
        """Run `op` in the next transaction, or in one of its own `within` seconds from now if none comes
        sooner; nobody waits for it. Only for a change a crash may lose without harm: it saves a commit (an
        fsync) when work is flowing, and every operation queued after it sees it done."""
        with self._later_lock:
            first = not self._later
            self._later.append(op)
            if first:
                self._later_due = time.monotonic() + within
        if first:
            self._q.put(_LATER)

    async def flush(self) -> None:
        """Return once the changes deferred so far are committed."""
        if self._later:
            await self.run(lambda c: None)

    def run(self, op: Op) -> "asyncio.Future[Any]":
        """Queue an operation; the returned future resolves once its transaction is durable."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((op, fut, loop))
        return fut

    def read(self, op: Op) -> "asyncio.Future[Any]":
        """Run a read-only operation on the reader connection, beside the writer and off the event loop. Reads
        asked for while the reader thread is busy go to it together and come back in one loop callback: the
        hand-off between threads, not the query, is what a small read costs (a commit wakes several durable
        subscriptions at once, each with a read)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._reads_lock:
            self._reads.append((op, fut, loop))
            start = not self._reading
            self._reading = True
        if start:
            if self._reader is None:
                self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spool-reader")
            try:
                self._reader.submit(self._read_waiting)
            except BaseException:          # the reader is shut down (the spool closed): this read fails alone
                with self._reads_lock:
                    self._reading = False
                    self._reads = [r for r in self._reads if r[1] is not fut]
                raise
        return fut

    def _read_waiting(self) -> None:
        """On the reader thread: every read waiting, in the order asked, until none is left."""
        while True:
            with self._reads_lock:
                batch, self._reads = self._reads, []
                if not batch:
                    self._reading = False
                    return
            done: dict[Any, list[tuple[asyncio.Future, bool, Any]]] = {}
            for op, fut, loop in batch:
                try:
                    result = (fut, True, self._read(op))
                except Exception as exc:      # that caller hears it; the other reads go on
                    result = (fut, False, exc)
                done.setdefault(loop, []).append(result)
            for loop, results in done.items():
                with contextlib.suppress(RuntimeError):      # that loop is closed: nobody waits any more
                    loop.call_soon_threadsafe(_resolve_all, results)

    def _read(self, op: Op) -> Any:
        if self._rconn is None:
            self._rconn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._rconn.execute("PRAGMA query_only=1")
        return op(self._rconn)

    def _close_reader(self) -> None:
        if self._rconn is not None:
            self._rconn.close()
            self._rconn = None

    def run_sync(self, op: Op) -> Any:
        """Blocking variant for start-up and tests outside an event loop."""
        done = threading.Event()
        box: list = []

        class _Loop:  # tiny adapter so the writer can hand the result back to a plain thread
            @staticmethod
            def call_soon_threadsafe(fn: Callable, results: list[tuple[Any, bool, Any]]) -> None:
                box.extend((ok, value) for _fut, ok, value in results)
                done.set()

        self._q.put((op, object(), _Loop))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    # -- operations (each runs inside the writer's transaction) -------------
    @staticmethod
    def op_insert(pieces: list[Piece]) -> Op:
        def op(c: sqlite3.Connection) -> None:
            c.executemany(f"INSERT OR REPLACE INTO frag({_COLS}) VALUES ({','.join('?' * 15)})", _rows(pieces))
        return op

    @staticmethod
    def op_origin(msg_id: str, originator: str, dsts: list[str], size: int, prio: int,
                  submit_ts: float, expires_ts: float) -> Op:
        def op(c: sqlite3.Connection) -> None:
            c.execute("INSERT OR REPLACE INTO origin VALUES (?,?,?,?,?,?,?)",
                      (msg_id, originator, json.dumps(dsts), size, prio, submit_ts, expires_ts))
        return op

    @staticmethod
    def op_receive(pieces: list[Piece], deliver_ts: float = 0.0) -> Op:
        """Store pieces from a neighbour; returns per piece True (new), False (duplicate, dropped) or the reason
        to refuse it: its byte range overlaps one stored before for the same message copy without being that
        same range, or its total size differs from the other pieces' (one originator cut every piece of a
        message the same way; anything else is a broken or forged frame that would corrupt the reassembly).

        A piece whose lifetime is over is refused (EXPIRED_ON_ARRIVAL) unless it is a duplicate of one taken
        here: the clock is read in the writer, so no prune committed before this transaction can have dropped
        rows of a piece it takes (op_prune forgets only what expired before its cut-off).

        A piece in state "whole" (a complete message for this node) is delivered in the same transaction.
        """
        def op(c: sqlite3.Connection) -> list[bool | str]:
            # Batched: one look-up per message copy for `done` and for already-seen byte ranges, then
            # executemany, because per-row statements cost more CPU than the fsync at 10k fragments/s.
            now = time.time()
            out: list[bool | str] = [False] * len(pieces)
            by_msg: dict[tuple[str, str], list[int]] = {}
            for i, p in enumerate(pieces):
                by_msg.setdefault(p.mkey, []).append(i)
            seen_rows, frag_rows, mail_rows, done_rows, inbox_rows = [], [], [], [], []
            for (msg_id, dst), idx in by_msg.items():
                if c.execute("SELECT 1 FROM done WHERE msg_id=? AND dst=?", (msg_id, dst)).fetchone():
                    continue
                offs = [pieces[i].off for i in idx]
                # the seen rows in the batch's offset span and the nearest stored one on either side, in one
                # statement (a Python round trip per query is what costs here)
                rows = c.execute(_SEEN_AROUND, (msg_id, dst, min(offs), max(offs))).fetchall()
                have = {o: h for o, h, _n, _t in rows}
                ranges = _Ranges(rows)
                for i in idx:
                    p = pieces[i]
                    if p.state == PieceState.WHOLE:
                        if done_rows and done_rows[-1][:2] == (msg_id, dst):
                            continue       # the same one-piece message twice in one batch
                        if 0 < p.expires_ts < now:
                            out[i] = EXPIRED_ON_ARRIVAL
                            continue
                        # a one-piece message for this node: straight into the mailbox (`done` dedups it)
                        if p.kind in MAIL_KINDS:
                            for user in p.users or [""]:
                                mail_rows.append((p.msg_id, user, p.src, p.total, p.fragments, p.hops, p.submit_ts,
                                                  deliver_ts, p.kind, p.data))
                        else:
                            inbox_rows.append((p.msg_id, p.kind, p.src, p.hops, p.submit_ts, deliver_ts, p.data))
                        done_rows.append((p.msg_id, p.dst, "delivered", deliver_ts, p.expires_ts))
                        out[i] = True
                        continue
                    if p.off in have and not _came_back(c, p, have[p.off]):
                        continue                  # a retransmission: acked, not stored again
                    if 0 < p.expires_ts < now:
                        out[i] = EXPIRED_ON_ARRIVAL
                        continue
                    if p.off not in have:
                        why = ranges.take(p)
                        if why:
                            out[i] = why
                            continue
                    have[p.off] = p.hops
                    seen_rows.append((p.msg_id, p.dst, p.off, p.expires_ts, p.hops, p.size, p.total))
                    frag_rows.append(p)
                    out[i] = True
            if seen_rows:
                c.executemany("INSERT OR REPLACE INTO seen(msg_id, dst, off, expires_ts, hops, len, total) "
                              "VALUES (?,?,?,?,?,?,?)", seen_rows)
                c.executemany(f"INSERT OR REPLACE INTO frag({_COLS}) VALUES ({','.join('?' * 15)})", _rows(frag_rows))
            if mail_rows:
                c.executemany("INSERT OR IGNORE INTO mailbox VALUES (?,?,?,?,?,?,?,?,?,?)", mail_rows)
            if inbox_rows:
                c.executemany("INSERT OR IGNORE INTO inbox VALUES (?,?,?,?,?,?,?)", inbox_rows)
            if done_rows:
                c.executemany("INSERT OR IGNORE INTO done VALUES (?,?,?,?,?)", done_rows)
            return out
        return op

    @staticmethod
    def op_delete(keys: list[tuple[str, str, int]]) -> Op:
        def op(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM frag WHERE msg_id=? AND dst=? AND off=?", keys)
        return op

    @staticmethod
    def op_delete_pieces(pieces: list[Piece]) -> Op:
        """Delete acknowledged pieces: one range statement per stretch of consecutive byte ranges."""
        spans = _spans(pieces)

        def op(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM frag WHERE msg_id=? AND dst=? AND off BETWEEN ? AND ?", spans)
        return op

    @staticmethod
    def op_set_state(msg_id: str, dst: str, state: str, off: int | None = None) -> Op:
        def op(c: sqlite3.Connection) -> None:
            if off is None:
                c.execute("UPDATE frag SET state=? WHERE msg_id=? AND dst=?", (state, msg_id, dst))
            else:
                c.execute("UPDATE frag SET state=? WHERE msg_id=? AND dst=? AND off=?", (state, msg_id, dst, off))
        return op

    @staticmethod
    def op_deliver(msg_id: str, dst: str, users: list[str], meta: dict, deliver_ts: float) -> Op:
        """Reassemble the parts into the mailbox (or the inbox, for a subsystem's kind), once; returns the
        payload, or None if already done."""
        def op(c: sqlite3.Connection) -> bytes | None:
            if c.execute("SELECT 1 FROM done WHERE msg_id=? AND dst=?", (msg_id, dst)).fetchone():
                return None
            rows = c.execute(f"SELECT off, data FROM frag WHERE msg_id=? AND dst=? AND state='{PieceState.PART}' ORDER BY off",
                             (msg_id, dst)).fetchall()
            payload = b"".join(bytes(d) for _o, d in rows)
            if meta["kind"] in MAIL_KINDS:
                for user in users or [""]:
                    c.execute("INSERT OR IGNORE INTO mailbox VALUES (?,?,?,?,?,?,?,?,?,?)",
                              (msg_id, user, meta["src"], len(payload), meta["fragments"], meta["hops"],
                               meta["submit_ts"], deliver_ts, meta["kind"], payload))
            else:
                c.execute("INSERT OR IGNORE INTO inbox VALUES (?,?,?,?,?,?,?)",
                          (msg_id, meta["kind"], meta["src"], meta["hops"], meta["submit_ts"], deliver_ts, payload))
            c.execute("INSERT OR REPLACE INTO done VALUES (?,?,?,?,?)",
                      (msg_id, dst, "delivered", deliver_ts, meta.get("expires_ts", 0.0)))
            c.execute(f"DELETE FROM frag WHERE msg_id=? AND dst=? AND state='{PieceState.PART}'", (msg_id, dst))
            return payload
        return op

    @staticmethod
    def op_inbox(kind: str) -> Op:
        """(msg_id, payload) of every message of `kind` delivered here that its subsystem has not taken yet,
        oldest first (start-up: what a crash left between delivery and the subsystem's own commit)."""
        def op(c: sqlite3.Connection) -> list[tuple[str, bytes]]:
            return [(m, bytes(p)) for m, p in c.execute(
                "SELECT msg_id, payload FROM inbox WHERE kind=? ORDER BY deliver_ts, msg_id", (kind,))]
        return op

    @staticmethod
    def op_abort(msg_id: str, dst: str, outcome: str, expires_ts: float = 0.0) -> Op:
        def op(c: sqlite3.Connection) -> None:
            c.execute(f"DELETE FROM frag WHERE msg_id=? AND dst=? AND state IN ('{PieceState.PART}','{PieceState.HELD}')",
                      (msg_id, dst))
            c.execute("INSERT OR REPLACE INTO done VALUES (?,?,?,?,?)", (msg_id, dst, outcome, time.time(), expires_ts))
        return op

    @staticmethod
    def op_drop(msg_id: str, dst: str) -> Op:
        def op(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM frag WHERE msg_id=? AND dst=?", (msg_id, dst))
        return op

    @staticmethod
    def op_ndr_once(msg_id: str, dst: str, expires_ts: float = 0.0) -> Op:
        """True the first time a report for this message copy is made here (remembered until it expires)."""
        def op(c: sqlite3.Connection) -> bool:
            return c.execute("INSERT OR IGNORE INTO ndr VALUES (?,?,?)", (msg_id, dst, expires_ts)).rowcount == 1
        return op

    @staticmethod
    def op_ndr_made(msg_id: str, dst: str) -> Op:
        """Whether a report for this message copy was made here already."""
        def op(c: sqlite3.Connection) -> bool:
            return c.execute("SELECT 1 FROM ndr WHERE msg_id=? AND dst=?", (msg_id, dst)).fetchone() is not None
        return op

    @staticmethod
    def op_get_setting(key: str) -> Op:
        """A node's small durable state (e.g. its link-state sequence number), or None."""
        def op(c: sqlite3.Connection) -> str | None:
            row = c.execute("SELECT value FROM setting WHERE key=?", (key,)).fetchone()
            return row[0] if row else None
        return op

    @staticmethod
    def op_set_setting(key: str, value: str) -> Op:
        def op(c: sqlite3.Connection) -> None:
            c.execute("INSERT OR REPLACE INTO setting VALUES (?,?)", (key, value))
        return op

    @staticmethod
    def op_prune(before: float) -> Op:
        """Forget what only matters while a message can still arrive: byte ranges seen, copies delivered or
        aborted, reports made, for messages whose lifetime ended before `before` (a piece that arrives after
        its lifetime is refused, op_receive, so none of them can be taken again); the `origin` row of an
        expired message once no piece of it is held here. Rows without a lifetime (expires_ts 0: a piece
        without one may arrive at any time) stay. Returns how many rows went."""
        def op(c: sqlite3.Connection) -> int:
            n = c.execute("DELETE FROM seen WHERE expires_ts > 0 AND expires_ts < ?", (before,)).rowcount
            n += c.execute("DELETE FROM done WHERE expires_ts > 0 AND expires_ts < ?", (before,)).rowcount
            n += c.execute("DELETE FROM ndr WHERE expires_ts > 0 AND expires_ts < ?", (before,)).rowcount
            n += c.execute("DELETE FROM origin WHERE expires_ts < ? AND NOT EXISTS "
                           "(SELECT 1 FROM frag WHERE frag.msg_id = origin.msg_id)", (before,)).rowcount
            return n
        return op

    @staticmethod
    def op_drop_unaccepted(me: str) -> Op:
        """Delete pieces this node originated (hops 0) for messages it never accepted (no origin row): a large
        submission stores early chunks before the origin row, and a crash may fall between. Returns the count."""
        def op(c: sqlite3.Connection) -> int:
            return c.execute("DELETE FROM frag WHERE hops=0 AND src=? AND msg_id NOT IN (SELECT msg_id FROM origin)",
                             (me,)).rowcount
        return op

    @staticmethod
    def op_load_pieces(payloads: bool = True, first_bytes: bool = False) -> Op:
        """Every stored piece in submission order. payloads=False (recovery): without their bytes (data None,
        size set) except, with first_bytes, the bytes of each copy's first piece."""
        def op(c: sqlite3.Connection) -> list[Piece]:
            if payloads:
                return [_piece(r) for r in c.execute(f"SELECT {_COLS} FROM frag ORDER BY submit_ts, msg_id, off")]
            return _lazy_pieces(c.execute(f"SELECT {_COLS_LAZY} FROM frag ORDER BY submit_ts, msg_id, off",
                                          (int(first_bytes),)))
        return op

    @staticmethod
    def op_payloads(pieces: list[Piece]) -> Op:
        """{key: bytes} of the stored pieces among `pieces` (a piece missing from it is no longer stored): one
        range read per stretch of consecutive byte ranges, as op_delete_pieces deletes them."""
        spans = _spans(pieces)

        def op(c: sqlite3.Connection) -> dict[tuple[str, str, int], bytes]:
            out: dict[tuple[str, str, int], bytes] = {}
            for m, d, a, b in spans:
                for off, data in c.execute("SELECT off, data FROM frag WHERE msg_id=? AND dst=? AND off BETWEEN ? AND ?",
                                           (m, d, a, b)):
                    out[(m, d, off)] = data
            return out
        return op

    @staticmethod
    def op_mailbox(user: str, include_payload: bool, after: tuple[float, str, str] | None = None,
                   limit: int = 0, max_bytes: int = 0) -> Op:
        """(rows, more): mailbox rows in delivery order after the row `after` (deliver_ts, msg_id, user), at
        most `limit` of them and, with payloads, about `max_bytes` (at least one row; 0 = no bound); `more`
        says rows were left out."""
        def op(c: sqlite3.Connection) -> tuple[list[dict], bool]:
            cols = "msg_id, user, src, size, fragments, hops, submit_ts, deliver_ts, kind" + (", payload" if include_payload else "")
            where, args = [], []
            if user:
                where.append("user=?")
                args.append(user)
            if after is not None:
                where.append("(deliver_ts, msg_id, user) > (?, ?, ?)")
                args.extend(after)
            q = (f"SELECT {cols} FROM mailbox" + (" WHERE " + " AND ".join(where) if where else "")
                 + " ORDER BY deliver_ts, msg_id, user" + (f" LIMIT {int(limit) + 1}" if limit else ""))
            names = [s.strip() for s in cols.split(",")]
            out: list[dict] = []
            size = 0
            for r in c.execute(q, args):
                row = dict(zip(names, r))
                size += len(row.get("payload") or b"")
                if out and ((max_bytes and size > max_bytes) or (limit and len(out) == limit)):
                    return out, True
                out.append(row)
            return out, False
        return op

    @staticmethod
    def op_delete_mail(user: str, msg_ids: list[str]) -> Op:
        """Delete `user`'s copies ("": those addressed to the node without a user; never every user's)."""
        def op(c: sqlite3.Connection) -> int:
            return sum(c.execute("DELETE FROM mailbox WHERE msg_id=? AND user=?", (m, user)).rowcount
                       for m in msg_ids)
        return op

    @staticmethod
    def op_status(msg_id: str) -> Op:
        def op(c: sqlite3.Connection) -> dict:
            origin = c.execute("SELECT dsts, size FROM origin WHERE msg_id=?", (msg_id,)).fetchone()
            states = dict(c.execute("SELECT state, COUNT(*) FROM frag WHERE msg_id=? GROUP BY state", (msg_id,)).fetchall())
            done = dict(c.execute("SELECT dst, outcome FROM done WHERE msg_id=?", (msg_id,)).fetchall())
            inbox = c.execute("SELECT COUNT(*) FROM mailbox WHERE msg_id=?", (msg_id,)).fetchone()[0]
            return {"origin": origin, "states": states, "done": done, "mailbox": inbox,
                    "ndr": [d for (d,) in c.execute("SELECT dst FROM ndr WHERE msg_id=?", (msg_id,))]}
        return op


def _resolve_all(results: list[tuple[asyncio.Future, bool, Any]]) -> None:
    for fut, ok, value in results:
        _resolve(fut, ok, value)


def _resolve(fut: asyncio.Future, ok: bool, value: Any) -> None:
    if fut.cancelled():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)
