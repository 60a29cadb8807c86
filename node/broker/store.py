"""The broker's tables in the node's spool (one SQLite file, one writer: node/spool.py).

  pub_subscription  durable subscriptions of this node: name, pattern, owner (the user whose token created it;
                    "" for the admin, or anyone when the node has no client tokens)
  pub_queue         publications waiting for a durable subscription's client, in arrival order (`seq`);
                    a row goes when the client acknowledges it (or the publication's lifetime ends)
  pub_seen          (publication, target node) pairs this node has handled, with the broker hops the
                    copy had, until the publication's lifetime ends: duplicates and loops stop here

Every function returns an operation for `Spool.run`: it runs inside the writer's transaction.
"""
from __future__ import annotations

import sqlite3
from typing import Iterable

from node.rpc import link_pb2
from node.spool import Op

SCHEMA = """
CREATE TABLE IF NOT EXISTS pub_subscription(name TEXT PRIMARY KEY, pattern TEXT NOT NULL, created REAL NOT NULL,
  owner TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS pub_queue(seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, pub_id TEXT NOT NULL,
  hops INTEGER NOT NULL, expires_ts REAL NOT NULL, body BLOB NOT NULL, UNIQUE(name, pub_id));
CREATE TABLE IF NOT EXISTS pub_seen(pub_id TEXT NOT NULL, target TEXT NOT NULL, hops INTEGER NOT NULL,
  expires_ts REAL NOT NULL, PRIMARY KEY(pub_id, target)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pub_seen_expiry ON pub_seen(expires_ts);
CREATE INDEX IF NOT EXISTS pub_queue_expiry ON pub_queue(expires_ts);
"""
# (table, column, declaration) added since the first spools: op_create adds them to an older file. A durable
# subscription from before owners becomes the admin's ("").
ADDED_COLUMNS = (("pub_subscription", "owner", "TEXT NOT NULL DEFAULT ''"),)


class AlreadySeen(Exception):
    """Raised inside a transaction: some targets of a planned copy were handled here already (the plan is
    made again without them); nothing of the transaction is kept."""

    def __init__(self, targets: set[str]) -> None:
        super().__init__(f"handled already: {sorted(targets)}")
        self.targets = targets


def op_create() -> Op:
    """Create (or bring up to date) the tables; returns the durable subscriptions: (name, pattern, backlog, owner)."""
    def op(c: sqlite3.Connection) -> list[tuple[str, str, int, str]]:
        for statement in SCHEMA.split(";"):      # not executescript: it would commit the writer's transaction
            if statement.strip():
                c.execute(statement)
        for table, column, declaration in ADDED_COLUMNS:
            if column not in {row[1] for row in c.execute(f"PRAGMA table_info({table})")}:
                c.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        return [(n, p, int(k), o) for n, p, k, o in c.execute(
            "SELECT s.name, s.pattern, (SELECT COUNT(*) FROM pub_queue q WHERE q.name = s.name), s.owner "
            "FROM pub_subscription s ORDER BY s.name")]
    return op


def op_subscribe(name: str, pattern: str, now: float, owner: str) -> Op:
    """Create a durable subscription; returns the rows already queued under its name (its backlog count starts
    there: a publication stored while a subscription of that name was being removed leaves its row behind)."""
    def op(c: sqlite3.Connection) -> int:
        c.execute("INSERT OR IGNORE INTO pub_subscription(name, pattern, created, owner) VALUES (?,?,?,?)",
                  (name, pattern, now, owner))
        return c.execute("SELECT COUNT(*) FROM pub_queue WHERE name=?", (name,)).fetchone()[0]
    return op


def op_unsubscribe(name: str) -> Op:
    """Remove a durable subscription and what waits for it; returns how many publications were dropped."""
    def op(c: sqlite3.Connection) -> int:
        c.execute("DELETE FROM pub_subscription WHERE name=?", (name,))
        return c.execute("DELETE FROM pub_queue WHERE name=?", (name,)).rowcount
    return op


def op_next(name: str, after: int, limit: int) -> Op:
    """Up to `limit` (seq, hops, body) queued for `name` after `after`, in arrival order."""
    def op(c: sqlite3.Connection) -> list[tuple[int, int, bytes]]:
        return [(s, h, bytes(b)) for s, h, b in c.execute(
            "SELECT seq, hops, body FROM pub_queue WHERE name=? AND seq>? ORDER BY seq LIMIT ?", (name, after, limit))]
    return op


def op_ack(name: str, seqs: list[int]) -> Op:
    """Remove acknowledged rows; returns how many were still there (the backlog count goes down by that)."""
    def op(c: sqlite3.Connection) -> int:
        return c.executemany("DELETE FROM pub_queue WHERE name=? AND seq=?", [(name, s) for s in seqs]).rowcount
    return op


def op_expire(now: float) -> Op:
    """Drop queued publications whose lifetime ended and forget publications past theirs; returns the dropped
    queue rows per subscription."""
    def op(c: sqlite3.Connection) -> dict[str, int]:
        dropped = dict(c.execute("SELECT name, COUNT(*) FROM pub_queue WHERE expires_ts < ? GROUP BY name", (now,)))
        if dropped:
            c.execute("DELETE FROM pub_queue WHERE expires_ts < ?", (now,))
        c.execute("DELETE FROM pub_seen WHERE expires_ts < ?", (now,))
        return dropped
    return op


def op_handle(me: str, pub: link_pb2.Publication, hops: int, targets: Iterable[str], queue_for: list[str],
              body: bytes, inbox_id: str | None) -> Op:
    """What handling one publication at this node stores, in the caller's transaction: the targets it is now
    responsible for (raises AlreadySeen for a target handled here already: this node itself, or another one
    unless this copy came back round a loop, with more hops than before, so it must go on), a queue row per
    local durable subscription, and the inbox row it came in gone."""
    targets = list(targets)

    def op(c: sqlite3.Connection) -> None:
        if targets:
            marks = ",".join("?" * len(targets))
            have = dict(c.execute(f"SELECT target, hops FROM pub_seen WHERE pub_id=? AND target IN ({marks})",
                                  (pub.pub_id, *targets)))
            stale = {t for t, h in have.items() if h >= hops or t == me}
            if stale:
                raise AlreadySeen(stale)
            c.executemany("INSERT OR REPLACE INTO pub_seen VALUES (?,?,?,?)",
                          [(pub.pub_id, t, hops, pub.expires_ts) for t in targets])
        if queue_for:
            c.executemany("INSERT OR IGNORE INTO pub_queue(name, pub_id, hops, expires_ts, body) VALUES (?,?,?,?,?)",
                          [(n, pub.pub_id, hops, pub.expires_ts, body) for n in queue_for])
        if inbox_id is not None:
            c.execute("DELETE FROM inbox WHERE msg_id=?", (inbox_id,))
    return op


def op_forget_inbox(inbox_id: str) -> Op:
    def op(c: sqlite3.Connection) -> None:
        c.execute("DELETE FROM inbox WHERE msg_id=?", (inbox_id,))
    return op
