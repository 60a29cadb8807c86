"""Pooled event consumption (node/pools/) on the testbed side.

Scenario: the `pools:` section (testbed/scenario/sections/pools.py). Every node with a role (a controller
replica, a consumer, a host of an application instance) gets a `pools:` config section (node/pools/config.py)
in wall units: the replicas with their Raft addresses (each replica's loopback data address, port +
RAFT_PORT_OFFSET, so cuts and partitions reach Raft), the applications, and at a consumer node its consumer
(named like the node, producing its pools' event types). The replicas share a Raft password made new for every
run (testbed/secrets.py `pools_password`); only the replicas' configs hold it. Each application is a user
(its name) with a token at its instances' nodes: the instances subscribe and beat as that user.

In a repetition it runs one client process per application instance (testbed/experiment/pool_apps.py, started
and ended by testbed/experiment/pool_manager.py); the
faults `pool_join`, `pool_leave`, `pool_kill` (SIGKILL to its pid) act on them, and the symbolic targets `pools.leader` and
`pools.followers` are resolved by asking the replicas (GetPools) when the fault fires.

summary.json `pools` (testbed/accounting/pools.py; null without pools): re-balance times, connections moved,
balance, fence pauses, and every (application, event) pair received, late, lost or duplicated, affinity
violations. `testbed check` adds the same account; a lost or duplicated event or an affinity violation fails.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from node.errors import UserError
from node.pools.config import raft_address
from testbed import secrets
from testbed.accounting import pools as accounting
from testbed.accounting.records import RecordReader
from testbed.experiment.pool_manager import PoolApps
from testbed.scenario.sections.faults import FOLLOWERS, LEADER, POOL_ACTIONS
from testbed.scenario.sections.pools import POOLS, PoolsSpec
from testbed.scenario.spec import Scenario
from testbed.subsystems.base import Clients, RunContext, Subsystem

log = logging.getLogger(__name__)

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


class PoolClients(Clients):
    name = "application instances"

    def __init__(self, apps: PoolApps, replicas: list[str], ctx: RunContext) -> None:
        self.apps = apps
        self.replicas = replicas
        self.ctx = ctx

    def start(self, timeout: float, stop: threading.Event) -> list[str]:
        late = self.apps.start(timeout, stop)
        return [f"application instances not subscribed after {timeout:.0f} s: {', '.join(late)}; "
                f"starting anyway (they keep trying)"] if late else []

    def backlog(self) -> dict[str, int | str]:
        return self.apps.backlog(self.ctx.client)

    def stop(self) -> None:
        self.apps.stop()

    def fault(self, action: str, target: Any) -> dict[str, Any] | None:
        return self.apps.fault(action, str(target)) if action in POOL_ACTIONS else None

    def resolve(self, target: str) -> list[str] | None:
        if target not in (LEADER, FOLLOWERS):
            return None
        leader = self.leader()
        if target == LEADER:
            return [leader]
        return [r for r in self.replicas if r != leader]

    def leader(self) -> str:
        """The leader as the reachable replicas name it (the most common answer: a deposed one may lag)."""
        votes: dict[str, int] = {}
        for r in self.replicas:
            if not self.ctx.reachable(r):
                continue
            try:
                with self.ctx.client(r) as nc:
                    leader = nc.get_pools().leader
            except UserError as exc:
                log.info("pools: %s did not say who leads: %s", r, exc)
                continue
            if leader:
                votes[leader] = votes.get(leader, 0) + 1
        if not votes:
            raise ValueError("no controller replica names a leader now")
        return max(sorted(votes), key=lambda n: votes[n])


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

    def clients(self, scenario: Scenario, ctx: RunContext) -> Clients | None:
        spec: PoolsSpec = scenario.pools
        if not spec.enabled:
            return None
        later = {tuple(f.target.split(".", 1)) for f in scenario.faults if f.action == "pool_join"}
        apps = PoolApps({app: dict(a.instances) for app, a in spec.apps.items()}, later, ctx.rep_dir,
                        address=ctx.address, tokens=ctx.tokens, heartbeat=spec.heartbeat,
                        crash_timeout=spec.crash_timeout, user_access=ctx.user_access, run_id=ctx.run_id)
        return PoolClients(apps, list(spec.replicas), ctx)

    def users(self, config: dict[str, Any]) -> set[str]:
        section = config.get(KEY) or {}
        me = config.get("name")
        return {app for app, a in (section.get("apps") or {}).items() if me in (a.get("instances") or {}).values()}

    def account(self, rep_dir: Path, reader: RecordReader, scenario: Scenario,
                submissions: list[dict[str, Any]]) -> dict[str, Any]:
        return {KEY: accounting.account(rep_dir, reader)}

    def problems(self, summary: dict[str, Any]) -> list[str]:
        acc = summary.get(KEY)
        return accounting.problems(acc if isinstance(acc, dict) else None)

    def fails(self, summary: dict[str, Any]) -> bool:
        acc = summary.get(KEY)
        return isinstance(acc, dict) and not acc.get("ok", True)

    def console(self, summary: dict[str, Any]) -> list[str]:
        acc = summary.get(KEY)
        return [accounting.line(acc)] if isinstance(acc, dict) else []

    def checked(self, rep_dir: Path) -> dict[str, Any]:
        acc = accounting.account(rep_dir)
        return {} if acc is None else {KEY: acc}

    def check_ok(self, checked: dict[str, Any]) -> bool:
        return KEY not in checked or bool(checked[KEY]["ok"])

    def check_lines(self, checked: dict[str, Any]) -> list[str]:
        return [accounting.line(checked[KEY])] if KEY in checked else []


SUBSYSTEM = Pools()
