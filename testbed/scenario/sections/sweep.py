"""The `sweep` section: the grid of scenario keys to vary and the repetitions of each cell.
The loader also checks that every grid value gives a valid scenario."""
from __future__ import annotations

import copy
from typing import Any

from testbed.scenario.checks import Check
from testbed.scenario.sections.base import Section
from testbed.scenario.spec import Scenario, SweepSpec
from testbed.topology.model import Topology

UNSWEPT = ("sweep", "quick", "name")      # keys a grid cannot vary


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    m = c.mapping(("sweep",), raw, ("grid", "reps"))
    s.sweep = SweepSpec(reps=c.integer(("sweep", "reps"), m.get("reps", 1), 1, 10000))
    for key, values in c.mapping(("sweep", "grid"), m.get("grid")).items():
        vals = c.sequence(("sweep", "grid", key), values)
        if not vals:
            c.fail(("sweep", "grid", key), "expected a non-empty list of values")
        if key.split(".")[0] in UNSWEPT:
            c.fail(("sweep", "grid", key), f"cannot sweep over {key}")
        s.sweep.grid[key] = list(vals)


SWEEP = Section("sweep", check=_check, plain=lambda s: {"grid": copy.deepcopy(s.sweep.grid), "reps": s.sweep.reps})
