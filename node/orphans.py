"""The copies this node keeps without a next hop (orphans): headers in memory, payloads in the spool, bytes capped.

A piece becomes an orphan when no route leads on from here or its next hop refused it for good; it waits for
a route or rule change (node/routing/cache.py `reroute`) until its lifetime ends (node/expiry.py), which is
when its copy is reported. Its bytes stay in the spool: the link reads them when it sends the piece
(node/payloads.py), so an orphan costs memory for its header only (the first piece of a copy keeps its bytes
when the router's rules read message bodies, as at recovery).

`limits.max_orphan_bytes` bounds what this node takes on that would become orphans: beyond it a neighbour's
piece is refused "not now" and a message this node originates "congested". A piece already stored that turns
into an orphan (a refusal, a route withdrawn) is kept whatever the count: it was accepted.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from node.piece import Piece

Key = tuple[str, str, int]


class Orphans(Mapping[Key, Piece]):
    """The engine's orphans by piece key, and their bytes (see the module docstring)."""

    def __init__(self, max_bytes: int, keep_first_bytes: bool = False) -> None:
        self.max_bytes = max_bytes
        self.keep_first_bytes = keep_first_bytes
        self.bytes = 0
        self._pieces: dict[Key, Piece] = {}

    def add(self, p: Piece) -> None:
        """Keep `p` (stored in the spool) as an orphan, without its bytes in memory."""
        old = self._pieces.pop(p.key, None)
        if old is not None:
            self.bytes -= old.size
        if not (self.keep_first_bytes and p.off == 0):
            p.data = None          # p.size stays: the link reads the bytes when it sends the piece
        self._pieces[p.key] = p
        self.bytes += p.size

    def pop(self, key: Key, default: Piece | None = None) -> Piece | None:
        p = self._pieces.pop(key, None)
        if p is None:
            return default
        self.bytes -= p.size
        return p

    def full(self, more: int) -> str | None:
        """Why `more` bytes of new orphans may not be taken on now, or None."""
        if self.bytes + more > self.max_bytes:
            return f"{self.bytes} bytes of copies without a route are kept here (limit {self.max_bytes})"
        return None

    def __getitem__(self, key: Key) -> Piece:
        return self._pieces[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._pieces)

    def __len__(self) -> int:
        return len(self._pieces)
