"""The consumer's pool tables in the node's spool (one SQLite file, one writer: node/spool.py).

  pool_seq   per (consumer, application): the sequence number of the last event sent to that application. It
             is advanced in the event's own transaction (with its publications: node/pools/sender.py), so after
             a crash the numbers go on exactly where the stored events end: no gap, no number twice.
  pool_map   per consumer: the assignment in force (app -> instance, each with the map version that put it
             there), the newest assignment accepted (it may wait for an instance's subscription to be known
             here), the highest controller term seen and the fences of moves made but not yet published, so a
             restarted consumer neither moves an application, nor takes an older term's word, nor forgets to
             tell an instance where its share begins.

Every function returns an operation for `Spool.run`: it runs inside the writer's transaction.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

from node.broker.broker import TransformRefused
from node.spool import Op

SCHEMA = """
CREATE TABLE IF NOT EXISTS pool_seq(consumer TEXT NOT NULL, app TEXT NOT NULL, seq INTEGER NOT NULL,
  PRIMARY KEY(consumer, app)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pool_map(consumer TEXT PRIMARY KEY, term INTEGER NOT NULL, version INTEGER NOT NULL,
  in_force TEXT NOT NULL, wanted TEXT NOT NULL, unsent TEXT NOT NULL);
"""


class SeqConflict(TransformRefused):
    """The stored sequence number is not the one the event was numbered after (nothing is stored)."""


@dataclass
class Saved:
    """What a consumer finds in its spool at start."""
    seqs: dict[str, int] = field(default_factory=dict)              # app -> last sequence number sent
    term: int = 0                                                    # the highest controller term seen
    version: int = 0                                                 # the newest map version accepted
    in_force: dict[str, list] = field(default_factory=dict)         # app -> [instance, map version]
    wanted: dict = field(default_factory=dict)                       # the newest assignment accepted (as sent)
    unsent: list[dict] = field(default_factory=list)                 # fences not yet published


def op_create(consumer: str) -> Op:
    """Create the tables (when missing); returns `consumer`'s Saved state."""
    def op(c: sqlite3.Connection) -> Saved:
        for statement in SCHEMA.split(";"):      # not executescript: it would commit the writer's transaction
            if statement.strip():
                c.execute(statement)
        saved = Saved(seqs=dict(c.execute("SELECT app, seq FROM pool_seq WHERE consumer=?", (consumer,))))
        row = c.execute("SELECT term, version, in_force, wanted, unsent FROM pool_map WHERE consumer=?",
                        (consumer,)).fetchone()
        if row is not None:
            saved.term, saved.version = int(row[0]), int(row[1])
            saved.in_force, saved.wanted, saved.unsent = json.loads(row[2]), json.loads(row[3]), json.loads(row[4])
        return saved
    return op


def op_advance(consumer: str, seqs: dict[str, tuple[int, int]]) -> Op:
    """Set app -> (expected old, new) sequence numbers in the event's transaction; raises SeqConflict when a
    stored number is not the expected old one."""
    def op(c: sqlite3.Connection) -> None:
        for app, (old, new) in sorted(seqs.items()):
            row = c.execute("SELECT seq FROM pool_seq WHERE consumer=? AND app=?", (consumer, app)).fetchone()
            have = 0 if row is None else int(row[0])
            if have != old:
                raise SeqConflict(f"sequence of {consumer}/{app} is {have} in the spool, not {old}")
            c.execute("INSERT OR REPLACE INTO pool_seq VALUES (?,?,?)", (consumer, app, new))
    return op


def op_save_map(consumer: str, term: int, version: int, in_force: dict[str, list], wanted: dict,
                unsent: list[dict]) -> Op:
    def op(c: sqlite3.Connection) -> None:
        c.execute("INSERT OR REPLACE INTO pool_map VALUES (?,?,?,?,?,?)",
                  (consumer, term, version, json.dumps(in_force, sort_keys=True), json.dumps(wanted, sort_keys=True),
                   json.dumps(unsent, sort_keys=True)))
    return op
