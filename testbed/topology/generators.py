"""Topology generators: scenario topology section -> Topology (nodes, links, LANs).

Every generator is deterministic (none needs randomness; the seed only matters
for routing tie-breaks). Host names are short (<= 10 characters) and safe for
interface and namespace names. `from_scenario` applies `link_defaults` to every
link and then the scenario's per-link overrides.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

from testbed.topology.errors import ParamError   # raised here; the scenario loader catches it from here
from testbed.topology.importers import ImportFailed, Imported, kathara, mininet
from testbed.topology.model import Direction, Lan, Link, Node, Topology


@dataclass(frozen=True)
class Param:
    kind: type            # int, bool, str (one of `choices`, or any text without them) or dict
    default: Any
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] = ()
    path: bool = False    # a file name, relative to the scenario file's folder


# generator -> parameter -> definition (the loader validates `topology.params` against this)
GENERATOR_PARAMS: dict[str, dict[str, Param]] = {
    "star": {"n": Param(int, 4, 1, 250), "lan": Param(bool, False)},
    "cluster": {"n": Param(int, 4, 1, 250), "lan": Param(bool, False)},
    "clusters": {"k": Param(int, 3, 2, 50), "n": Param(int, 3, 1, 50), "gateways": Param(int, 1, 1, 9),
                 "interconnect": Param(str, "mesh", choices=("mesh", "ring"))},
    "ring": {"n": Param(int, 6, 3, 500)},
    "linear": {"n": Param(int, 4, 2, 500)},
    "cdnnet15": {},
    "intercontinental6": {},
    "grid": {"rows": Param(int, 3, 1, 30), "cols": Param(int, 3, 1, 30)},
    "tree": {"depth": Param(int, 2, 1, 8), "fanout": Param(int, 2, 1, 10)},
    "explicit": {},
    # imported topologies (testbed/topology/importers/)
    "mininet": {"file": Param(str, "", path=True), "class": Param(str, ""), "args": Param(dict, {})},
    "kathara": {"lab": Param(str, "", path=True)},
}
IMPORTERS = ("mininet", "kathara")
GENERATORS = tuple(GENERATOR_PARAMS)
MAX_NODES = 500


def _link(a: str, b: str, defaults: Direction, delay: float | None = None) -> Link:
    there, back = copy.deepcopy(defaults), copy.deepcopy(defaults)
    if delay is not None:
        there.delay = back.delay = delay
    return Link(a, b, there, back)


def star(n: int = 4, lan: bool = False, defaults: Direction | None = None, name: str = "star") -> Topology:
    """n hosts n1..nN around a hub host `hub`; with lan=True all n hosts share one bridge segment `lan`."""
    d = defaults or Direction()
    hosts = [Node(f"n{i}") for i in range(1, n + 1)]
    if lan:
        return Topology(name, hosts, [], [Lan("lan", [h.name for h in hosts], copy.deepcopy(d))])
    return Topology(name, [Node("hub", role="hub")] + hosts, [_link("hub", h.name, d) for h in hosts])


def clusters(k: int = 3, n: int = 3, gateways: int = 1, interconnect: str = "mesh",
             defaults: Direction | None = None, name: str = "clusters") -> Topology:
    """k clusters of n hosts c<i>n<j>; each cluster has `gateways` gateway hosts c<i>g<j>.

    Inside a cluster every host links to every gateway and the gateways link to
    each other; gateway j of each cluster links to gateway j of the other
    clusters (interconnect=mesh) or of the next cluster round a ring (ring).
    """
    d = defaults or Direction()
    nodes: list[Node] = []
    links: list[Link] = []
    for i in range(1, k + 1):
        gws = [f"c{i}g{j}" for j in range(1, gateways + 1)]
        hosts = [f"c{i}n{j}" for j in range(1, n + 1)]
        nodes += [Node(g, role="gateway", attrs={"cluster": i}) for g in gws]
        nodes += [Node(h, attrs={"cluster": i}) for h in hosts]
        for x in range(len(gws)):
            for y in range(x + 1, len(gws)):
                links.append(_link(gws[x], gws[y], d))
        links += [_link(g, h, d) for h in hosts for g in gws]
    for j in range(1, gateways + 1):
        if interconnect == "ring":
            pairs = [(i, i % k + 1) for i in range(1, k + 1)] if k > 2 else [(1, 2)]
        else:
            pairs = [(x, y) for x in range(1, k + 1) for y in range(x + 1, k + 1)]
        links += [_link(f"c{x}g{j}", f"c{y}g{j}", d) for x, y in pairs]
    return Topology(name, nodes, links)


def ring(n: int = 6, nodes: list[str] | None = None, defaults: Direction | None = None,
         name: str = "ring") -> Topology:
    """A ring in node order (n1..nN, or the given names): links n1-n2, ..., nN-n1.

    Uni- and bidirectional rings are the same physical ring; direction is a
    routing property (testbed.topology.routing)."""
    d = defaults or Direction()
    names = list(nodes) if nodes else [f"n{i}" for i in range(1, n + 1)]
    links = [_link(names[i], names[(i + 1) % len(names)], d) for i in range(len(names))]
    return Topology(name, [Node(x) for x in names], links)


def linear(n: int = 4, nodes: list[str] | None = None, defaults: Direction | None = None,
           name: str = "linear") -> Topology:
    """A chain n1 - n2 - ... - nN (or the given names in order)."""
    d = defaults or Direction()
    names = list(nodes) if nodes else [f"n{i}" for i in range(1, n + 1)]
    return Topology(name, [Node(x) for x in names], [_link(names[i], names[i + 1], d) for i in range(len(names) - 1)])


# RECONSTRUCTED: Brachman (1989) chapter 6 simulates a 15-node subset of CDNnet,
# the Canadian research network, but its figure is not in the text. This is a
# plausible stand-in: five regions of three cities, each region a triangle, and
# fourteen inter-region links (between neighbouring regions plus long-haul
# chords), 29 links in all, every node of degree >= 3, diameter 3 hops.
CDNNET15_REGIONS: dict[str, list[str]] = {
    "west": ["Vancouver", "Victoria", "Calgary"],
    "prairies": ["Edmonton", "Saskatoon", "Winnipeg"],
    "ontario": ["Toronto", "Ottawa", "Waterloo"],
    "quebec": ["Montreal", "Quebec City", "Sherbrooke"],
    "atlantic": ["Halifax", "Fredericton", "St. John's"],
}
# (node, node) inter-region links; n1..n15 numbered region by region in the order above
CDNNET15_BACKBONE: list[tuple[int, int]] = [
    (3, 4), (1, 6), (6, 7), (4, 8), (8, 10), (9, 11), (12, 13), (10, 14), (3, 7),   # neighbouring regions
    (2, 8), (5, 11), (9, 15), (1, 10), (6, 13),                                    # long-haul chords
]


def cdnnet15(defaults: Direction | None = None, name: str = "cdnnet15") -> Topology:
    """15 hosts n1..n15 in five regional triangles joined by 14 backbone links (RECONSTRUCTED, see above)."""
    d = defaults or Direction()
    nodes: list[Node] = []
    links: list[Link] = []
    i = 0
    for region, cities in CDNNET15_REGIONS.items():
        members = []
        for city in cities:
            i += 1
            nodes.append(Node(f"n{i}", attrs={"city": city, "region": region}))
            members.append(f"n{i}")
        links += [_link(members[0], members[1], d), _link(members[0], members[2], d), _link(members[1], members[2], d)]
    links += [_link(f"n{a}", f"n{b}", d) for a, b in CDNNET15_BACKBONE]
    return Topology(name, nodes, links)


# Gunduz (2006) Table 8, "connection costs" in ms, read as ONE-WAY latencies and
# used as each direction's delay. Why: the thesis measures a link's latency as
# round trip / 2 (section 3) and builds the cost from that latency; and as round
# trips the figures would be physically impossible (Syracuse-Korea is ~11,000 km,
# at least ~110 ms round trip in fibre, yet the cost is 102; England 52 for
# ~5,500 km). Table 9's CGL-San Diego packet travel time of 14-25 ms against
# costs of 29-30 is the one figure pointing the other way; the cost formula's
# constant and jitter terms account for some of that gap.
INTERCONTINENTAL6_COST_MS: list[tuple[str, str, float]] = [
    ("cgl1", "korea", 102.0), ("cgl1", "cgl3", 1.2), ("cgl1", "england", 52.0), ("cgl2", "korea", 99.0),
    ("cgl2", "sandiego", 30.0), ("cgl3", "sandiego", 29.0), ("cgl3", "england", 50.0),
]
# the thesis numbers the brokers 1..6 (its routing examples: 6=England, 1=Korea, 2=CGL1, 5=CGL3)
INTERCONTINENTAL6_NODES: list[tuple[str, str, int]] = [
    ("korea", "Korea", 1), ("cgl1", "CGL1", 2), ("cgl2", "CGL2", 3),
    ("sandiego", "SanDiego", 4), ("cgl3", "CGL3", 5), ("england", "England", 6),
]


def intercontinental6(defaults: Direction | None = None, name: str = "intercontinental6") -> Topology:
    """The six brokers of Gunduz (2006); each direction's one-way delay is the Table 8 cost (see above)."""
    d = defaults or Direction()
    nodes = [Node(n, role="broker", attrs={"broker": label, "number": num}) for n, label, num in INTERCONTINENTAL6_NODES]
    links = [_link(a, b, d, delay=cost / 1000.0) for a, b, cost in INTERCONTINENTAL6_COST_MS]
    return Topology(name, nodes, links)


