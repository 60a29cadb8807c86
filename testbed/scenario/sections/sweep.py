"""The `sweep` section: the grid of scenario keys to vary and the repetitions of each cell.
The loader also checks that every grid value gives a valid scenario."""
from __future__ import annotations

import copy
import itertools
import math
from typing import Any

from testbed.scenario.checks import Check
from testbed.scenario.parts import SweepSpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology.model import Topology

UNSWEPT = ("sweep", "quick", "name")      # keys a grid cannot vary
SEED_POLICIES = ("per_cell", "per_rep")
# Each grid point is loaded and validated once per repetition before anything runs, so the grid's size is
# checked before its product is built: a few lines of values can multiply into billions of points.
MAX_GRID_POINTS = 10_000


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    m = c.mapping(("sweep",), raw, ("grid", "reps", "exclude", "seeds"))
    s.sweep = SweepSpec(reps=c.integer(("sweep", "reps"), m.get("reps", 1), 1, 10000))
    seeds = m.get("seeds", "per_cell")
    if seeds not in SEED_POLICIES:
        c.fail(("sweep", "seeds"), f"expected one of {', '.join(SEED_POLICIES)}, got {seeds!r}")
    s.sweep.seeds = seeds
    for key, values in c.mapping(("sweep", "grid"), m.get("grid")).items():
        vals = c.sequence(("sweep", "grid", key), values)
        if not vals:
            c.fail(("sweep", "grid", key), "expected a non-empty list of values")
        if key.split(".")[0] in UNSWEPT:
            c.fail(("sweep", "grid", key), f"cannot sweep over {key}")
        s.sweep.grid[key] = list(vals)
    sizes = [len(v) for v in s.sweep.grid.values()]
    if math.prod(sizes) > MAX_GRID_POINTS:
        c.fail(("sweep", "grid"), f"{math.prod(sizes)} grid points ({' x '.join(map(str, sizes))} values); "
                                  f"at most {MAX_GRID_POINTS} (split the sweep into several scenarios)")
    for i, entry in enumerate(c.sequence(("sweep", "exclude"), m.get("exclude", []))):
        s.sweep.exclude.append(_exclusion(c, ("sweep", "exclude", i), entry, s.sweep.grid))
    if s.sweep.exclude and not grid_points(s.sweep.grid, s.sweep.exclude):
        c.fail(("sweep", "exclude"), "leaves no grid point to run")


def _exclusion(c: Check, path: tuple, entry: Any, grid: dict[str, list[Any]]) -> dict[str, Any]:
    """One exclude entry: keys of the grid, each with one of its values (else it could never match)."""
    m = c.mapping(path, entry)
    if not m:
        c.fail(path, "expected a mapping of swept keys to one of their values")
    for key, value in m.items():
        if key not in grid:
            c.fail((*path, key), f"not a key of sweep.grid ({', '.join(grid) or 'the grid is empty'})")
        if value not in grid[key]:
            c.fail((*path, key), f"{value!r} is not one of the grid's values {grid[key]!r}")
    return dict(m)


def _points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]


def _excluded(point: dict[str, Any], exclude: list[dict[str, Any]]) -> bool:
    return any(all(point.get(k) == v for k, v in entry.items()) for entry in exclude)


def grid_points(grid: dict[str, list[Any]], exclude: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values in file order, without the excluded ones."""
    return [p for p in _points(grid) if not _excluded(p, exclude)]


def _plain(s: Scenario) -> dict[str, Any]:
    out: dict[str, Any] = {"grid": copy.deepcopy(s.sweep.grid), "reps": s.sweep.reps}
    if s.sweep.exclude:
        out["exclude"] = copy.deepcopy(s.sweep.exclude)
    if s.sweep.seeds != "per_cell":
        out["seeds"] = s.sweep.seeds
    return out


SWEEP = Section("sweep", check=_check, plain=_plain, default=SweepSpec)
