"""The `routing` section: how the nodes' routing tables are computed from the topology.

Either a policy name (`routing: delay`) or a mapping of settings (`routing: {policy: delay}`);
a new routing setting is a field of spec.RoutingSpec and a key in ROUTING_KEYS here.
"""
from __future__ import annotations

from typing import Any

from testbed.scenario.checks import MISSING, Check, KeyPath
from testbed.scenario.sections.base import Section
from testbed.scenario.spec import RoutingSpec, Scenario

ROUTINGS = ("auto", "shortest", "unidirectional", "delay")
ROUTING_KEYS = ("policy",)


def _read(c: Check, raw: Any, s: Scenario) -> None:
    path: KeyPath = ("routing",)
    spec = RoutingSpec()
    if isinstance(raw, dict):
        m = c.mapping(path, raw, ROUTING_KEYS)
        spec.policy = c.choice(path + ("policy",), m.get("policy", spec.policy), ROUTINGS)
    elif raw is not MISSING:
        spec.policy = c.choice(path, raw, ROUTINGS)
    s.routing = spec


def _plain(s: Scenario) -> dict[str, Any]:
    return {"policy": s.routing.policy}


ROUTING = Section("routing", read=_read, plain=_plain)
