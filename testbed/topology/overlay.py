"""The MTA overlay: which hosts run a node daemon and which daemons are MTA neighbours.

Two testbed keys in a scenario's `nodes:` section shape it (both are removed
before the node settings reach node/config.py):

- `daemon: false` (in `nodes.all` or `nodes.<host>`; a host's own value wins):
  the host is a plain IP router. It forwards packets between its links but
  runs no node daemon and gets no node config.
- `mta_neighbours: [n5, n7]` (in `nodes.<host>` only): the host's MTA
  neighbours, adjacent or not. The relation is made symmetric: a host that
  lists neighbours has exactly those plus every host that lists it.

Without `mta_neighbours` the MTA graph is the physical topology with the
daemon-less hosts contracted: two daemon hosts are MTA neighbours when a path
joins them whose inner hosts all run no daemon. Hosts that list neighbours
drop their contracted edges; the others keep the contracted edges among
themselves. Without daemon-less hosts and without lists the MTA graph *is*
the topology (the same object), so node configs are exactly as before.

The overlay is returned as a Topology of the daemon hosts (in topology order)
whose links carry, per direction, the least one-way delay of the physical
paths behind the MTA edge (inner hosts daemon-less for contracted edges, any
hosts for listed ones), so every routing policy of testbed.topology.routing
runs on it unchanged. IP itself still follows the kernel routes of the
address plan (fewest physical hops).
"""
from __future__ import annotations

import heapq
from typing import Any, Iterable, Mapping, Protocol, Sequence

from testbed.topology.model import Direction, Link, Topology


class NodeSettings(Protocol):
    """What the overlay reads of the scenario's `nodes:` section (testbed.scenario.parts.NodesSpec is one);
    a protocol, so that the topology layer does not import the scenario layer above it."""

    @property
    def per_node(self) -> Mapping[str, Mapping[str, Any]]: ...

    def settings_for(self, node: str) -> Mapping[str, Any]: ...

DAEMON_KEY = "daemon"
MTA_NEIGHBOURS_KEY = "mta_neighbours"
# Keys of the scenario's `nodes:` section that the testbed consumes; never passed to the node daemon.
TESTBED_NODE_KEYS = (DAEMON_KEY, MTA_NEIGHBOURS_KEY)


def runs_daemon(nodes: NodeSettings, host: str) -> bool:
    return nodes.settings_for(host).get(DAEMON_KEY, True) is not False


def daemon_hosts(nodes: NodeSettings, names: Sequence[str]) -> list[str]:
    """The hosts that run a node daemon, in the order of `names`."""
    return [n for n in names if runs_daemon(nodes, n)]


def listed_neighbours(nodes: NodeSettings) -> dict[str, list[str]]:
    """host -> the MTA neighbours it lists with `mta_neighbours` (hosts that list none are absent)."""
    return {host: list(s[MTA_NEIGHBOURS_KEY]) for host, s in nodes.per_node.items() if MTA_NEIGHBOURS_KEY in s}


def without_testbed_keys(settings: dict) -> dict:
    """Node settings as node/config.py reads them."""
    return {k: v for k, v in settings.items() if k not in TESTBED_NODE_KEYS}


def _reach(edges: dict[str, list[tuple[str, float]]], src: str, through: set[str] | None) -> dict[str, float]:
    """Least delay from src to every host; only hosts in `through` are passed through (None: any host)."""
    best: dict[str, float] = {}
    heap: list[tuple[float, str]] = [(0.0, src)]
    while heap:
        d, u = heapq.heappop(heap)
        if u in best:
            continue
        best[u] = d
        if u != src and through is not None and u not in through:
            continue        # a daemon host ends the path: the overlay edge stops there
        for v, w in edges[u]:
            if v not in best:
                heapq.heappush(heap, (round(d + w, 12), v))
    del best[src]
    return best


def contracted_neighbours(topology: Topology, daemons: Iterable[str]) -> dict[str, list[str]]:
    """daemon host -> daemon hosts joined to it by a path whose inner hosts all run no daemon."""
    names = topology.node_names()
    keep = set(daemons)
    relays = set(names) - keep
    edges = topology.delay_edges()
    order = {n: i for i, n in enumerate(names)}
    return {u: sorted((v for v in _reach(edges, u, relays) if v in keep), key=order.__getitem__)
            for u in names if u in keep}


def mta_neighbours(topology: Topology, daemons: Sequence[str],
                   listed: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """daemon host -> its MTA neighbours in topology order (see the module docstring for the rule)."""
    listed = listed or {}
    order = {n: i for i, n in enumerate(topology.node_names())}
    out: dict[str, set[str]] = {u: set() for u in daemons}
    for u, vs in contracted_neighbours(topology, daemons).items():
        if u in listed:
            continue
        out[u].update(v for v in vs if v not in listed)
    for u, vs in listed.items():
        for v in vs:
            if v != u and u in out and v in out:
                out[u].add(v)
                out[v].add(u)
    return {u: sorted(vs, key=order.__getitem__) for u, vs in out.items()}


def is_identity(topology: Topology, nodes: NodeSettings) -> bool:
    """True when every host runs a daemon and nobody lists MTA neighbours: the overlay is the topology."""
    names = topology.node_names()
    return len(daemon_hosts(nodes, names)) == len(names) and not listed_neighbours(nodes)


def mta_topology(topology: Topology, nodes: NodeSettings) -> Topology:
    """The MTA graph as a Topology of the daemon hosts (the topology itself when nothing is contracted)."""
    if is_identity(topology, nodes):
        return topology
    names = topology.node_names()
    daemons = daemon_hosts(nodes, names)
    listed = listed_neighbours(nodes)
    graph = mta_neighbours(topology, daemons, listed)
    edges = topology.delay_edges()
    relays = set(names) - set(daemons)
    # Contracted edges weigh the path through relays; listed ones the best path through anything.
    contracted = {u: _reach(edges, u, relays) for u in daemons if u not in listed}
    anywhere: dict[str, dict[str, float]] = {}

    def delay(u: str, v: str) -> float:
        if u not in listed and v not in listed and v in contracted[u]:
            return contracted[u][v]
        if u not in anywhere:
            anywhere[u] = _reach(edges, u, None)
        return anywhere[u].get(v, 0.0)

    order = {n: i for i, n in enumerate(names)}
    links = []
    for u in daemons:
        for v in graph[u]:
            if order[u] < order[v]:
                links.append(Link(u, v, Direction(delay=delay(u, v)), Direction(delay=delay(v, u))))
    return Topology(topology.name, [n for n in topology.nodes if n.name in graph], links)


def first_unreachable(graph: dict[str, list[str]]) -> tuple[str, str] | None:
    """A pair of hosts with no MTA path between them (the first host and one it cannot reach), or None."""
    if not graph:
        return None
    start = next(iter(graph))
    seen, todo = {start}, [start]
    while todo:
        for v in graph[todo.pop()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    missing = [u for u in graph if u not in seen]
    return (start, missing[0]) if missing else None
