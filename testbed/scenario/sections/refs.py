"""References from one section to the built topology: node lists and link names."""
from __future__ import annotations

from typing import Any

from testbed.scenario.checks import Check, KeyPath, names_text, show
from testbed.topology.model import Topology


def node_list(c: Check, path: KeyPath, value: Any, names: list[str], allow_all: bool = True) -> list[str] | str:
    """A node name or list of them, each one of `names`; "all" stays "all" when allowed."""
    if allow_all and value == "all":
        return "all"
    if isinstance(value, str):
        value = [value]
    items = c.sequence(path, value)
    for i, n in enumerate(items):
        if n not in names:
            c.fail(path + (i,), f"unknown node {show(n)} (nodes: {names_text(names)})")
    return list(items)


def link_name(c: Check, path: KeyPath, value: Any, topo: Topology) -> tuple[str, bool]:
    """The canonical name of the link `value` names ("a-b" in either order) and whether it was reversed."""
    for link in topo.links:
        if value == link.name:
            return link.name, False
        if value == f"{link.b}-{link.a}":
            return link.name, True
    some = ", ".join(sorted(l.name for l in topo.links)[:8])
    c.fail(path, f"unknown link {show(value)} (expected a link name like {some or 'a-b'})")
