"""The `nodes` section: node daemon settings for all nodes and per node (node/config.py checks the keys).

Two keys here are the testbed's, not the node's (testbed/topology/overlay.py; nodeconfig removes them
before node/config.py sees the settings): `daemon: false` makes a host a plain IP router without a node
daemon, and `nodes.<host>.mta_neighbours` lists a host's MTA neighbours. They are checked here; so are
the other sections' references to hosts that need a daemon (`check_daemon_references`, run by the
loader after every section has been checked).
"""
from __future__ import annotations

import copy
import difflib
from typing import Any

from testbed.scenario.checks import Check, KeyPath, names_text, show
from testbed.scenario.parts import NodesSpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology import overlay
from testbed.topology.model import Topology

DAEMON = overlay.DAEMON_KEY
MTA_NEIGHBOURS = overlay.MTA_NEIGHBOURS_KEY
NODE_FAULTS = ("kill", "restart", "pause", "resume")     # the fault actions that act on a node daemon


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    names = topo.node_names()
    s.nodes = NodesSpec()
    for key, value in c.mapping(("nodes",), raw).items():
        if key != "all" and key not in names:
            near = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else f" (nodes: all, {names_text(names)})"
            c.fail(("nodes", key), f"unknown node '{key}'{hint}")
        settings = dict(c.mapping(("nodes", key), value))
        if key == "all":
            s.nodes.all = settings
        else:
            s.nodes.per_node[key] = settings
    for node in topo.nodes:     # hosts an imported topology marks as switches: no daemon unless the file says so
        if node.attrs.get(DAEMON) is False:
            s.nodes.per_node.setdefault(node.name, {}).setdefault(DAEMON, False)
    _check_daemons(c, s, topo)


def _check_daemons(c: Check, s: Scenario, topo: Topology) -> None:
    """`daemon` and `mta_neighbours`: types, at least one daemon, lists naming daemon hosts, a connected MTA graph."""
    names = topo.node_names()
    for key, settings in (("all", s.nodes.all), *s.nodes.per_node.items()):
        if DAEMON in settings:
            c.boolean(("nodes", key, DAEMON), settings[DAEMON])
    if MTA_NEIGHBOURS in s.nodes.all:
        c.fail(("nodes", "all", MTA_NEIGHBOURS), "MTA neighbours are listed per host, under nodes.<host>")
    daemons = overlay.daemon_hosts(s.nodes, names)
    if not daemons:
        off = ("nodes", "all", DAEMON) if DAEMON in s.nodes.all else ("nodes", names[-1], DAEMON)
        c.fail(off, "no host runs a node daemon; at least one must (daemon: true under nodes.<host>)")
    for host, settings in s.nodes.per_node.items():
        if host not in daemons:
            other = [k for k in settings if k != DAEMON]
            if other:
                c.fail(("nodes", host, other[0]), f"{host} runs no node daemon ({DAEMON}: false), "
                                                  f"so it takes no node settings")
        elif MTA_NEIGHBOURS in settings:
            settings[MTA_NEIGHBOURS] = _listed(c, ("nodes", host, MTA_NEIGHBOURS), host, settings[MTA_NEIGHBOURS],
                                               names, daemons)
    if overlay.is_identity(topo, s.nodes):
        return
    listed = overlay.listed_neighbours(s.nodes)
    gap = overlay.first_unreachable(overlay.mta_neighbours(topo, daemons, listed))
    if gap:
        where: KeyPath = ("nodes", next(iter(listed)), MTA_NEIGHBOURS) if listed else ("nodes",)
        c.fail(where, f"the MTA graph is not connected: {gap[0]} has no path of MTA neighbours to {gap[1]}")


def _listed(c: Check, path: KeyPath, host: str, value: Any, names: list[str], daemons: list[str]) -> list[str]:
    items = c.sequence(path, [value] if isinstance(value, str) else value)
    for i, n in enumerate(items):
        if n not in names:
            c.fail(path + (i,), f"unknown node {show(n)} (nodes: {names_text(names)})")
        if n == host:
            c.fail(path + (i,), f"{host} cannot be its own MTA neighbour")
        if n not in daemons:
            c.fail(path + (i,), _no_daemon(n))
        if n in items[:i]:
            c.fail(path + (i,), f"{n} is listed twice")
    return list(items)


def _no_daemon(host: str) -> str:
    return f"{host} runs no node daemon (nodes.{host}.{DAEMON}: false); name a host that runs one"


def check_daemon_references(c: Check, s: Scenario, topo: Topology) -> None:
    """Workload generators and node faults may name only hosts that run a daemon (after those sections are read)."""
    daemons = set(overlay.daemon_hosts(s.nodes, topo.node_names()))
    if len(daemons) == len(topo.nodes):
        return
    for i, g in enumerate(s.workload.generators):
        path: KeyPath = ("workload", "generators", i)
        refs = [] if g.nodes == "all" else [(("nodes", j), n) for j, n in enumerate(g.nodes)]
        refs += [(("recipients", "nodes", j), n) for j, n in enumerate(g.recipients.nodes)]
        refs += [(("recipients", "weights", n), n) for n in g.recipients.weights]
        for sub, n in refs:
            if n not in daemons:
                c.fail(path + sub, _no_daemon(n))
    for i, sub in enumerate(s.subscriptions):
        if sub.node not in daemons:
            c.fail(("subscriptions", i, "node"), f"a subscription needs a broker, but {_no_daemon(sub.node)}")
    for i, f in enumerate(s.faults):
        if f.action in NODE_FAULTS and f.target not in daemons and "." not in f.target:   # '.': symbolic
            c.fail(("faults", i, "target"), f"{f.action} acts on a node daemon, but {_no_daemon(f.target)}")


def _plain(s: Scenario) -> dict[str, Any]:
    out: dict[str, Any] = {"all": copy.deepcopy(s.nodes.all)}
    out.update(copy.deepcopy(s.nodes.per_node))
    return out


NODES = Section("nodes", check=_check, plain=_plain, default=NodesSpec)
