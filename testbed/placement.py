"""Which machine runs which host: a minimum cut weighted by link rate, balanced by expected load (pure).

Every link that crosses machines goes through the tunnel between two halves of
the wire emulator, so the placement keeps the fast links inside a machine: the
weight of a link is its rate (the faster of its two directions; an unlimited
link weighs as the fastest limited link of the topology, or 1 when no link is
limited; a LAN links each pair of its members at its rate). Each machine's
share of the expected load follows its cores; a host with a node daemon
counts 1, a daemon-less router 0.1 (it only forwards in the kernel).

`strategy: auto` splits the machines in two groups and the hosts in two sides
whose loads follow the groups' cores (recursive bisection, as METIS'
`-ptype=rb`), each side grown from a peripheral host along its strongest links
and then improved by Kernighan-Lin passes (pair swaps, so the balance stays;
networkx is not a dependency of the project, so the passes are written here).
An explicit `{host: machine}` placement is returned as given once it names
every host, and only known hosts and machines.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from testbed.topology.model import Direction, Topology

DAEMON_LOAD = 1.0
ROUTER_LOAD = 0.1
# KL looks at the best few candidates of each side per swap, not every pair: a pass stays O(n^2) at 500 hosts
CANDIDATES = 8
MAX_PASSES = 20
EPS = 1e-9


class PlacementError(ValueError):
    """A placement that cannot be honoured; the message is one sentence naming the host or machine."""


@dataclass(frozen=True)
class Graph:
    """What the placement weighs: each host's expected load, each host pair's link weight."""

    loads: dict[str, float]                    # host -> expected load (DAEMON_LOAD or ROUTER_LOAD)
    edges: dict[tuple[str, str], float]        # (a, b) with a < b -> weight (bit/s, summed over parallel links)

    def adjacency(self) -> dict[str, dict[str, float]]:
        adj: dict[str, dict[str, float]] = {h: {} for h in self.loads}
        for (a, b), w in self.edges.items():
            adj[a][b] = adj[a].get(b, 0.0) + w
            adj[b][a] = adj[b].get(a, 0.0) + w
        return adj


def graph_of(topo: Topology, daemons: set[str] | list[str]) -> Graph:
    """The placement graph of a Topology (testbed/topology/model.py); `daemons` are the hosts with a daemon."""
    with_daemon = set(daemons)
    rates = [d.rate for link in topo.links for d in (link.a_to_b, link.b_to_a) if d.rate]
    rates += [lan.params.rate for lan in topo.lans if lan.params.rate]
    unlimited = max(rates) if rates else 1.0

    def weight(*dirs: Direction) -> float:
        limited = [d.rate for d in dirs if d.rate]
        # a direction without a limit is as fast as the fastest link: the link weighs that much
        return unlimited if len(limited) < len(dirs) else float(max(limited))

    edges: dict[tuple[str, str], float] = {}

    def add(a: str, b: str, w: float) -> None:
        key = (a, b) if a < b else (b, a)
        edges[key] = edges.get(key, 0.0) + w

    for link in topo.links:
        if link.a != link.b:
            add(link.a, link.b, weight(link.a_to_b, link.b_to_a))
    for lan in topo.lans:
        members = list(dict.fromkeys(lan.members))
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                add(a, b, weight(lan.params))
    loads = {n: DAEMON_LOAD if n in with_daemon else ROUTER_LOAD for n in topo.node_names()}
    return Graph(loads, edges)


def cut_weight(graph: Graph, placement: dict[str, str]) -> float:
    """The summed weight of the links whose ends are on different machines."""
    return sum(w for (a, b), w in graph.edges.items() if placement[a] != placement[b])


def machine_loads(graph: Graph, placement: dict[str, str], machines: dict[str, int]) -> dict[str, float]:
    """machine -> the expected load placed on it (every machine listed, also an empty one)."""
    out = {m: 0.0 for m in machines}
    for host, machine in placement.items():
        out[machine] += graph.loads[host]
    return out


def targets(graph: Graph, machines: dict[str, int]) -> dict[str, float]:
    """machine -> its fair share of the load (proportional to its cores)."""
    total, cores = sum(graph.loads.values()), sum(machines.values())
    return {m: total * c / cores for m, c in machines.items()}


def place(graph: Graph, machines: dict[str, int], explicit: dict[str, str] | None = None) -> dict[str, str]:
    """host -> machine. `machines` maps each machine's name to its cores (in the scenario's order)."""
    if not machines:
        raise PlacementError("a placement needs at least one machine.")
    for name, cores in machines.items():
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise PlacementError(f"machine {name} needs a whole number of cores of at least 1, got {cores!r}.")
    if explicit is not None:
        return _explicit(graph, machines, explicit)
    adj = graph.adjacency()
    return _split(sorted(graph.loads), list(machines), machines, graph.loads, adj)


def _explicit(graph: Graph, machines: dict[str, int], explicit: dict[str, str]) -> dict[str, str]:
    for host, machine in explicit.items():
        if host not in graph.loads:
            raise PlacementError(f"the placement names host {host}, which the topology does not have.")
        if machine not in machines:
            raise PlacementError(f"host {host} is placed on machine {machine}, which is not one of the machines "
                                 f"({', '.join(machines)}).")
    missing = [h for h in graph.loads if h not in explicit]
    if missing:
        raise PlacementError(f"the placement leaves {len(missing)} host(s) unplaced: {', '.join(missing[:12])}"
                             f"{', ...' if len(missing) > 12 else ''}.")
    return {h: explicit[h] for h in graph.loads}


def _split(hosts: list[str], group: list[str], cores: dict[str, int], loads: dict[str, float],
           adj: dict[str, dict[str, float]]) -> dict[str, str]:
    if len(group) == 1 or not hosts:
        return {h: group[0] for h in hosts}
    left, right = group[:len(group) // 2], group[len(group) // 2:]
    share = sum(cores[m] for m in left) / sum(cores[m] for m in group)
    a, b = _bisect(hosts, share, loads, adj)
    return _split(a, left, cores, loads, adj) | _split(b, right, cores, loads, adj)


def _bisect(hosts: list[str], share: float, loads: dict[str, float],
            adj: dict[str, dict[str, float]]) -> tuple[list[str], list[str]]:
    """Two sides of `hosts`, the first carrying about `share` of their load, with a small cut between them."""
    members = set(hosts)
    target = share * sum(loads[h] for h in hosts)
    side_a = _grow(hosts, members, target, loads, adj)
    in_a = {h: h in side_a for h in hosts}
    _kernighan_lin(hosts, in_a, target, loads, adj)
    return [h for h in hosts if in_a[h]], [h for h in hosts if not in_a[h]]


def _peripheral(start: str, members: set[str], adj: dict[str, dict[str, float]]) -> str:
    """A host far from `start` in hops (the last one a breadth-first search reaches)."""
    seen, queue, last = {start}, deque([start]), start
    while queue:
        last = queue.popleft()
        for n in sorted(adj[last]):
            if n in members and n not in seen:
                seen.add(n)
                queue.append(n)
    return last


def _grow(hosts: list[str], members: set[str], target: float, loads: dict[str, float],
          adj: dict[str, dict[str, float]]) -> set[str]:
    """Side A grown from a peripheral host, each time by the outside host most strongly linked to it, until
    its load is as near the target as it gets."""
    side: set[str] = set()
    load = 0.0
    pull: dict[str, float] = {}         # outside host -> its link weight into the side
    while len(side) < len(hosts):
        if pull:
            nxt = min(pull, key=lambda h: (-pull[h], h))
        else:               # the start, or a component the side has no link into: its peripheral host
            rest = [h for h in hosts if h not in side]
            nxt = _peripheral(rest[0], members - side, adj)
        if side and abs(load + loads[nxt] - target) >= abs(load - target):
            break
        side.add(nxt)
        load += loads[nxt]
        pull.pop(nxt, None)
        for n, w in adj[nxt].items():
            if n in members and n not in side:
                pull[n] = pull.get(n, 0.0) + w
    return side


def _kernighan_lin(hosts: list[str], in_a: dict[str, bool], target: float, loads: dict[str, float],
                   adj: dict[str, dict[str, float]]) -> None:
    """Improve the cut between the two sides in place by KL passes of pair swaps; a swap may not take side
    A's load further from the target than the start was (or half a host, whichever is more)."""
    members = set(hosts)
    load_a = sum(loads[h] for h in hosts if in_a[h])
    slack = max(abs(load_a - target), 0.5 * max((loads[h] for h in hosts), default=0.0)) + EPS
    for _ in range(MAX_PASSES):
        # D: external minus internal link weight of each host
        d = {h: sum(w if in_a[n] != in_a[h] else -w for n, w in adj[h].items() if n in members) for h in hosts}
        locked: set[str] = set()
        swaps: list[tuple[str, str]] = []
        total = best = 0.0
        best_k = 0
        load = load_a
        while True:
            free_a = sorted((h for h in hosts if in_a[h] and h not in locked), key=lambda h: (-d[h], h))
            free_b = sorted((h for h in hosts if not in_a[h] and h not in locked), key=lambda h: (-d[h], h))
            pick: tuple[float, str, str] | None = None
            for a in free_a[:CANDIDATES]:
                for b in free_b[:CANDIDATES]:
                    if abs(load - loads[a] + loads[b] - target) > slack:
                        continue
                    gain = d[a] + d[b] - 2.0 * adj[a].get(b, 0.0)
                    if pick is None or gain > pick[0] + EPS:
                        pick = (gain, a, b)
            if pick is None:
                break
            gain, a, b = pick
            for moved in (a, b):
                was_a = in_a[moved]
                for n, w in adj[moved].items():
                    if n in members and n not in locked and n not in (a, b):
                        d[n] += 2.0 * w if in_a[n] == was_a else -2.0 * w
                in_a[moved] = not was_a
            load += loads[b] - loads[a]
            locked.update((a, b))
            swaps.append((a, b))
            total += gain
            if total > best + EPS:
                best, best_k = total, len(swaps)
        for a, b in reversed(swaps[best_k:]):       # keep only the best prefix of the pass
            in_a[a], in_a[b] = True, False
        load_a += sum(loads[b] - loads[a] for a, b in swaps[:best_k])
        if best <= EPS:
            return
