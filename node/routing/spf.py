"""Shortest paths over a directed link-state graph (Dijkstra), with deterministic tie breaking.

A graph is `graph[u][v] = cost of the link u -> v`; a missing entry or math.inf means no link.
Equal-cost paths are common (costs are quantised), and every node must pick the same one for the
same graph, so ties are broken by the first hop in natural name order (b2 before b10), then by the
whole node sequence in natural order. Costs are compared after round(x, 9) so that float noise in
sums (0.1 + 0.2 vs 0.3) cannot turn a tie into a preference.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from node.natural import natural_key   # the tie-break order; routing modules import it from here too

Graph = Mapping[str, Mapping[str, float]]

_PLACES = 9     # decimal places costs are compared at


@dataclass(frozen=True)
class Path:
    cost: float
    next_hop: str
    nodes: tuple[str, ...]      # from the source to the destination, both included


def path_cost(graph: Graph, nodes: Sequence[str]) -> float:
    """The cost of following `nodes` in `graph`; math.inf when one of its links is missing."""
    total = 0.0
    for u, v in zip(nodes, nodes[1:]):
        c = graph.get(u, {}).get(v)
        if c is None or c == math.inf:
            return math.inf
        total += c      # summed in path order, as shortest_paths does, so both give the same float
    return round(total, _PLACES)


def shortest_paths(graph: Graph, src: str) -> dict[str, Path]:
    """The best path from `src` to every node it can reach (src itself excluded)."""
    keys: dict[str, tuple] = {}

    def key(n: str) -> tuple:
        k = keys.get(n)
        if k is None:
            k = keys[n] = natural_key(n)
        return k

    # node -> (rounded cost, first hop's key, sequence of node keys, raw cost, first hop, nodes)
    labels: dict[str, tuple] = {src: (0.0, (), (key(src),), 0.0, "", (src,))}
    heap: list[tuple] = [(0.0, (), (key(src),), src)]
    done: set[str] = set()
    while heap:
        _rc, _hk, seq, u = heapq.heappop(heap)
        if u in done:
            continue        # a worse label pushed before the best one was found
        done.add(u)
        cost_u, hop_u, nodes_u = labels[u][3:]
        for v, c in graph.get(u, {}).items():
            if v in done or c == math.inf:
                continue
            if not c >= 0:      # also catches NaN
                raise ValueError(f"link {u}->{v} has cost {c!r}; costs must be >= 0")
            cost = cost_u + c
            rc = round(cost, _PLACES)
            old = labels.get(v)
            if old is not None and rc > old[0]:
                continue
            hop = v if u == src else hop_u
            hk = key(hop)
            if old is not None and rc == old[0]:
                if hk > old[1]:
                    continue
                seq_v = seq + (key(v),)
                if hk == old[1] and seq_v >= old[2]:
                    continue
            else:
                seq_v = seq + (key(v),)
            labels[v] = (rc, hk, seq_v, cost, hop, nodes_u + (v,))
            heapq.heappush(heap, (rc, hk, seq_v, v))
    return {n: Path(lab[0], lab[4], lab[5]) for n, lab in labels.items() if n != src}
