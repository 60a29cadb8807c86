"""A piece: one stored fragment (or wire chunk) of a message copy, as the spool, the engine and the links see it.

Its states are named once, in node/states.py.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from node.states import PieceState


@dataclass
class Piece:
    """One stored fragment (or wire chunk) of a message copy bound for one destination node."""
    msg_id: str
    dst: str
    off: int
    total: int
    hops: int
    src: str
    originator: str
    users: list[str]
    prio: int
    submit_ts: float
    expires_ts: float
    kind: str
    fragments: int
    # None: the bytes are only in the spool (a piece loaded at recovery); the link writer reads them just
    # before sending (Engine.take_loaded), so a full spool does not have to fit in memory
    data: bytes | None
    state: str = PieceState.QUEUED
    retries: int = field(default=0, compare=False)
    # in memory only (resource management): the buffer this piece holds at this hop, and when it may be sent next
    charge: tuple | None = field(default=None, compare=False, repr=False)
    not_before: float = field(default=0.0, compare=False, repr=False)
    order: int = field(default=0, compare=False, repr=False)     # its link queue's arrival number
    size: int = field(default=-1, compare=False, repr=False)    # len(data), known without the bytes

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = len(self.data)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.msg_id, self.dst, self.off)

    @property
    def mkey(self) -> tuple[str, str]:
        return (self.msg_id, self.dst)

    def row(self) -> tuple:
        return (self.msg_id, self.dst, self.off, self.total, self.hops, self.src, self.originator,
                json.dumps(self.users), self.prio, self.submit_ts, self.expires_ts, self.kind,
                self.fragments, self.state, self.data)


def split(size: int, chunk: int) -> list[tuple[int, int]]:
    """(offset, length) of the pieces of a message; an empty message is one empty piece."""
    if size == 0:
        return [(0, 0)]
    return [(o, min(chunk, size - o)) for o in range(0, size, chunk)]