def grid(rows: int = 3, cols: int = 3, defaults: Direction | None = None, name: str = "grid") -> Topology:
    """rows x cols hosts r<i>c<j>, each linked to its right and lower neighbour."""
    d = defaults or Direction()
    nodes = [Node(f"r{i}c{j}") for i in range(1, rows + 1) for j in range(1, cols + 1)]
    links = []
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            if j < cols:
                links.append(_link(f"r{i}c{j}", f"r{i}c{j + 1}", d))
            if i < rows:
                links.append(_link(f"r{i}c{j}", f"r{i + 1}c{j}", d))
    return Topology(name, nodes, links)


def tree(depth: int = 2, fanout: int = 2, defaults: Direction | None = None, name: str = "tree") -> Topology:
    """A complete tree: root n1, `fanout` children per inner node, `depth` levels below the root (BFS numbering)."""
    d = defaults or Direction()
    nodes = [Node("n1", role="root")]
    links = []
    level = ["n1"]
    count = 1
    for _ in range(depth):
        nxt = []
        for parent in level:
            for _ in range(fanout):
                count += 1
                child = f"n{count}"
                nodes.append(Node(child))
                links.append(_link(parent, child, d))
                nxt.append(child)
        level = nxt
    return Topology(name, nodes, links)


def explicit(nodes: list[str], edges: list[tuple[str, str]], defaults: Direction | None = None,
             name: str = "explicit") -> Topology:
    """The given nodes and edges, in the given order."""
    d = defaults or Direction()
    return Topology(name, [Node(n) for n in nodes], [_link(a, b, d) for a, b in edges])


