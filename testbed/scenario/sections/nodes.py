"""The `nodes` section: node daemon settings for all nodes and per node (node/config.py checks the keys)."""
from __future__ import annotations

import copy
import difflib
from typing import Any

from testbed.scenario.checks import Check, names_text
from testbed.scenario.sections.base import Section
from testbed.scenario.spec import NodesSpec, Scenario
from testbed.topology.model import Topology


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


def _plain(s: Scenario) -> dict[str, Any]:
    out: dict[str, Any] = {"all": copy.deepcopy(s.nodes.all)}
    out.update(copy.deepcopy(s.nodes.per_node))
    return out


NODES = Section("nodes", check=_check, plain=_plain)
