"""Pooled event consumption (node/pools/) on the testbed side.

Scenario: the `pools:` section (testbed/scenario/sections/pools.py). Every node with a role (a controller
replica, a consumer, a host of an application instance) gets a `pools:` config section (node/pools/config.py)
in wall units: the replicas with their Raft addresses (each replica's loopback data address, port +
RAFT_PORT_OFFSET, so cuts and partitions reach Raft), the applications, and at a consumer node its consumer
(named like the node, producing its pools' event types). The replicas share a Raft password made new for every
run (testbed/secrets.py `pools_password`); only the replicas' configs hold it. Each application is a user
(its name) with a token at its instances' nodes: the instances subscribe and beat as that user.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from node.pools.config import raft_address
from testbed import secrets
from testbed.scenario.sections.pools import POOLS, PoolsSpec
from testbed.scenario.spec import Scenario
from testbed.subsystems.base import Subsystem

KEY = "pools"


def pools_config(spec: PoolsSpec, node: str) -> dict[str, Any]:
    """The node's `pools:` section without the replicas' addresses and password (`wire` adds them); empty when
    the node has no role. `spec` is in wall units."""
    if not spec.enabled:
        return {}
    hosts = {n for a in spec.apps.values() for n in a.instances.values()}
    types = spec.consumer_types()
    if node not in spec.replicas and node not in types and node not in hosts:
        return {}
    out: dict[str, Any] = {
        "enabled": True, "heartbeat": spec.heartbeat, "crash_timeout": spec.crash_timeout,
        "apps": {app: {"algorithm": a.algorithm, "move_share": a.move_share, "types": list(a.types),
                       "instances": dict(a.instances)} for app, a in spec.apps.items()},
    }
    if node in types:
        out["consumer"] = {"name": node, "types": list(types[node])}
    return out


class Pools(Subsystem):
    name = "pools"
    sections = (POOLS,)

    def to_wall(self, wall: Scenario, k: float) -> None:
        wall.pools.heartbeat *= k
        wall.pools.crash_timeout *= k

    def node_config(self, scenario: Scenario, node: str) -> dict[str, Any]:
        section = pools_config(scenario.pools, node)
        return {KEY: section} if section else {}

    def wire(self, scenario: Scenario, wirings: dict[str, dict[str, Any]], rep_dir: Path) -> None:
        spec: PoolsSpec = scenario.pools
        if not spec.enabled:
            return
        # the loopback address is a replica's first data listen address (nodeconfig.data_listens)
        replicas = {r: raft_address(wirings[r]["data_listen"]) for r in spec.replicas}
        password = secrets.pools_password(rep_dir)
        for name, wiring in wirings.items():
            section = wiring.get(KEY)
            if not section:
                continue
            section["replicas"] = dict(replicas)
            if name in replicas:
                section["password"] = password

    def users(self, config: dict[str, Any]) -> set[str]:
        section = config.get(KEY) or {}
        me = config.get("name")
        return {app for app, a in (section.get("apps") or {}).items() if me in (a.get("instances") or {}).values()}


SUBSYSTEM = Pools()
