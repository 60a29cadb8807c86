"""The `subscriptions` section: subscriber clients the testbed runs for the whole repetition (node/broker/).

    subscriptions:
      - {node: c2n1, pattern: "sensors.>", durable: true, name: archive2}
      - {node: c2n2, pattern: "sensors.temp.*"}          # non-durable; name defaults to s<index>

Each one is a client of the node's PubSub service, connected before the warm-up ends and kept until the
drain is over (it reconnects after its node was killed); what it receives goes to
subscribers/<node>/<name>/receipts.jsonl (docs/run-directory.md).
"""
from __future__ import annotations

from typing import Any

from node.broker.topics import pattern_problem
from node.names import is_user_name
from testbed.scenario.checks import Check, KeyPath, names_text, show
from testbed.scenario.parts import SubscriptionSpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology.model import Topology


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    names = topo.node_names()
    out: list[SubscriptionSpec] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(c.sequence(("subscriptions",), raw)):
        path: KeyPath = ("subscriptions", i)
        m = c.mapping(path, entry, ("node", "pattern", "name", "durable"))
        for need in ("node", "pattern"):
            if need not in m:
                c.fail(path + (need,), "missing: a subscription needs 'node' and 'pattern'")
        node = m["node"]
        if node not in names:
            c.fail(path + ("node",), f"unknown node {show(node)} (nodes: {names_text(names)})")
        pattern = c.text(path + ("pattern",), m["pattern"])
        why = pattern_problem(pattern)
        if why:
            c.fail(path + ("pattern",), why)
        durable = c.boolean(path + ("durable",), m.get("durable", False))
        name = c.text(path + ("name",), m["name"]) if m.get("name") not in (None, "") else ""
        if durable and not name:
            c.fail(path + ("name",), "missing: a durable subscription needs a name")
        name = name or f"s{i}"
        if not is_user_name(name):
            c.fail(path + ("name",), f"{show(name)} is not a valid subscription name (letters, digits, '_.-')")
        if (node, name) in seen:
            c.fail(path + ("name",), f"{node} has two subscriptions named {show(name)}")
        seen.add((node, name))
        out.append(SubscriptionSpec(node=node, pattern=pattern, name=name, durable=durable))
    s.subscriptions = out


def _plain(s: Scenario) -> list[dict[str, Any]]:
    return [{"node": x.node, "pattern": x.pattern, "name": x.name, "durable": x.durable} for x in s.subscriptions]


SUBSCRIPTIONS = Section("subscriptions", check=_check, plain=_plain, default=list)
