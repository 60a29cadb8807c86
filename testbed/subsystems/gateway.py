"""Gateway policies (node/gateway/) on the testbed side.

Scenario: the `gateway:` section (testbed/scenario/sections/gateway.py). The gateway node gets a `gateway:`
config section in wall units (`gateway_config`); the gateway's users and its local submitting users get a
mailbox and a token there.

summary.json (testbed/accounting/gateway.py; null without a gateway):
- gateway  per outgoing connector: max queue, model seconds above the threshold and with load balancing off,
           delivered rate (messages per model second); throttled, dropped, refusals by reason, decisions by action
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from testbed.accounting import gateway as accounting
from testbed.accounting.records import RecordReader
from testbed.scenario.sections.gateway import GATEWAY, wall_epoch
from testbed.scenario.spec import Scenario
from testbed.subsystems.base import Subsystem

KEY = "gateway"


def gateway_config(scenario: Scenario, name: str, start: float | None = None) -> dict[str, Any]:
    """The node's `gateway:` section (empty unless it is the gateway), in wall units. `start`: the epoch second
    a `locked_until` offset counts from (default: now, as the configs are written just before the daemons
    start)."""
    gw = scenario.gateway
    if not gw.enabled or name != gw.node:
        return {}
    start = time.time() if start is None else start
    users: dict[str, Any] = {}
    for user, u in gw.users.items():
        entry: dict[str, Any] = {"credits": u.credits}
        until = wall_epoch(u, start)
        if until is not None:
            entry["locked_until"] = until
        if u.permit is not None:
            entry["permit"] = list(u.permit)
        entry.update(deny=list(u.deny), priority=u.priority)
        if u.throughput is not None:
            entry["throughput"] = u.throughput
        users[user] = entry
    incoming = {n: ({"neighbour": i.neighbour} if i.neighbour else {"user": i.user}) | {"throughput": i.throughput}
                for n, i in gw.incoming.items()}
    return {"enabled": True, "gamma": gw.gamma, "threshold": gw.threshold, "lower": gw.lower, "period": gw.period,
            "settle": gw.settle, "escalate": gw.escalate, "escalate_after": gw.escalate_after,
            "actions": list(gw.actions), "move_queued": gw.move_queued, "drop_order": list(gw.drop_order),
            "outgoing": {n: {"rate": o.rate} for n, o in gw.outgoing.items()}, "incoming": incoming,
            "users": users}


class Gateway(Subsystem):
    name = "gateway"
    sections = (GATEWAY,)

    def to_wall(self, wall: Scenario, k: float) -> None:
        gw = wall.gateway
        gw.period *= k
        gw.settle *= k
        gw.escalate_after *= k
        for out in gw.outgoing.values():
            out.rate /= k
        for inc in gw.incoming.values():
            if inc.throughput is not None:
                inc.throughput /= k
        for user in gw.users.values():
            if user.locked_for is not None:
                user.locked_for *= k
            if user.throughput is not None:
                user.throughput /= k

    def node_config(self, scenario: Scenario, node: str) -> dict[str, Any]:
        section = gateway_config(scenario, node)
        return {"gateway": section} if section else {}

    def users(self, config: dict[str, Any]) -> set[str]:
        section = config.get("gateway") or {}
        if not section.get("enabled"):
            return set()
        local = {str(i["user"]) for i in (section.get("incoming") or {}).values() if i.get("user")}
        return local | set(section.get("users") or {})

    def account(self, rep_dir: Path, reader: RecordReader, scenario: Scenario,
                submissions: list[dict[str, Any]]) -> dict[str, Any]:
        return {KEY: accounting.account(rep_dir, reader, scenario, submissions)}

    def problems(self, summary: dict[str, Any]) -> list[str]:
        acc = summary.get(KEY)
        return accounting.problems(acc if isinstance(acc, dict) else None)

    def console(self, summary: dict[str, Any]) -> list[str]:
        acc = summary.get(KEY)
        return [accounting.line(acc)] if isinstance(acc, dict) else []


SUBSYSTEM = Gateway()
