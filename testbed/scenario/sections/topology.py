"""The `topology` section: generator, its params, node names, explicit links, address pools;
and building the Topology that later sections check their node and link names against."""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from node.names import NODE_NAME_RULE, is_node_name
from testbed.scenario.checks import Check, KeyPath, names_text, show
from testbed.scenario.parts import TopologySpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.scenario.sections.links import link_plain, parse_link_entry
from testbed.topology import generators
from testbed.topology.model import Topology

POOLS = ("data_pool", "loopback_pool", "mgmt_pool")


def check_node_name(c: Check, path: KeyPath, name: Any) -> None:
    if not is_node_name(name):
        c.fail(path, f"expected a node name of {NODE_NAME_RULE}, got {show(name)}")
    if name == "all":
        c.fail(path, "'all' is reserved (nodes.all, workload nodes: all); pick another node name")


def _read(c: Check, raw: Any, s: Scenario) -> None:
    path: KeyPath = ("topology",)
    m = c.mapping(path, raw, ("generator", "params", "nodes", "links") + POOLS)
    spec = TopologySpec()
    spec.generator = c.choice(path + ("generator",), m.get("generator", spec.generator), generators.GENERATORS)
    schema = generators.GENERATOR_PARAMS[spec.generator]
    params = c.mapping(path + ("params",), m.get("params"), schema)
    for key, value in params.items():
        p, d = path + ("params", key), schema[key]
        if d.kind is bool:
            spec.params[key] = c.boolean(p, value)
        elif d.kind is int:
            spec.params[key] = c.integer(p, value, d.low, d.high)
        elif d.kind is dict:
            spec.params[key] = dict(c.mapping(p, value))
        elif d.choices:
            spec.params[key] = c.choice(p, value, d.choices)
        else:
            spec.params[key] = _relative_to(c.source, c.text(p, value)) if d.path else c.text(p, value)
    nodes = c.sequence(path + ("nodes",), m.get("nodes"))
    for i, n in enumerate(nodes):
        check_node_name(c, path + ("nodes", i), n)
        if n in nodes[:i]:
            c.fail(path + ("nodes", i), f"node {n} is listed twice")
    if nodes and spec.generator not in ("explicit", "ring", "linear"):
        c.fail(path + ("nodes",), f"the {spec.generator} generator names its own nodes; "
                                  f"topology.nodes is for explicit, ring and linear")
    spec.nodes = list(nodes)
    for key, d in schema.items():      # fill defaults so the resolved scenario is complete
        spec.params.setdefault(key, d.default)
    if spec.generator in ("ring", "linear") and nodes:
        if "n" in params and params["n"] != len(nodes):
            c.fail(path + ("params", "n"), f"n={params['n']} disagrees with the {len(nodes)} names in topology.nodes")
        spec.params["n"] = len(nodes)
    links = c.sequence(path + ("links",), m.get("links"))
    if links and spec.generator != "explicit":
        c.fail(path + ("links",), "topology.links is for generator: explicit; override generated links in "
                                  "the top-level 'links:' section")
    if spec.generator == "explicit" and not nodes:
        c.fail(path + ("nodes",), "generator explicit needs a list of node names")
    spec.links = [parse_link_entry(c, path + ("links", i), l, s.link_defaults) for i, l in enumerate(links)]
    for key in POOLS:
        if key in m:
            try:
                net = ipaddress.ip_network(c.text(path + (key,), m[key]), strict=False)
            except ValueError:
                net = None
            if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen > 24:
                c.fail(path + (key,), f'expected an IPv4 network of /24 or larger like "10.200.0.0/16", got {show(m[key])}')
            setattr(spec, key, str(net))
    s.topology = spec


def _relative_to(source: str, name: str) -> str:
    """A file a scenario names, relative to the scenario file's folder (the current one for text)."""
    path = Path(name).expanduser()
    if not path.is_absolute() and Path(source).is_file():
        path = Path(source).resolve().parent / path
    return str(path)


def build(c: Check, s: Scenario) -> Topology:
    """The generated topology (generator constraints checked here) for the cross-reference checks."""
    try:
        return generators.generate(s.topology.generator, s.topology.params, s.topology.nodes,
                                   [(l.a, l.b) for l in s.topology.links], s.link_defaults, s.name)
    except generators.ParamError as e:
        c.fail(("topology", "params", e.param) if e.param != "generator" else ("topology", "generator"), str(e))


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    names = topo.node_names()
    seen_pairs: set[frozenset[str]] = set()
    for i, l in enumerate(s.topology.links):
        for end in ("a", "b"):
            if getattr(l, end) not in names:
                c.fail(("topology", "links", i, end), f"unknown node {show(getattr(l, end))} "
                                                      f"(topology.nodes: {names_text(names)})")
        if frozenset((l.a, l.b)) in seen_pairs:
            c.fail(("topology", "links", i), f"a second link between {l.a} and {l.b}")
        seen_pairs.add(frozenset((l.a, l.b)))


def _plain(s: Scenario) -> dict[str, Any]:
    t = s.topology
    return {"generator": t.generator, "params": dict(t.params), "nodes": list(t.nodes),
            "links": [link_plain(l) for l in t.links],
            "data_pool": t.data_pool, "loopback_pool": t.loopback_pool, "mgmt_pool": t.mgmt_pool}


TOPOLOGY = Section("topology", read=_read, check=_check, plain=_plain, needs=("link_defaults",),
                   default=TopologySpec)
