"""The `faults` section: the timeline of link changes, partitions and node kills/restarts/pauses."""
from __future__ import annotations

import copy
from typing import Any

from testbed import units
from testbed.scenario.checks import Check, KeyPath, names_text, show
from testbed.scenario.parts import Fault
from testbed.scenario.sections.base import Scenario, Section
from testbed.scenario.sections.links import DIRECTION_KEYS, parse_direction
from testbed.scenario.sections.refs import link_name, node_list
from testbed.topology.model import Direction, Topology

FAULT_ACTIONS = ("link_down", "link_up", "link_set", "partition", "heal", "kill", "restart", "pause", "resume")
NODE_ACTIONS = ("kill", "restart", "pause", "resume")
SWAP_DIRECTION = {"a_to_b": "b_to_a", "b_to_a": "a_to_b", "both": "both"}


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    s.faults = [_fault(c, ("faults", i), entry, topo) for i, entry in enumerate(c.sequence(("faults",), raw))]


def _fault(c: Check, path: KeyPath, entry: Any, topo: Topology) -> Fault:
    names = topo.node_names()
    m = c.mapping(path, entry, ("at", "action", "target", "params"))
    if "at" not in m or "action" not in m:
        c.fail(path + ("at" if "at" not in m else "action",), "missing: a fault needs 'at' and 'action'")
    at = c.unit(path + ("at",), m["at"], units.parse_duration)
    action = c.choice(path + ("action",), m["action"], FAULT_ACTIONS)
    target = m.get("target")
    tp = path + ("target",)
    params: dict[str, Any] = {}
    if target is None and action != "heal":
        c.fail(tp, f"missing: {action} needs a target "
                   f"({'a link name like n1-n2' if action.startswith('link_') else '[[side A], [side B]]' if action == 'partition' else 'a node name'})")
    if action != "link_set" and m.get("params"):
        c.fail(path + ("params",), f"{action} takes no params (only link_set does)")
    reversed_name = False
    if action.startswith("link_"):
        target, reversed_name = link_name(c, tp, target, topo)
    elif action in NODE_ACTIONS:
        if target not in names:
            c.fail(tp, f"unknown node {show(target)} (nodes: {names_text(names)})")
    elif action == "partition":
        sides = c.sequence(tp, target)
        if len(sides) != 2:
            c.fail(tp, "expected two lists of nodes: [[side A], [side B]]")
        target = [list(node_list(c, tp + (j,), side, names, allow_all=False)) for j, side in enumerate(sides)]
        if set(target[0]) & set(target[1]):
            c.fail(tp, "a node cannot be on both sides of a partition")
    elif action == "heal" and target is not None:
        c.fail(tp, "heal takes no target (it heals every partition)")
    if action == "link_set" and isinstance(m.get("params"), dict) and "duplex" in m["params"]:
        c.fail(path + ("params", "duplex"), "duplex is fixed when the link is built; it cannot change at run time")
    raw_params = c.mapping(path + ("params",), m.get("params"),
                           DIRECTION_KEYS + ("direction",) if action == "link_set" else ())
    if action == "link_set":
        if not raw_params:
            c.fail(path + ("params",), "missing: link_set needs the link parameters to set")
        flat = {k: v for k, v in raw_params.items() if k != "direction"}
        plain = parse_direction(c, path + ("params",), flat, Direction()).to_scenario()
        params.update({k: plain[k] for k in flat})
        direction = c.choice(path + ("params", "direction"), raw_params.get("direction", "both"),
                             ("both", "a_to_b", "b_to_a"))
        # stored against the canonical link name: a target written "b-a" swaps the direction
        params["direction"] = SWAP_DIRECTION[direction] if reversed_name else direction
    return Fault(at=at, action=action, target=target, params=params)


def _plain(s: Scenario) -> list[dict[str, Any]]:
    return [{"at": f.at, "action": f.action, "target": copy.deepcopy(f.target), "params": copy.deepcopy(f.params)}
            for f in s.faults]


FAULTS = Section("faults", check=_check, plain=_plain, default=list)
