"""Sweeps: a scenario's `sweep.grid` expanded into cells, and the seed of each repetition.

A cell is one point of the grid (one value per swept key). Its name is stable and
safe as a directory name, so `--resume` finds the same folders again and the
analysis can group repetitions by it. Seeds are derived by hashing, not by
drawing from a generator, so adding a cell or a repetition never changes the
seed of another one.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from testbed.scenario.sections.sweep import grid_points
from testbed.scenario.spec import Scenario

DEFAULT_CELL = "default"
_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")
MAX_NAME = 120      # well below the 255-byte file name limit, leaves room for suffixes


@dataclass
class Cell:
    name: str                                                  # directory name, e.g. "mode-fragmenting_rbsad-400"
    overrides: dict[str, Any] = field(default_factory=dict)    # dotted scenario key -> value


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (str, int, float)):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-") or "x"


def _short_keys(keys: list[str]) -> dict[str, str]:
    """The last segment of each dotted key, or more of it where two keys would collide."""
    out: dict[str, str] = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            short = ".".join(parts[-n:])
            clash = [k for k in keys if k != key and ".".join(k.split(".")[-n:]) == short]
            if not clash:
                break
        out[key] = short
    return out


def cell_name(overrides: dict[str, Any]) -> str:
    """A filesystem-safe name for one grid point ("default" for the empty grid)."""
    if not overrides:
        return DEFAULT_CELL
    short = _short_keys(list(overrides))
    name = "_".join(f"{_safe(short[k])}-{_safe(_value_text(v))}" for k, v in overrides.items())
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"{name[:MAX_NAME - 11]}-{digest}"
    return name


def expand(scenario: Scenario) -> list[Cell]:
    """Every combination of the grid's values, in the order the file lists keys and values, less the
    points sweep.exclude names."""
    grid = scenario.sweep.grid
    if not grid:
        return [Cell(DEFAULT_CELL, {})]
    cells: list[Cell] = []
    used: set[str] = set()
    for overrides in grid_points(grid, scenario.sweep.exclude):
        name = cell_name(overrides)
        base, n = name, 2
        while name in used:     # two values that sanitize alike ("a b" and "a-b")
            name = f"{base}~{n}"
            n += 1
        used.add(name)
        cells.append(Cell(name, overrides))
    return cells


def rep_seed(scenario: Scenario, cell: Cell, rep: int) -> int:
    """The seed of one repetition: of its cell (sweep.seeds per_cell), or the same for every cell (per_rep)."""
    return derive_seed(scenario.seed, cell.name if scenario.sweep.seeds == "per_cell" else "", rep)


def derive_seed(base: int, cell: str, rep: int) -> int:
    """A stable seed for one repetition of one cell (0 .. 2**63-1, what the loader accepts)."""
    digest = hashlib.sha256(f"wanbed-seed:{base}:{cell}:{rep}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def set_arguments(overrides: dict[str, Any]) -> list[str]:
    """The overrides as --set KEY=VALUE strings (JSON is YAML, so the loader reads them back exactly)."""
    return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
