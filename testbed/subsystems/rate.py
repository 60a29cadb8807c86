"""MQ rate control (node/rate/) on the testbed side.

Scenario: the `rate_control:` section (testbed/scenario/sections/rate_control.py). Each node with a role
gets a `rate:` config section (`rate_config`); the root's consumer user gets a mailbox and a token; in a
repetition the consumer (testbed/experiment/consumer.py) drains the root queue from before the warm-up
until the teardown.

summary.json (testbed/accounting/rates.py; both null without rate_control):
- overflowed    client -> submissions it refused with a full queue
- rate_control  rule, R, T (model units); per client its assigned rates and queues; the root's queue and
                "not now" refusals; the consumer's rounds and removals
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from node.client import Access
from testbed.accounting import rates
from testbed.accounting.records import RecordReader
from testbed.experiment.consumer import RootConsumer
from testbed.scenario.sections.rate_control import RATE_CONTROL
from testbed.scenario.spec import Scenario
from testbed.subsystems.base import Clients, RunContext, Subsystem

KEY = "rate_control"


def rate_config(scenario: Scenario, name: str) -> dict[str, Any]:
    """The node's `rate:` section from the scenario's `rate_control` (empty when it has no role). In wall units."""
    rc = scenario.rate_control
    if not rc.enabled or (name != rc.root and name not in rc.clients):
        return {}
    out: dict[str, Any] = {"clients": list(rc.clients), "rate_bps": rc.rate, "interval": rc.interval,
                           "policy": rc.rule}
    if name == rc.root:
        # a refused piece is offered again a quarter of a consumer period later: soon after room was made
        out.update(role="root", queue_limit=rc.root_queue, consumer=rc.consumer.user, retry=rc.consumer.every / 4)
    else:
        out.update(role="client", root=rc.root, queue_limit=rc.client_queue, burst=rc.burst)
    return out


class ConsumerClients(Clients):
    name = "consumer"

    def __init__(self, consumer: RootConsumer) -> None:
        self.consumer = consumer

    def start(self, timeout: float, stop: threading.Event) -> list[str]:
        self.consumer.start()
        return []

    def stop(self) -> None:
        self.consumer.stop()


class RateControl(Subsystem):
    name = "rate"
    sections = (RATE_CONTROL,)

    def to_wall(self, wall: Scenario, k: float) -> None:
        rc = wall.rate_control
        rc.interval *= k
        rc.rate /= k
        rc.consumer.every *= k

    def node_config(self, scenario: Scenario, node: str) -> dict[str, Any]:
        section = rate_config(scenario, node)
        return {"rate": section} if section else {}

    def users(self, config: dict[str, Any]) -> set[str]:
        consumer = config.get("rate", {}).get("consumer")
        return {consumer} if consumer else set()

    def clients(self, scenario: Scenario, ctx: RunContext) -> Clients | None:
        rc = scenario.rate_control
        if not rc.enabled:
            return None
        return ConsumerClients(RootConsumer(rc, ctx.address(rc.root), ctx.rep_dir, reachable=ctx.reachable,
                                            token=ctx.tokens.get(rc.root, Access())))

    def account(self, rep_dir: Path, reader: RecordReader, scenario: Scenario,
                submissions: list[dict[str, Any]]) -> dict[str, Any]:
        overflowed, account = rates.account(rep_dir, reader, scenario, submissions)
        return {"overflowed": overflowed, KEY: account}

    def console(self, summary: dict[str, Any]) -> list[str]:
        account = summary.get(KEY)
        return [rates.line(account)] if account else []


SUBSYSTEM = RateControl()
