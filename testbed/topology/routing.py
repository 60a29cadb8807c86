"""Node-level next-hop tables for the message transfer agents (MTAs).

`next_hops` gives node -> destination -> neighbour. Policies:
- shortest: fewest hops; among equal-length first hops one is chosen at random
  from `seed` (the thesis' bidirectional ring: a message to the node opposite
  goes either way);
- unidirectional: rings only; always the successor in topology node order
  (messages travel one way round);
- delay: least total one-way delay (a_to_b.delay in the direction travelled);
  ties broken by hop count, then topology order. Used for intercontinental6.
"""
from __future__ import annotations

import heapq
import random
from collections import deque

from node.errors import UserError
from testbed.topology.model import Topology

POLICIES = ("shortest", "unidirectional", "delay")


def _adjacency(topology: Topology) -> dict[str, list[str]]:
    # neighbours in topology order, computed once (Topology.neighbours scans every link)
    order = {n: i for i, n in enumerate(topology.node_names())}
    return {n: sorted(set(topology.neighbours(n)), key=order.__getitem__) for n in order}


def _hop_distances(adjacency: dict[str, list[str]], names: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for src in names:
        dist = {src: 0}
        queue = deque([src])
        while queue:
            u = queue.popleft()
            for v in adjacency[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        out[src] = dist
    return out


def _shortest(topology: Topology, seed: int) -> dict[str, dict[str, str]]:
    names = topology.node_names()
    adjacency = _adjacency(topology)
    dist = _hop_distances(adjacency, names)
    rng = random.Random(seed)
    table: dict[str, dict[str, str]] = {}
    for src in names:
        nbrs = adjacency[src]
        row: dict[str, str] = {}
        for dst in names:
            if dst == src or dst not in dist[src]:
                continue
            best = [v for v in nbrs if dst in dist[v] and dist[v][dst] == dist[src][dst] - 1]
            row[dst] = best[0] if len(best) == 1 else rng.choice(best)
        table[src] = row
    return table


def _unidirectional(topology: Topology) -> dict[str, dict[str, str]]:
    names = topology.node_names()
    adjacency = _adjacency(topology)
    for i, n in enumerate(names):
        succ = names[(i + 1) % len(names)]
        if succ not in adjacency[n]:
            raise UserError(f"routing: unidirectional needs a ring in node order, but {n} has no link to {succ}.")
    return {n: {d: names[(i + 1) % len(names)] for d in names if d != n} for i, n in enumerate(names)}


def _delay(topology: Topology) -> dict[str, dict[str, str]]:
    names = topology.node_names()
    order = {n: i for i, n in enumerate(names)}
    edges = topology.delay_edges()
    table: dict[str, dict[str, str]] = {}
    for src in names:
        # Dijkstra keyed by (delay, hops, order of first hop): deterministic
        best: dict[str, tuple[float, int, int]] = {}
        first: dict[str, str] = {}
        heap: list[tuple[float, int, int, str, str]] = [(0.0, 0, -1, src, "")]
        while heap:
            d, h, fo, u, f = heapq.heappop(heap)
            if u in best:
                continue
            best[u] = (d, h, fo)
            if u != src:
                first[u] = f
            for v, w in edges[u]:
                if v not in best:
                    nf = v if u == src else f
                    heapq.heappush(heap, (round(d + w, 12), h + 1, order[nf], v, nf))
        table[src] = first
    return table


def next_hops(topology: Topology, policy: str = "shortest", seed: int = 1) -> dict[str, dict[str, str]]:
    """node -> destination -> neighbour to hand the message to."""
    if policy == "shortest":
        return _shortest(topology, seed)
    if policy == "unidirectional":
        return _unidirectional(topology)
    if policy == "delay":
        return _delay(topology)
    raise UserError(f"unknown routing policy {policy!r}: expected one of {', '.join(POLICIES)}.")


def route_length(table: dict[str, dict[str, str]], src: str, dst: str) -> int:
    """Hops from src to dst following the table (raises UserError on a loop or a gap)."""
    hops, here = 0, src
    while here != dst:
        nxt = table.get(here, {}).get(dst)
        if nxt is None:
            raise UserError(f"routing: {here} has no route to {dst}.")
        here, hops = nxt, hops + 1
        if hops > len(table):
            raise UserError(f"routing: the route from {src} to {dst} loops.")
    return hops


def max_route_length(table: dict[str, dict[str, str]]) -> int:
    """The longest route in hops: the number of buffer classes an MTA needs."""
    longest = 0
    destinations = {d for row in table.values() for d in row}
    for dst in destinations:
        known: dict[str, int] = {dst: 0}     # hops to dst, memoised along each walk
        for src in table:
            walk, here = [], src
            while here not in known:
                walk.append(here)
                nxt = table.get(here, {}).get(dst)
                if nxt is None:
                    raise UserError(f"routing: {here} has no route to {dst}.")
                if nxt in walk:
                    raise UserError(f"routing: the route from {src} to {dst} loops.")
                here = nxt
            base = known[here]
            for k, node in enumerate(reversed(walk), start=1):
                known[node] = base + k
            longest = max(longest, known[src])
    return longest
