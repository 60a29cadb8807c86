"""The `faults` section: the timeline of link changes, partitions and node kills/restarts/pauses.

With a `pools:` section (testbed/scenario/sections/pools.py) there are three more actions on an application
instance's client, target "<app>.<instance>": `pool_join` starts it (it is not started with the others),
`pool_leave` makes it leave (drain, then unsubscribe), `pool_kill` ends it abruptly (no drain, no ack). And
the node target `pools.leader` (kill, pause; restart and resume then take the node that kill or pause took)
and, in a partition side, `pools.leader` and `pools.followers` (the other replicas) are resolved when the fault
fires, from the replicas' own view (GetPools).
"""
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

FAULT_ACTIONS = ("link_down", "link_up", "link_set", "partition", "heal", "kill", "restart", "pause", "resume",
                 "pool_join", "pool_leave", "pool_kill")
NODE_ACTIONS = ("kill", "restart", "pause", "resume")
POOL_ACTIONS = ("pool_join", "pool_leave", "pool_kill")
LEADER = "pools.leader"              # symbolic targets, resolved when the fault fires
FOLLOWERS = "pools.followers"
SWAP_DIRECTION = {"a_to_b": "b_to_a", "b_to_a": "a_to_b", "both": "both"}


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    s.faults = [_fault(c, ("faults", i), entry, topo, s) for i, entry in enumerate(c.sequence(("faults",), raw))]
    _check_pool_order(c, s)


def _fault(c: Check, path: KeyPath, entry: Any, topo: Topology, s: Scenario) -> Fault:
    names = topo.node_names()
    pools = s.pools.enabled
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
        if target not in names and not (pools and target == LEADER):
            c.fail(tp, f"unknown node {show(target)} (nodes: {names_text(names)}"
                       f"{'; or pools.leader' if pools else ''})")
    elif action in POOL_ACTIONS:
        instances = [f"{app}.{inst}" for app, a in s.pools.apps.items() for inst in a.instances]
        if target not in instances:
            c.fail(tp, f"unknown application instance {show(target)} (expected <app>.<instance>: "
                       f"{names_text(instances) or 'the scenario has no pools'})")
    elif action == "partition":
        sides = c.sequence(tp, target)
        if len(sides) != 2:
            c.fail(tp, "expected two lists of nodes: [[side A], [side B]]")
        known = names + ([LEADER, FOLLOWERS] if pools else [])
        target = [list(node_list(c, tp + (j,), side, known, allow_all=False)) for j, side in enumerate(sides)]
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


def _check_pool_order(c: Check, s: Scenario) -> None:
    """An instance joins once, before it leaves or is killed, and leaves or is killed at most once; a restart or
    resume of the leader follows a kill or pause of it."""
    joined: set[str] = set()
    ended: set[str] = set()
    for i, f in sorted(enumerate(s.faults), key=lambda x: x[1].at):
        if f.action not in POOL_ACTIONS:
            continue
        where = ("faults", i, "target")
        if f.action == "pool_join":
            if f.target in joined:
                c.fail(where, f"{f.target} joins twice")
            joined.add(f.target)
        else:
            if f.target in ended:
                c.fail(where, f"{f.target} has left or was killed already")
            ended.add(f.target)
    took = [f.at for f in s.faults if f.action in ("kill", "pause") and f.target == LEADER]
    for i, f in enumerate(s.faults):
        if f.action in ("restart", "resume") and f.target == LEADER and not any(at < f.at for at in took):
            c.fail(("faults", i, "target"), f"{f.action} of {LEADER} takes the node a kill or pause of it took "
                                            f"before; none comes before {f.at:g} s")
        if f.action != "pool_join" and f.action in POOL_ACTIONS and f.target in joined:
            first = min(x.at for x in s.faults if x.action == "pool_join" and x.target == f.target)
            if f.at <= first:
                c.fail(("faults", i, "at"), f"{f.target} joins only at {first:g} s")


def _plain(s: Scenario) -> list[dict[str, Any]]:
    return [{"at": f.at, "action": f.action, "target": copy.deepcopy(f.target), "params": copy.deepcopy(f.params)}
            for f in s.faults]


FAULTS = Section("faults", check=_check, plain=_plain, default=list)
