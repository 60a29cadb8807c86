"""Route selection with hysteresis: which next hop each destination uses, given the link-state graph.

A route moves to another next hop only when the new path is cheaper by more than the `hysteresis`
fraction of the best path through the current next hop (or there is none), so two nearly equal paths
whose measured costs wobble do not make messages alternate between them. Hysteresis must not make
loops: a node keeps its current next hop N for D only while N is strictly closer to D than this
node is (dist(N, D) < dist(me, D), in the map every node shares). Along the next hops actually in
use the distance then falls at every hop, so a copy can never come back (once the maps agree;
while an advert is still on its way a short loop is possible, and the spool's hop-aware duplicate
check keeps such a copy instead of dropping it). A destination that becomes
unreachable keeps its next hop at cost math.inf: its messages wait queued for that neighbour
instead of becoming orphans, and move as soon as a route appears again.

Ties: an exact cost tie keeps the current next hop (a move with zero gain is a flap, and hysteresis
is there to stop flaps). The natural-order first hop (spf.py) decides only when a route is chosen
afresh (a new destination, a current hop with no path any more) and during the start-up settle
window: until `settle` seconds after the last link this node had never seen appeared in its map. In
that window the map is still filling and links still cost their one-quantum placeholder, so which
path got there first says nothing; the natural order makes the table the same whatever order
adverts and first measurements arrived in (Gunduz's Table 3 has b1 reach b20 via b2 on a tie).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from node.routing.spf import Graph, Path, natural_key, shortest_paths


@dataclass
class Route:
    next_hop: str
    cost: float                 # math.inf while the destination is unreachable (the route is kept)
    path: tuple[str, ...]       # from this node to the destination, both included


class RouteSelector:
    def __init__(self, me: str, hysteresis: float, settle: float = 0.0) -> None:
        self.me = me
        self.hysteresis = hysteresis
        self.settle = settle                    # seconds of the start-up settle window (see above)
        self.routes: dict[str, Route] = {}
        self._seen: set[tuple[str, str]] = set()    # every link ever in a graph passed to update()
        self._settle_until: float | None = None

    def update(self, graph: Graph, now: float | None = None) -> dict[str, tuple[Route | None, Route]]:
        """Recompute every route; returns {dst: (old, new)} for those whose next hop or cost changed.

        `now` (seconds, any clock the caller keeps to) places the update in the settle window; without
        it exact ties always keep the current next hop.
        """
        settling = False
        if now is not None:
            links = {(u, v) for u, vs in graph.items() for v in vs}
            if not links <= self._seen:
                self._seen |= links
                self._settle_until = now + self.settle
            settling = self._settle_until is not None and now <= self._settle_until
        best = shortest_paths(graph, self.me)
        from_hop: dict[str, dict[str, Path]] = {}

        def paths_from(n: str) -> dict[str, Path]:      # a kept next hop's own shortest paths, once each
            if n not in from_hop:
                from_hop[n] = shortest_paths(graph, n) if n in graph else {}
            return from_hop[n]

        changed: dict[str, tuple[Route | None, Route]] = {}
        for dst in best.keys() | self.routes.keys():
            old = self.routes.get(dst)
            new = self._choose(graph, dst, old, best.get(dst), paths_from, settling)
            self.routes[dst] = new
            if old is None or old.next_hop != new.next_hop or old.cost != new.cost:
                changed[dst] = (old, new)
        return changed

    def table(self) -> list[tuple[str, Route]]:
        return sorted(self.routes.items(), key=lambda item: natural_key(item[0]))

    def _choose(self, graph: Graph, dst: str, old: Route | None, best: Path | None,
                paths_from, settling: bool) -> Route:
        if old is None:
            assert best is not None     # update only asks for destinations in one of the two
            return _route(best)
        if best is None:
            return Route(old.next_hop, math.inf, old.path)
        if best.next_hop == old.next_hop:
            return _route(best)
        hop = old.next_hop
        if dst == hop:
            rest: tuple[str, ...] = (hop,)
            beyond = 0.0
        else:
            via = paths_from(hop).get(dst)
            rest, beyond = (via.nodes, via.cost) if via is not None else ((), math.inf)
        current = round(graph.get(self.me, {}).get(hop, math.inf) + beyond, 9)
        # Not strictly closer than we are: keeping it could send copies round in a loop.
        if not math.isfinite(current) or beyond >= best.cost:
            return _route(best)
        # Rounded like path costs, so float noise in the product cannot decide a borderline case.
        if best.cost < round(current * (1.0 - self.hysteresis), 9):
            return _route(best)
        # An exact tie keeps the current hop, except while the map settles (see the module's doc).
        if settling and best.cost == current and natural_key(best.next_hop) < natural_key(hop):
            return _route(best)
        return Route(hop, current, (self.me, *rest))


def _route(p: Path) -> Route:
    return Route(p.next_hop, p.cost, p.nodes)
