"""The `max_late` key: how many message copies a repetition may leave still held in spools at teardown
(late, not lost) and still pass the loss checker (testbed/accounting); null (the default) means any number."""
from __future__ import annotations

from typing import Any

from testbed.scenario.checks import Check, given
from testbed.scenario.sections.base import Scenario, Section


def _read_max_late(c: Check, raw: Any, s: Scenario) -> None:
    value = given(raw, s.max_late)
    s.max_late = None if value is None else c.integer(("max_late",), value, 0)


MAX_LATE = Section("max_late", read=_read_max_late, plain=lambda s: s.max_late,
                   default=lambda: None)
