"""Payloads of pieces queued without their bytes (recovered after a restart), read for the link writers.

A writer asks for the bytes of the pieces it is about to send: one batch read on the spool's reader thread
(`Spool.read`, one range read per stretch of a message copy). While that batch is written, the rest of the
last copy in it is read ahead: a long message then costs its writer no wait for reading at all. What was
read ahead is kept in a small cache bounded in bytes (oldest dropped first); bytes of a stored piece never
change, so a cached copy is always right.
"""
from __future__ import annotations

import asyncio
import sqlite3

from node.piece import Piece
from node.spool import Op, Spool

Key = tuple[str, str, int]


def op_following(msg_id: str, dst: str, after: int, limit: int) -> Op:
    """{key: bytes} of up to `limit` stored pieces of a message copy after offset `after`, in offset order."""
    def op(c: sqlite3.Connection) -> dict[Key, bytes]:
        return {(msg_id, dst, off): data for off, data in c.execute(
            "SELECT off, data FROM frag WHERE msg_id=? AND dst=? AND off > ? ORDER BY off LIMIT ?",
            (msg_id, dst, after, limit))}
    return op


class PayloadReader:
    """Reads stored payloads for the link writers, with read-ahead per neighbour (see the module docstring)."""

    def __init__(self, spool: Spool, budget: int) -> None:
        self.spool = spool
        self.budget = budget                      # bytes read ahead and not taken yet, about
        self._ahead: dict[Key, bytes] = {}
        self._bytes = 0
        self._reading: dict[str, asyncio.Future] = {}          # per neighbour: the read-ahead in progress
        self._frontier: dict[str, Key] = {}                    # per neighbour: the last piece read ahead
        self.reads = 0              # batch reads a writer waited for
        self.hits = 0               # pieces found read ahead

    async def fill(self, peer: str, lazy: list[Piece]) -> dict[Key, bytes]:
        """{key: bytes} for the pieces of `lazy` still stored (a piece missing from it is gone from the spool)."""
        got = self._take(lazy)
        pending = self._reading.get(peer)
        if len(got) < len(lazy) and pending is not None:
            try:
                await asyncio.shield(pending)     # it may hold this very batch (its callback fills the cache)
            except Exception:
                pass
            got.update(self._take([p for p in lazy if p.key not in got]))
        self.hits += len(got)
        missing = [p for p in lazy if p.key not in got]
        if missing:
            self.reads += 1
            got.update(await self.spool.read(Spool.op_payloads(missing)))
        self._read_ahead(peer, lazy[-1], sum(p.size for p in lazy))
        return got

    def _take(self, lazy: list[Piece]) -> dict[Key, bytes]:
        got = {}
        for p in lazy:
            data = self._ahead.pop(p.key, None)
            if data is not None:
                self._bytes -= len(data)
                got[p.key] = data
        return got

    def _read_ahead(self, peer: str, last: Piece, nbytes: int) -> None:
        """While this batch is written: the next two batches' worth of the copy `last` belongs to."""
        if peer in self._reading or last.size <= 0:
            return
        if self._bytes >= self.budget:
            # full: what was never taken (a copy that expired or moved) goes, oldest first
            while self._bytes > self.budget // 2:
                self._bytes -= len(self._ahead.pop(next(iter(self._ahead))))
        m, d, off = self._frontier.get(peer, ("", "", -1))
        after = off if (m, d) == last.mkey and off > last.off else last.off
        f = self._reading[peer] = self.spool.read(op_following(last.msg_id, last.dst, after,
                                                               max(1, 2 * nbytes // last.size)))
        f.add_done_callback(lambda f: self._arrived(peer, f))

    def _arrived(self, peer: str, f: asyncio.Future) -> None:
        if self._reading.get(peer) is f:
            del self._reading[peer]
        if f.cancelled() or f.exception() is not None:
            return                # a failed read-ahead only costs the writer a read of its own
        rows = f.result()
        for k, data in rows.items():
            if k not in self._ahead:
                self._ahead[k] = data
                self._bytes += len(data)
        if rows:
            self._frontier[peer] = max(rows, key=lambda k: k[2])
