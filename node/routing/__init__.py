"""Routing: which neighbour a message copy goes to next (the engine's `router` seam).

The engine asks `Router.next_hop(copy)` once per message copy per hop — never
per piece, so a weighted or keyword rule cannot split one copy over two next
hops, and a held non-fragmenting message has all its pieces at one hop — and
keeps the answer for that copy until the router calls the callback given to
`watch` ("routes changed"); then it asks again for every queued copy and
every orphan. `copy` is the first piece of the copy seen at this node: it
carries the header (msg_id, src, originator, dst, users, prio, kind) and, at
offset 0, the first bytes of the body.

Implementations: `StaticRouter` (a next-hop table from the config or the
Control service).
"""
from __future__ import annotations

from typing import Callable, Protocol

from node.spool import Piece
from node.routing.static import StaticRouter


class Router(Protocol):
    def next_hop(self, copy: Piece) -> str | None:
        """The neighbour to send this copy to, or None when there is no route (the copy becomes an orphan)."""

    def watch(self, changed: Callable[[], None]) -> None:
        """Call `changed` whenever answers of next_hop may have changed."""

    def set_routes(self, routes: dict[str, str]) -> int:
        """Install a destination -> next-hop table from the Control service; returns how many were taken."""


__all__ = ["Router", "StaticRouter"]
