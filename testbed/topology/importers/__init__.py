"""Topologies written for other emulators, read as wanbed topologies (generators `mininet` and `kathara`).

An importer reads the user's file once into an `Imported` (hosts, links with the
per-direction fields the file set, LAN segments); `Imported.topology` lays those
over the scenario's link_defaults, so a sweep over link_defaults re-reads nothing.
Reading is cached by file identity (path, size, mtime) and parameters: the loader
builds the topology once per scenario and once per sweep value.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from node.names import NODE_NAME_RULE, is_node_name
from testbed.topology.errors import ParamError
from testbed.topology.model import Direction, Lan, Link, Node, Topology

log = logging.getLogger("testbed.topology.importers")


class ImportFailed(ParamError):
    """A bad imported file: one line naming the file, the line where known, and the problem."""


@dataclass
class ImportedLink:
    a: str
    b: str
    a_to_b: dict[str, Any] = field(default_factory=dict)    # Direction field -> value (base units)
    b_to_a: dict[str, Any] = field(default_factory=dict)
    name: str = ""


@dataclass
class Imported:
    """What an importer read: hosts in file order (`daemon` False for switches), links, LAN segments."""

    nodes: list[tuple[str, bool]] = field(default_factory=list)     # (name, runs a node daemon)
    links: list[ImportedLink] = field(default_factory=list)
    lans: list[tuple[str, list[str]]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def topology(self, defaults: Direction, name: str) -> Topology:
        """The topology with each link direction = link_defaults, then the fields the file set."""
        nodes = [Node(n, role="host") if daemon else Node(n, role="switch", attrs={"daemon": False})
                 for n, daemon in self.nodes]
        links = [Link(l.a, l.b, _direction(defaults, l.a_to_b), _direction(defaults, l.b_to_a), name=l.name)
                 for l in self.links]
        lans = [Lan(n, list(members), copy.deepcopy(defaults)) for n, members in self.lans]
        return Topology(name, nodes, links, lans)


def _direction(defaults: Direction, fields: dict[str, Any]) -> Direction:
    d = copy.deepcopy(defaults)
    for key, value in fields.items():
        setattr(d, key, value)
    return d


def check_name(param: str, where: str, name: Any) -> str:
    """A host name the testbed can use (interface and namespace names are built from it)."""
    if not is_node_name(name):
        raise ImportFailed(param, f"{where}: the name {name!r} cannot be a wanbed host name ({NODE_NAME_RULE})")
    if name == "all":
        raise ImportFailed(param, f"{where}: 'all' is reserved in scenarios (nodes.all); rename the host")
    return name


_warned: set[tuple[str, ...]] = set()


def warn_once(key: tuple[str, ...], message: str) -> None:
    """Log a warning once per process (the loader reads a topology again for each sweep value)."""
    if key not in _warned:
        _warned.add(key)
        log.warning("%s", message)
