"""Dynamic routing (node/routing/) on the testbed side: its account of a repetition.

The node's routing needs nothing from the testbed beyond its config (the scenario's `routing:` section,
written by testbed/experiment/nodeconfig.py). What it adds is summary.json's `routing` key
(testbed/accounting/routing.py; null for a run without dynamic routes): route moves, the tables against
Dijkstra on the configured costs, the share of time on the better path, the settled link costs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.accounting import routing
from testbed.accounting.records import RecordReader
from testbed.scenario.spec import Scenario
from testbed.subsystems.base import Subsystem


class Routing(Subsystem):
    name = "routing"

    def account(self, rep_dir: Path, reader: RecordReader, scenario: Scenario,
                submissions: list[dict[str, Any]]) -> dict[str, Any]:
        scale = float(scenario.time_scale) if scenario.time_scale > 0 else 1.0
        return {routing.KEY: routing.account(rep_dir, reader, scenario.duration * scale, scale)}

    def console(self, summary: dict[str, Any]) -> list[str]:
        acc = summary.get(routing.KEY)
        if not isinstance(acc, dict):
            return []
        words = [f"{acc.get('moves')} route moves in the workload window"]
        if acc.get("table_match") is not None:
            words.append(f"next hops as Dijkstra's on the configured costs: {100 * acc['table_match']:.0f}%")
        if acc.get("better_share") is not None:
            words.append(f"time on the better path: {100 * acc['better_share']:.0f}%")
        return ["routing: " + "; ".join(words)]


SUBSYSTEM = Routing()
