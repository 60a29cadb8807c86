"""Routing: which neighbour a message copy goes to next (the engine's `router` seam).

The engine asks `Router.next_hop(copy)` once per message copy per hop — never
per piece, so a weighted or keyword rule cannot split one copy over two next
hops, and a held non-fragmenting message has all its pieces at one hop — and
keeps the answer for that copy until the router calls the callback given to
`watch` ("routes changed"); then it asks again for every queued copy and
every orphan. `copy` is the first piece of the copy seen at this node: it
carries the header (msg_id, src, originator, dst, users, prio, kind) and, at
offset 0, the first bytes of the body.

Implementations: `NodeRouter` (router.py: rules first, then a static table
or the dynamic one of dynamic.py) — what a daemon uses; `StaticRouter` (a
next-hop table alone) for tests of the engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from node.piece import Piece
from node.routing.static import StaticRouter


@dataclass(frozen=True)
class CopyHeader:
    """A message copy as the router sees it, for a copy that is not a stored piece yet (a broker's onward copy):
    a Piece answers the same attributes."""
    msg_id: str
    dst: str
    src: str
    originator: str
    prio: int
    kind: str = ""
    users: list[str] = field(default_factory=list)
    off: int = 0
    data: bytes | None = None          # the first bytes of the body (keyword rules), if any


class Router(Protocol):
    def next_hop(self, copy: Piece | CopyHeader) -> str | None:
        """The neighbour to send this copy to, or None when there is no route (the copy becomes an orphan)."""

    def watch(self, changed: Callable[[], None]) -> None:
        """Call `changed` whenever answers of next_hop may have changed."""

    # Optional (read with getattr; without it next_hop is asked, once): `preview(copy)`, next_hop's answer now without
    # committing a choice (a round robin neither advances nor remembers), for a copy the engine may still refuse:
    # a refused copy must not take a turn, or the order in which refused copies come back later skews the shares.

    # Optional (read with getattr, default False): True while next_hop's answer depends on the copy's `dst` alone,
    # so a caller may keep it per destination until `changed` is called (the broker's copies).
    by_destination: bool

    def set_routes(self, routes: dict[str, str]) -> int:
        """Install a destination -> next-hop table from the Control service; returns how many were taken."""

    def attach(self, peers: dict) -> None:
        """The engine's neighbours (name -> node.peer.Peer), given once they exist."""

    def session_changed(self, peer: str, up: bool) -> None:
        """A Link session to `peer` came up or went down."""

    def refused(self, peer: str) -> None:
        """`peer` refused a copy for good (fail-over passes it over for a while)."""


__all__ = ["CopyHeader", "Router", "StaticRouter"]
