"""The link-state database: the newest advert of every node, and the network map built from them.

Every node floods an advert of its own links (origin, sequence number, age, costs) over the Link
sessions; a node keeps the advert with the highest sequence number per origin, so after flooding
every node holds the same map. A link counts only when both ends list each other (the two-way
check): a node that lost its session to a neighbour withdraws the link at once, and the other end's
stale listing of it is then not enough to route over it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from node.names import is_node_name
from node.rpc import link_pb2

MAX_LINKS = 4096          # links in one advert (a node has that many neighbours at most)
SEQ_LIMIT = 1 << 63       # sequence numbers at or above are refused: counting on must stay in a uint64


@dataclass
class Advert:
    origin: str
    seq: int
    born: float                      # monotonic time the origin made it (receipt time minus its age)
    links: dict[str, float] = field(default_factory=dict)

    def to_frame(self, now: float) -> link_pb2.Frame:
        return link_pb2.Frame(link_state=link_pb2.LinkState(
            origin=self.origin, seq=self.seq, age=max(0.0, now - self.born),
            links=[link_pb2.LinkCost(neighbour=n, cost=c) for n, c in sorted(self.links.items())]))


def advert_from_frame(ls: link_pb2.LinkState, now: float) -> Advert | str:
    """The advert in a LinkState frame, or why it is malformed."""
    if not is_node_name(ls.origin):
        return f"advert origin {ls.origin!r} is not a node name"
    if not (math.isfinite(ls.age) and ls.age >= 0):
        return f"advert of {ls.origin} has a bad age"
    if ls.seq >= SEQ_LIMIT:       # a node that counted on from it could not write its next advert (uint64)
        return f"advert of {ls.origin} has a sequence number out of range ({ls.seq})"
    if len(ls.links) > MAX_LINKS:
        return f"advert of {ls.origin} lists {len(ls.links)} links"
    links: dict[str, float] = {}
    for lc in ls.links:
        if not is_node_name(lc.neighbour) or not (math.isfinite(lc.cost) and lc.cost >= 0):
            return f"advert of {ls.origin} has a bad link {lc.neighbour!r}: {lc.cost}"
        links[lc.neighbour] = lc.cost
    return Advert(ls.origin, ls.seq, now - ls.age, links)


class LinkStateDB:
    """Newest advert per origin; `graph()` is the two-way-checked directed map Dijkstra runs on."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self.adverts: dict[str, Advert] = {}

    def offer(self, adv: Advert) -> int:
        """Take `adv` if it is newer than what we hold. Returns 1 (taken), 0 (same), -1 (ours is newer)."""
        held = self.adverts.get(adv.origin)
        if held is None or adv.seq > held.seq:
            self.adverts[adv.origin] = adv
            return 1
        return 0 if adv.seq == held.seq else -1

    def expire(self, now: float, keep: str) -> list[str]:
        """Drop adverts older than max_age (their origin stopped refreshing: gone); never `keep`'s own."""
        old = [o for o, a in self.adverts.items() if o != keep and now - a.born > self.max_age]
        for o in old:
            del self.adverts[o]
        return old

    def graph(self) -> dict[str, dict[str, float]]:
        g: dict[str, dict[str, float]] = {}
        for origin, adv in self.adverts.items():
            for peer, cost in adv.links.items():
                back = self.adverts.get(peer)
                if back is not None and origin in back.links:
                    g.setdefault(origin, {})[peer] = cost
        return g

    def nodes(self) -> set[str]:
        return set(self.adverts)
