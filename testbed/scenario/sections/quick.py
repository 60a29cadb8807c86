"""The `quick` section: dotted scenario keys and the values `--quick` applies (the loader applies them)."""
from __future__ import annotations

import copy
from typing import Any

from testbed.scenario.checks import Check
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology.model import Topology


def section(scenario_keys: tuple[str, ...]) -> Section:
    """The quick section for a scenario whose top-level keys are `scenario_keys`."""

    def check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
        quick = c.mapping(("quick",), raw)
        for key in quick:
            if key.split(".")[0] not in scenario_keys or key.split(".")[0] == "quick":
                c.fail(("quick", key), f"unknown scenario key '{key}' (expected a dotted key like duration or "
                                       f"workload.drain)")
        s.quick = dict(quick)

    return Section("quick", check=check, plain=lambda s: copy.deepcopy(s.quick), default=dict)
