"""The `routing` section: how the nodes' routing tables are computed from the topology."""
from __future__ import annotations

from typing import Any

from testbed.scenario.checks import Check, given
from testbed.scenario.sections.base import Section
from testbed.scenario.spec import Scenario

ROUTINGS = ("auto", "shortest", "unidirectional", "delay")


def _read(c: Check, raw: Any, s: Scenario) -> None:
    s.routing = c.choice(("routing",), given(raw, s.routing), ROUTINGS)


ROUTING = Section("routing", read=_read, plain=lambda s: s.routing)
