"""Publish/subscribe (node/broker/) on the testbed side.

Scenario: the `subscriptions:` section (testbed/scenario/sections/subscriptions.py) and generators with
`publish:` (planned by testbed/experiment/workload.py). In a repetition it runs a subscriber client per
subscription (testbed/experiment/subscribers.py) and publishes the planned publications; the drain waits for
the nodes' broker inboxes and the durable subscriptions' backlogs.

summary.json:
- pubsub  the publish/subscribe account (testbed/accounting/pubsub.py): per topic published, expected and
          received receipts, durable ones late or lost (must be 0), non-durable ones missing (allowed),
          duplicates; null for a run without publications or subscribers
- driver.published, publish_refused, publish_unreachable: the publications the driver made, the nodes
  refused, or could not make (its node was down or did not answer)
`testbed check` adds the same account (`pubsub` in its JSON); a lost durable receipt or a duplicate fails.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from node.broker.kinds import PUB_PREFIX
from node.client import NodeClient
from node.errors import UserError
from testbed.accounting import pubsub
from testbed.accounting.records import RecordReader
from testbed.experiment.subscribers import Subscribers
from testbed.scenario.sections.subscriptions import SUBSCRIPTIONS
from testbed.scenario.spec import Scenario
from testbed.subsystems.base import Clients, RunContext, Subsystem

log = logging.getLogger(__name__)

KEY = "pubsub"


class SubscriberClients(Clients):
    name = "subscribers"

    def __init__(self, subscribers: Subscribers, ctx: RunContext) -> None:
        self.subscribers = subscribers
        self.ctx = ctx

    def start(self, timeout: float, stop: threading.Event) -> list[str]:
        late = self.subscribers.start(timeout, stop)
        if not late:
            return []
        return [f"subscribers not subscribed after {timeout:.0f} s: {', '.join(late)}; "
                f"starting anyway (they keep trying)"]

    def backlog(self) -> dict[str, int | str]:
        # publications queued for durable subscriptions: their clients are still reading them
        return self.subscribers.backlog(self.ctx.client)

    def stop(self) -> None:
        self.subscribers.stop()


class Broker(Subsystem):
    name = "broker"
    sections = (SUBSCRIPTIONS,)
    counters = ("published", "publish_refused", "publish_unreachable")
    copy_prefixes = (PUB_PREFIX,)     # publication copies: accounted per subscription (publications.jsonl)

    def clients(self, scenario: Scenario, ctx: RunContext) -> Clients | None:
        if not scenario.subscriptions:
            return None
        return SubscriberClients(Subscribers(scenario.subscriptions, ctx.rep_dir, address=ctx.address,
                                             reachable=ctx.reachable, tokens=ctx.tokens), ctx)

    def submits(self, planned: Any) -> bool:
        return hasattr(planned, "topic")

    def submit(self, client: NodeClient, planned: Any, reachable: bool) -> str:
        if not reachable:
            return "publish_unreachable"
        try:
            r = client.publish(planned.topic, size=planned.size, priority=min(planned.priority, 15))
        except UserError as exc:
            log.info("publication at %s not made: %s", planned.node, exc)
            return "publish_unreachable"
        return "published" if r.accepted else "publish_refused"

    def held(self, stats: dict[str, Any]) -> int:
        return int(stats.get("broker", {}).get("inbox", 0))

    def activity(self, stats: dict[str, Any]) -> int:
        broker = stats.get("broker") or {}
        # control_* (heartbeats on '_' topics) left out: they never stop, so the drain would run to its bound
        return int(broker.get("copies_in", 0)) + int(broker.get("live_in", 0)) + int(broker.get("local", 0))

    def account(self, rep_dir: Path, reader: RecordReader, scenario: Scenario,
                submissions: list[dict[str, Any]]) -> dict[str, Any]:
        return {KEY: pubsub.account(rep_dir, reader)}

    def problems(self, summary: dict[str, Any]) -> list[str]:
        acc = summary.get(KEY)
        return pubsub.problems(acc if isinstance(acc, dict) else None)

    def console(self, summary: dict[str, Any]) -> list[str]:
        acc = summary.get(KEY)
        return [pubsub.line(acc)] if acc else []

    def checked(self, rep_dir: Path) -> dict[str, Any]:
        acc = pubsub.account(rep_dir)
        return {} if acc is None else {KEY: acc}

    def check_ok(self, checked: dict[str, Any]) -> bool:
        return KEY not in checked or bool(checked[KEY]["ok"])

    def check_lines(self, checked: dict[str, Any]) -> list[str]:
        return [pubsub.line(checked[KEY])] if KEY in checked else []


SUBSYSTEM = Broker()
