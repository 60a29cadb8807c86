"""A fixed next-hop table: from the node config, replaceable through the Control service."""
from __future__ import annotations

from typing import Callable, Iterable

from node.piece import Piece


class StaticRouter:
    """Next hop by destination node; a neighbour is always reachable directly."""

    reads_body = False        # no rules: recovery needs no message's first bytes

    def __init__(self, neighbours: Iterable[str], routes: dict[str, str]) -> None:
        self.neighbours = set(neighbours)
        self.routes = dict(routes)
        self._watchers: list[Callable[[], None]] = []

    @property
    def by_destination(self) -> bool:
        """next_hop answers by the destination alone (unless a subclass answers otherwise)."""
        return type(self).next_hop is StaticRouter.next_hop

    def next_hop(self, copy: Piece) -> str | None:
        return self.hop_for(copy.dst)

    def hop_for(self, dst: str) -> str | None:
        hop = self.routes.get(dst)
        if hop in self.neighbours:
            return hop
        return dst if dst in self.neighbours else None

    def table(self) -> list[tuple[str, str]]:
        """(destination, next hop) for the neighbours and every routed destination."""
        out = {n: n for n in self.neighbours}
        out.update({d: h for d, h in self.routes.items() if h in self.neighbours})
        return sorted(out.items())

    def attach(self, peers: dict) -> None:
        pass

    def session_changed(self, peer: str, up: bool) -> None:
        pass

    def refused(self, peer: str) -> None:
        pass

    def watch(self, changed: Callable[[], None]) -> None:
        self._watchers.append(changed)

    def set_routes(self, routes: dict[str, str]) -> int:
        self.routes = {d: h for d, h in routes.items() if h in self.neighbours}
        for changed in self._watchers:
            changed()
        return len(routes)
