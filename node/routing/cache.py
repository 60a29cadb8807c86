"""The next hop of every message copy at this node, asked of the router once per copy."""
from __future__ import annotations

import time

from node.routing import Router
from node.piece import Piece


class CopyRoutes:
    """Caches `Router.next_hop` per message copy (msg_id, dst) until `forget_all` (routes changed)."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._preview = getattr(router, "preview", None)
        self._hops: dict[tuple[str, str], list] = {}     # mkey -> [next hop or None, last use (monotonic)]
        self.clock = time.monotonic()    # a coarse clock for last uses (ticked by prune): no clock read per piece

    def hop(self, p: Piece) -> str | None:
        entry = self._hops.get(p.mkey)
        if entry is None:
            entry = self._hops[p.mkey] = [self.router.next_hop(p), self.clock]
        else:
            entry[1] = self.clock
        return entry[0]

    def preview(self, p: Piece) -> str | None:
        """The copy's next hop for a check before it is taken: the kept answer, or the router's preview (not kept,
        so the copy's real pick happens when it is taken, in the order copies are taken)."""
        entry = self._hops.get(p.mkey)
        if entry is not None or self._preview is None:
            return self.hop(p)          # a router without preview commits its answer at the first question
        return self._preview(p)

    def forget_all(self) -> None:
        self._hops.clear()

    def prune(self, idle: float) -> None:
        """Forget copies not looked up for `idle` seconds (their pieces have left, or wait in no queue)."""
        self.clock = time.monotonic()
        cut = self.clock - idle
        for mkey in [k for k, (_h, used) in self._hops.items() if used < cut]:
            del self._hops[mkey]

    def reroute(self, peers: dict, orphans: dict, me: str) -> tuple[list[Piece], list[Piece]]:
        """After the router said "routes changed": forget every answer, take out of each link's queue
        (node.peer.Peer by name) the copies whose next hop is now another, and out of `orphans` (key -> piece)
        those for other nodes (not `me`) that have a route now. Returns (moved, freed): the caller queues both again (and stores the
        freed ones' state)."""
        self.forget_all()
        moved: list[Piece] = []
        for peer in peers.values():
            out = peer.queue.remove_if(lambda p, name=peer.name: self.hop(p) != name)
            # Whole copies move (the router answers per copy); a stream's credits from the old next hop
            # mean nothing at the new one, which grants its own (the old hop closes the stream once it is idle).
            peer.queue.forget_streams({p.mkey for p in out if p.mkey not in peer.queue.message_keys()})
            moved.extend(out)
        freed = [orphans.pop(key) for key, p in list(orphans.items())
                 if p.dst != me and self.hop(p) is not None]
        return moved, freed
