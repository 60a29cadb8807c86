"""The next hop of every message copy at this node, asked of the router once per copy."""
from __future__ import annotations

import time

from node.routing import Router
from node.piece import Piece


class CopyRoutes:
    """Caches `Router.next_hop` per message copy (msg_id, dst) until `forget_all` (routes changed)."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._hops: dict[tuple[str, str], list] = {}     # mkey -> [next hop or None, last use (monotonic)]
        self.clock = time.monotonic()    # a coarse clock for last uses (ticked by prune): no clock read per piece

    def hop(self, p: Piece) -> str | None:
        entry = self._hops.get(p.mkey)
        if entry is None:
            entry = self._hops[p.mkey] = [self.router.next_hop(p), self.clock]
        else:
            entry[1] = self.clock
        return entry[0]

    def forget_all(self) -> None:
        self._hops.clear()

    def prune(self, idle: float) -> None:
        """Forget copies not looked up for `idle` seconds (their pieces have left, or wait in no queue)."""
        self.clock = time.monotonic()
        cut = self.clock - idle
        for mkey in [k for k, (_h, used) in self._hops.items() if used < cut]:
            del self._hops[mkey]
