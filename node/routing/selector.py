"""Route selection with hysteresis: which next hop each destination uses, given the link-state graph.

A route moves to another next hop only when the new path is cheaper by more than the `hysteresis`
fraction of the current path's cost (or the current path is broken), so two nearly equal paths whose
measured costs wobble do not make messages alternate between them. A destination that becomes
unreachable keeps its next hop at cost math.inf: its messages wait queued for that neighbour
instead of becoming orphans, and move as soon as a route appears again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from node.routing.spf import Graph, Path, natural_key, path_cost, shortest_paths


@dataclass
class Route:
    next_hop: str
    cost: float                 # math.inf while the destination is unreachable (the route is kept)
    path: tuple[str, ...]       # from this node to the destination, both included


class RouteSelector:
    def __init__(self, me: str, hysteresis: float) -> None:
        self.me = me
        self.hysteresis = hysteresis
        self.routes: dict[str, Route] = {}

    def update(self, graph: Graph) -> dict[str, tuple[Route | None, Route]]:
        """Recompute every route; returns {dst: (old, new)} for those whose next hop or cost changed."""
        best = shortest_paths(graph, self.me)
        changed: dict[str, tuple[Route | None, Route]] = {}
        for dst in best.keys() | self.routes.keys():
            old = self.routes.get(dst)
            new = self._choose(graph, old, best.get(dst))
            self.routes[dst] = new
            if old is None or old.next_hop != new.next_hop or old.cost != new.cost:
                changed[dst] = (old, new)
        return changed

    def table(self) -> list[tuple[str, Route]]:
        return sorted(self.routes.items(), key=lambda item: natural_key(item[0]))

    def _choose(self, graph: Graph, old: Route | None, best: Path | None) -> Route:
        if old is None:
            assert best is not None     # update only asks for destinations in one of the two
            return _route(best)
        if best is None:
            return Route(old.next_hop, math.inf, old.path)
        if best.next_hop == old.next_hop:
            return _route(best)
        current = path_cost(graph, old.path)
        # Rounded like path costs, so float noise in the product cannot decide a borderline case.
        if current == math.inf or best.cost < round(current * (1.0 - self.hysteresis), 9):
            return _route(best)
        # An exact tie goes to the same neighbour however the table got here (the order adverts
        # arrived in must not decide it; Table 3's tie for b20 needs b2): no flap, the rule is fixed.
        if best.cost == current and natural_key(best.next_hop) < natural_key(old.next_hop):
            return _route(best)
        return Route(old.next_hop, current, old.path)


def _route(p: Path) -> Route:
    return Route(p.next_hop, p.cost, p.nodes)