def imported(generator: str, params: dict[str, Any]) -> Imported:
    """The importer's reading of the file an imported topology names."""
    if generator == "mininet":
        if not params.get("file"):
            raise ImportFailed("file", "generator mininet needs params.file (the Python file with the Topo class)")
        return mininet.load(params["file"], params.get("class") or "", params.get("args") or {})
    if not params.get("lab"):
        raise ImportFailed("lab", "generator kathara needs params.lab (the lab's lab.conf or its folder)")
    return kathara.load(params["lab"])


def node_count(generator: str, params: dict[str, Any], nodes: list[str]) -> int:
    """How many hosts a generator will make (to refuse huge topologies before building them)."""
    p = {k: v.default for k, v in GENERATOR_PARAMS.get(generator, {}).items()} | params
    if generator in IMPORTERS:
        return len(imported(generator, p).nodes)
    if generator in ("ring", "linear") and nodes:
        return len(nodes)
    return {
        "star": lambda: p["n"] + (0 if p["lan"] else 1),
        "cluster": lambda: p["n"] + (0 if p["lan"] else 1),
        "clusters": lambda: p["k"] * (p["n"] + p["gateways"]),
        "ring": lambda: p["n"], "linear": lambda: p["n"],
        "cdnnet15": lambda: 15, "intercontinental6": lambda: 6,
        "grid": lambda: p["rows"] * p["cols"],
        "tree": lambda: sum(p["fanout"] ** i for i in range(p["depth"] + 1)),
        "explicit": lambda: len(nodes),
    }[generator]()


