"""The link-state database: the newest advert of every node, and the network map built from them.

Every node floods an advert of its own links (origin, sequence number, age, costs) over the Link
sessions by the rules of node/flood.py, so after flooding every node holds the same map. A link counts only when both ends list each other (the two-way
check): a node that lost its session to a neighbour withdraws the link at once, and the other end's
stale listing of it is then not enough to route over it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from node.flood import SEQ_LIMIT, Malformed, RecordStore
from node.names import is_node_name
from node.rpc import link_pb2

MAX_LINKS = 4096          # links in one advert (a node has that many neighbours at most)


@dataclass
class Advert:
    origin: str
    seq: int
    born: float                      # monotonic time the origin made it (receipt time minus its age)
    links: dict[str, float] = field(default_factory=dict)

    def same_state(self, other: "Advert") -> bool:
        return self.links == other.links

    def to_frame(self, now: float) -> link_pb2.Frame:
        return link_pb2.Frame(link_state=link_pb2.LinkState(
            origin=self.origin, seq=self.seq, age=max(0.0, now - self.born),
            links=[link_pb2.LinkCost(neighbour=n, cost=c) for n, c in sorted(self.links.items())]))


def advert_from_frame(frame: link_pb2.Frame, now: float) -> Advert | Malformed:
    """The advert in a LinkState frame, or why it is malformed."""
    ls = frame.link_state
    if not is_node_name(ls.origin):
        return Malformed(f"advert origin {ls.origin!r} is not a node name")
    if not (math.isfinite(ls.age) and ls.age >= 0):
        return Malformed(f"advert of {ls.origin} has a bad age")
    if ls.seq >= SEQ_LIMIT:       # a node that counted on from it could not write its next advert (uint64)
        return Malformed(f"advert of {ls.origin} has a sequence number out of range ({ls.seq})")
    if len(ls.links) > MAX_LINKS:
        return Malformed(f"advert of {ls.origin} lists {len(ls.links)} links")
    links: dict[str, float] = {}
    for lc in ls.links:
        if not is_node_name(lc.neighbour) or not (math.isfinite(lc.cost) and lc.cost >= 0):
            return Malformed(f"advert of {ls.origin} has a bad link {lc.neighbour!r}: {lc.cost}")
        links[lc.neighbour] = lc.cost
    return Advert(ls.origin, ls.seq, now - ls.age, links)


class LinkStateDB(RecordStore[Advert]):
    """Newest advert per origin (node/flood.py); `graph()` is the two-way-checked directed map Dijkstra runs on."""

    @property
    def adverts(self) -> dict[str, Advert]:
        return self.records

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
