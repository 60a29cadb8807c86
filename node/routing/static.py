"""A fixed next-hop table: from the node config, replaceable through the Control service."""
from __future__ import annotations

from typing import Callable, Iterable

from node.spool import Piece


class StaticRouter:
    """Next hop by destination node; a neighbour is always reachable directly."""

    def __init__(self, neighbours: Iterable[str], routes: dict[str, str]) -> None:
        self.neighbours = set(neighbours)
        self.routes = dict(routes)
        self._watchers: list[Callable[[], None]] = []

    def next_hop(self, copy: Piece) -> str | None:
        return self.hop_for(copy.dst)

    def hop_for(self, dst: str) -> str | None:
        hop = self.routes.get(dst)
        if hop in self.neighbours:
            return hop
        return dst if dst in self.neighbours else None

    def watch(self, changed: Callable[[], None]) -> None:
        self._watchers.append(changed)

    def set_routes(self, routes: dict[str, str]) -> int:
        self.routes = {d: h for d, h in routes.items() if h in self.neighbours}
        for changed in self._watchers:
            changed()
        return len(routes)
