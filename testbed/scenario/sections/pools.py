"""The `pools` section: pooled event consumption (node/pools/): consumers, application pools, the controller.

    pools:
      replicas: [r1, r2, r3]          # 3 or 5 hosts with a node daemon: the Raft-replicated controller
      heartbeat: 0.5s                 # between heartbeats (consumers and instances)
      crash_timeout: 2s               # silence after which an instance counts as crashed
      algorithm: round_robin          # default of every application (so a sweep can vary `pools.algorithm`)
      move_share: 0.5                 # default of every application
      consumers:                      # consumer pools: name -> the consumer nodes and the event types they produce
        bs: {nodes: [c1, c2, c3], types: [alarm, counter]}
      apps:                           # application pools
        A:
          types: [alarm]              # the event types it wants (each produced by some consumer)
          algorithm: round_robin      # or load_aware
          move_share: 0.5             # load_aware: share of the heaviest connections a change moves, (0, 1]
          instances: {a1: n4, a2: n5} # instance -> the daemon host its client runs at

A consumer is its node (its name is the node's). Events are the generators' publications at the consumer
nodes on `ev.<type>.<source>` (the workload's `publish.sources` gives each consumer its own sources). The
testbed runs one client per application instance (testbed/experiment/pool_apps.py), as the application's
user (user name = the application's name, with a token at each of its instances' nodes); an instance that a
`pool_join` fault names starts only then. Raft talks between the replicas' loopback data addresses over the
static kernel routes, which do not route around a cut link: put the replicas on adjacent hosts.
Durations are model seconds (time_scale applies).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from node.names import is_user_name
from node.pools.assign import ALGORITHMS, is_pool_name
from node.pools.config import POOL_NAME_RULE, REPLICA_COUNTS
from testbed import units
from testbed.scenario.checks import MISSING, Check, KeyPath, names_text, show
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology import overlay
from testbed.topology.model import Topology

KEYS = ("replicas", "heartbeat", "crash_timeout", "algorithm", "move_share", "consumers", "apps")
APP_KEYS = ("types", "algorithm", "move_share", "instances")


@dataclass
class ConsumerPoolSpec:
    nodes: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)


@dataclass
class AppSpec:
    types: list[str] = field(default_factory=list)
    algorithm: str = "round_robin"
    move_share: float = 0.5
    instances: dict[str, str] = field(default_factory=dict)     # instance -> node


@dataclass
class PoolsSpec:
    """Pooled event consumption; durations in model seconds until time_scale converts them."""
    replicas: list[str] = field(default_factory=list)           # empty: no pools in this scenario
    heartbeat: float = 0.5
    crash_timeout: float = 2.0
    algorithm: str = "round_robin"                              # the applications' default
    move_share: float = 0.5                                     # the applications' default
    consumers: dict[str, ConsumerPoolSpec] = field(default_factory=dict)
    apps: dict[str, AppSpec] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.replicas)

    def consumer_types(self) -> dict[str, list[str]]:
        """consumer node -> the event types it produces (over all its consumer pools, in order)."""
        out: dict[str, list[str]] = {}
        for pool in self.consumers.values():
            for node in pool.nodes:
                have = out.setdefault(node, [])
                have.extend(t for t in pool.types if t not in have)
        return out

    def instance_app(self) -> dict[str, str]:
        """instance -> its application."""
        return {inst: app for app, a in self.apps.items() for inst in a.instances}


def _names(c: Check, path: KeyPath, raw: Any, what: str) -> list[str]:
    out = [c.text(path + (i,), x) for i, x in enumerate(c.sequence(path, raw))]
    for i, name in enumerate(out):
        if not is_pool_name(name) or name.startswith("_"):
            c.fail(path + (i,), f"{show(name)} is not a valid {what} ({POOL_NAME_RULE}, not starting with '_')")
    if len(set(out)) != len(out):
        c.fail(path, f"names a {what} twice")
    return out


def _share(c: Check, path: KeyPath, raw: Any) -> float:
    value = c.share(path, raw)
    if not 0.0 < value <= 1.0:
        c.fail(path, f"expected a share in (0, 1], got {value:g}")
    return value


def _read(c: Check, raw: Any, s: Scenario) -> None:
    out = PoolsSpec()
    if raw is MISSING or raw is None:
        s.pools = out
        return
    p: KeyPath = ("pools",)
    m = c.mapping(p, raw, KEYS)
    for need in ("replicas", "consumers", "apps"):
        if need not in m:
            c.fail(p + (need,), "missing: pools need 'replicas', 'consumers' and 'apps'")
    out.replicas = [c.text(p + ("replicas", i), x) for i, x in enumerate(c.sequence(p + ("replicas",), m["replicas"]))]
    if len(out.replicas) not in REPLICA_COUNTS or len(set(out.replicas)) != len(out.replicas):
        c.fail(p + ("replicas",), f"expected 3 or 5 different controller replica hosts, got {len(out.replicas)} "
                                  f"({', '.join(map(str, out.replicas))})")
    out.heartbeat = c.unit(p + ("heartbeat",), m.get("heartbeat", out.heartbeat), units.parse_duration,
                           positive=True)
    out.crash_timeout = c.unit(p + ("crash_timeout",), m.get("crash_timeout", out.crash_timeout),
                               units.parse_duration, positive=True)
    if out.crash_timeout <= out.heartbeat:
        c.fail(p + ("crash_timeout",), f"must be longer than the heartbeat ({out.heartbeat:g} s), "
                                       f"got {out.crash_timeout:g} s")
    out.algorithm = c.choice(p + ("algorithm",), m.get("algorithm", out.algorithm), ALGORITHMS)
    out.move_share = _share(c, p + ("move_share",), m.get("move_share", out.move_share))
    cp = p + ("consumers",)
    for name, entry in c.mapping(cp, m["consumers"]).items():
        path = cp + (name,)
        if not is_pool_name(name):
            c.fail(path, f"{show(name)} is not a valid consumer pool name ({POOL_NAME_RULE})")
        em = c.mapping(path, entry, ("nodes", "types"))
        if "nodes" not in em or "types" not in em:
            c.fail(path, "missing: a consumer pool needs 'nodes' and 'types'")
        pool = ConsumerPoolSpec(nodes=[c.text(path + ("nodes", i), x)
                                       for i, x in enumerate(c.sequence(path + ("nodes",), em["nodes"]))],
                                types=_names(c, path + ("types",), em["types"], "event type"))
        if not pool.nodes or not pool.types:
            c.fail(path, "a consumer pool needs at least one node and one event type")
        out.consumers[name] = pool
    if not out.consumers:
        c.fail(cp, "expected at least one consumer pool")
    produced = {t for pool in out.consumers.values() for t in pool.types}
    ap = p + ("apps",)
    owner: dict[str, str] = {}          # instance -> its app: heartbeat topics are per name, across apps
    for app, entry in c.mapping(ap, m["apps"]).items():
        path = ap + (app,)
        if not is_pool_name(app) or not is_user_name(app):
            c.fail(path, f"{show(app)} is not a valid application name ({POOL_NAME_RULE}; it is also its user)")
        em = c.mapping(path, entry, APP_KEYS)
        for need in ("types", "instances"):
            if need not in em:
                c.fail(path + (need,), "missing: an application needs 'types' and 'instances'")
        spec = AppSpec(types=_names(c, path + ("types",), em["types"], "event type"))
        for i, t in enumerate(spec.types):
            if t not in produced:
                c.fail(path + ("types", i), f"no consumer produces event type {show(t)} "
                                            f"(produced: {names_text(sorted(produced))})")
        spec.algorithm = c.choice(path + ("algorithm",), em.get("algorithm", out.algorithm), ALGORITHMS)
        spec.move_share = _share(c, path + ("move_share",), em.get("move_share", out.move_share))
        ip = path + ("instances",)
        for inst, node in c.mapping(ip, em["instances"]).items():
            if not is_pool_name(inst):
                c.fail(ip + (inst,), f"{show(inst)} is not a valid instance name ({POOL_NAME_RULE})")
            if inst in owner:
                c.fail(ip + (inst,), f"two instances named {show(inst)} (also one of application {owner[inst]})")
            owner[inst] = app
            spec.instances[inst] = c.text(ip + (inst,), node)
        if not spec.instances:
            c.fail(ip, "expected at least one instance")
        out.apps[app] = spec
    if not out.apps:
        c.fail(ap, "expected at least one application")
    s.pools = out


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    pools: PoolsSpec = s.pools
    if not pools.enabled:
        return
    p: KeyPath = ("pools",)
    names = topo.node_names()
    daemons = overlay.daemon_hosts(s.nodes, names)

    def host(path: KeyPath, node: str) -> None:
        if node not in names:
            c.fail(path, f"unknown node {show(node)} (nodes: {names_text(names)})")
        if node not in daemons:
            c.fail(path, f"{show(node)} is a host without a node daemon (daemon: false); hosts with one: "
                         f"{names_text(daemons)}")

    for i, node in enumerate(pools.replicas):
        host(p + ("replicas", i), node)
    consumers: set[str] = set()
    for name, pool in pools.consumers.items():
        for i, node in enumerate(pool.nodes):
            host(p + ("consumers", name, "nodes", i), node)
            if not is_pool_name(node):
                c.fail(p + ("consumers", name, "nodes", i), f"node {show(node)} cannot be a consumer: its name "
                                                            f"is its consumer name ({POOL_NAME_RULE})")
            consumers.add(node)
    for app, spec in pools.apps.items():
        for inst, node in spec.instances.items():
            host(p + ("apps", app, "instances", inst), node)
            if inst in consumers:
                c.fail(p + ("apps", app, "instances", inst), f"instance {show(inst)} has the name of a consumer "
                                                             f"(both beat on _pools.hb.<name>)")


def _plain(s: Scenario) -> Any:
    pools: PoolsSpec = s.pools
    if not pools.enabled:
        return None
    return {"replicas": list(pools.replicas), "heartbeat": pools.heartbeat, "crash_timeout": pools.crash_timeout,
            "algorithm": pools.algorithm, "move_share": pools.move_share,
            "consumers": {n: {"nodes": list(x.nodes), "types": list(x.types)} for n, x in pools.consumers.items()},
            "apps": {n: {"types": list(a.types), "algorithm": a.algorithm, "move_share": a.move_share,
                         "instances": dict(a.instances)} for n, a in pools.apps.items()}}


POOLS = Section("pools", read=_read, check=_check, plain=_plain, needs=("nodes",), default=PoolsSpec)
