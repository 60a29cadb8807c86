"""Spools as a node leaves them at teardown, written with the node's own spool code (for checker tests)."""
from __future__ import annotations

from pathlib import Path

from node.piece import Piece
from node.spool import Spool

T0 = 1_700_000_000.0


def piece(msg_id: str, dst: str, state: str = "queued", off: int = 0, kind: str = "", total: int = 10) -> Piece:
    """Ten bytes at `off` of a message of `total` bytes (by default the whole message, in one piece)."""
    return Piece(msg_id, dst, off, total, 1, "n1", "user", ["user"], 1, T0, T0 + 3600, kind, 1, b"x" * 10, state)


def write_spool(path: Path, pieces: list[Piece] = (), delivered: list[tuple[str, str]] = (),
                origins: list[tuple[str, str, list[str]]] = (), keep_open: bool = False) -> Spool:
    """A spool as a node leaves it: held pieces (frag), deliveries (done), acceptances (origin)."""
    spool = Spool(path)
    spool.open()
    if pieces:
        spool.run_sync(Spool.op_insert(list(pieces)))
    for msg_id, dst in delivered:
        spool.run_sync(lambda c, m=msg_id, d=dst: c.execute("INSERT INTO done(msg_id, dst, outcome, ts) VALUES (?,?,?,?)", (m, d, "delivered", T0)))
    for msg_id, originator, dsts in origins:
        spool.run_sync(Spool.op_origin(msg_id, originator, dsts, 100, 1, T0, T0 + 3600))
    if not keep_open:
        spool.close()
    return spool