def generate(generator: str, params: dict[str, Any], nodes: list[str], edges: list[tuple[str, str]],
             defaults: Direction, name: str) -> Topology:
    """Dispatch by generator name with validated params (defaults filled here)."""
    if generator not in GENERATOR_PARAMS:
        raise ParamError("generator", f"unknown generator {generator!r}: expected one of {', '.join(GENERATORS)}")
    schema = GENERATOR_PARAMS[generator]
    for key in params:
        if key not in schema:
            raise ParamError(key, f"unknown parameter {key!r} for generator {generator}"
                                  f" (expected {', '.join(schema) or 'no parameters'})")
    p = {k: v.default for k, v in schema.items()} | dict(params)
    if generator in ("ring", "linear") and nodes:
        if "n" in params and params["n"] != len(nodes):
            raise ParamError("n", f"n={params['n']} disagrees with the {len(nodes)} names in topology.nodes")
        p["n"] = len(nodes)
    count = node_count(generator, p, nodes)
    if count > MAX_NODES:
        raise ParamError(next(iter(params), "generator"), f"this makes {count} hosts; at most {MAX_NODES} are supported")
    makers: dict[str, Callable[[], Topology]] = {
        "star": lambda: star(p["n"], p["lan"], defaults, name),
        "cluster": lambda: star(p["n"], p["lan"], defaults, name),
        "clusters": lambda: clusters(p["k"], p["n"], p["gateways"], p["interconnect"], defaults, name),
        "ring": lambda: ring(p["n"], nodes or None, defaults, name),
        "linear": lambda: linear(p["n"], nodes or None, defaults, name),
        "cdnnet15": lambda: cdnnet15(defaults, name),
        "intercontinental6": lambda: intercontinental6(defaults, name),
        "grid": lambda: grid(p["rows"], p["cols"], defaults, name),
        "tree": lambda: tree(p["depth"], p["fanout"], defaults, name),
        "explicit": lambda: explicit(nodes, edges, defaults, name),
        "mininet": lambda: imported(generator, p).topology(defaults, name),
        "kathara": lambda: imported(generator, p).topology(defaults, name),
    }
    return makers[generator]()


def apply_overrides(topo: Topology, overrides: list[Any]) -> None:
    """Set each overridden link's directions (LinkOverride: a, b, a_to_b, b_to_a; None keeps the default)."""
    for ov in overrides:
        link = topo.link(ov.a, ov.b)   # KeyError when there is no such link
        there, back = (ov.a_to_b, ov.b_to_a) if link.a == ov.a else (ov.b_to_a, ov.a_to_b)
        if there is not None:
            link.a_to_b = copy.deepcopy(there)
        if back is not None:
            link.b_to_a = copy.deepcopy(back)


def from_scenario(scenario: Any) -> Topology:
    """The scenario's topology with link_defaults and per-link overrides applied."""
    spec = scenario.topology
    edges = [(l.a, l.b) for l in spec.links] if spec.generator == "explicit" else []
    topo = generate(spec.generator, spec.params, list(spec.nodes), edges, scenario.link_defaults,
                    scenario.name or spec.generator)
    if spec.generator == "explicit":
        apply_overrides(topo, spec.links)
    apply_overrides(topo, scenario.links)
    return topo
