"""A reproduction file: one figure of a paper, as a scenario plus overrides, a sweep and a plot.

    reproductions/<name>.yaml
      title:    one line naming the paper and the figure
      scenario: the scenario file, relative to this file
      set:      {dotted.key: value}: overrides, validated like --set
      sweep:    {grid: {key: [values]}, reps: N, exclude: [{key: value}], seeds: per_rep}: replaces the
                scenario's sweep
      plot:     {x: swept key, y: metric of the report's summary table, series: [swept keys]}, or
                {x: message_size, y: mean_delay_s, series: [...]}: the report's delay per message-size
                bucket (delay_by_size.csv), one line per series;
                plot.ratio {key: swept key, of: value, to: value} (needs sweep.seeds per_rep): the ratio
                of y between the cells that differ only in that key, repetition by repetition (ratio.csv)
      quick:    {dotted.key: value}: overrides for --quick only (on top of the scenario's quick: section)
      figure_dir: where the PNG and CSV go, relative to this file
                  (default docs/reproductions/<paper>/<name>, <paper> = the name up to its first "-")
      table:    {metrics: [metric of the summary table, ...], nodes: [node, ...]}: the figure's numbers as a
                table, NAME-table.csv (one row per cell: each metric's value and 95% CI, n, saturated
                repetitions); with dynamic routing also routes.csv, tables.csv and links.csv (the routing
                account of every repetition, testbed/reproduce/routes.py), their rows cut to `nodes` if given
      paper:    free-form: the paper's numbers or shape, printed beside ours
      statements: the paper's claims as numbers with tolerances, checked on every repetition
                (testbed/reproduce/statements.py)

Every problem is one UserError sentence naming the file and the key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from node.errors import UserError
from testbed.reproduce import statements as claims
from testbed.scenario.loader import plain_yaml

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "reproductions"
KEYS = ("title", "scenario", "set", "sweep", "plot", "quick", "figure_dir", "paper", "statements", "table")
TABLE_KEYS = ("metrics", "nodes")
PLOT_KEYS = ("x", "y", "series", "ratio")
RATIO_KEYS = ("key", "of", "to")
SWEEP_KEYS = ("grid", "reps", "exclude", "seeds")
# plot.x that is not a swept key: the report's message-size buckets, with the mean delay per bucket as y
MESSAGE_SIZE = "message_size"
BY_SIZE_Y = "mean_delay_s"


@dataclass
class Ratio:
    """y of the cells with key = of over y of the cells with key = to, paired by repetition."""
    key: str
    of: Any
    to: Any


@dataclass
class Plot:
    x: str
    y: str
    series: list[str] = field(default_factory=list)
    ratio: Ratio | None = None


@dataclass
class Table:
    """The figure's numbers as a table: these summary metrics per cell; the routing rows of these nodes."""
    metrics: list[str]
    nodes: list[str] = field(default_factory=list)


@dataclass
class Reproduction:
    name: str
    source: Path
    title: str
    scenario: Path
    sets: dict[str, Any]
    sweep: dict[str, Any] | None
    plot: Plot
    quick: dict[str, Any]
    figure_dir: Path
    paper: Any = None
    statements: list[claims.Statement] = field(default_factory=list)
    table: Table | None = None


def names(folder: Path = FOLDER) -> list[str]:
    """The reproductions shipped in `folder`, by name."""
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def find(name: str, folder: Path = FOLDER) -> Path:
    """NAME (a file in `folder`) or a path to a reproduction file."""
    direct = Path(name)
    if direct.suffix in (".yaml", ".yml") and direct.is_file():
        return direct
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(names(folder)) or "none"
        raise UserError(f"unknown reproduction {name!r} (known: {known}; see testbed reproduce --list).")
    return path


def load(path: Path) -> Reproduction:
    """Read and check one reproduction file (the scenario's own keys are checked when it is planned)."""
    path = Path(path)
    where = str(path)
    try:
        data = plain_yaml(path.read_text(), where)
    except OSError as exc:
        raise UserError(f"{where}: cannot read it ({exc.strerror or exc}).") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{where}:{line} not valid YAML ({getattr(exc, 'problem', None) or exc}).") from None
    top = _mapping(where, "", data, KEYS)
    for key in ("title", "scenario", "plot"):
        if key not in top:
            raise UserError(f"{where}: missing key {key!r}.")
    title = _text(where, "title", top["title"])
    scenario = (path.parent / _text(where, "scenario", top["scenario"])).resolve()
    if not scenario.is_file():
        raise UserError(f"{where}: scenario: {scenario} does not exist.")
    sets = _dotted(where, "set", top.get("set"))
    sweep = _sweep(where, top.get("sweep"))
    plot = _plot(where, top["plot"], sweep)
    quick = _dotted(where, "quick", top.get("quick"))
    if "figure_dir" in top:
        figure_dir = (path.parent / _text(where, "figure_dir", top["figure_dir"])).resolve()
    else:
        figure_dir = REPO / "docs" / "reproductions" / path.stem.split("-")[0] / path.stem
    # a statement names cells by the figure's swept keys, or by the scenario's when the figure has no sweep
    swept = list(sweep["grid"]) if sweep is not None else _scenario_swept(scenario)
    statements = claims.parse(where, top.get("statements"), swept)
    return Reproduction(name=path.stem, source=path, title=title, scenario=scenario, sets=sets, sweep=sweep,
                        plot=plot, quick=quick, figure_dir=figure_dir, paper=top.get("paper"),
                        statements=statements, table=_table(where, top.get("table")))


def _scenario_swept(scenario: Path) -> list[str]:
    try:
        data = yaml.safe_load(scenario.read_text())
    except (OSError, yaml.YAMLError):
        return []       # the scenario loader reports it when the figure is planned
    grid = ((data or {}).get("sweep") or {}).get("grid") if isinstance(data, dict) else None
    return list(grid) if isinstance(grid, dict) else []


def _mapping(where: str, key: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    label = f"{key}: " if key else ""
    if not isinstance(value, dict):
        raise UserError(f"{where}: {label}expected a mapping, got {type(value).__name__}.")
    unknown = [str(k) for k in value if k not in allowed]
    if unknown:
        raise UserError(f"{where}: {label}unknown key {unknown[0]!r} (expected: {', '.join(allowed)}).")
    return value


def _text(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: {key}: expected a non-empty string.")
    return value


def _dotted(where: str, key: str, value: Any) -> dict[str, Any]:
    """{dotted.key: value} overrides; the scenario loader checks the keys and values themselves."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: {key}: expected a mapping of dotted keys to values.")
    for k in value:
        if not isinstance(k, str) or not k or any(not part for part in k.split(".")):
            raise UserError(f"{where}: {key}: {k!r} is not a dotted key like workload.drain.")
    return dict(value)


def _sweep(where: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    m = _mapping(where, "sweep", value, SWEEP_KEYS)
    grid = m.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise UserError(f"{where}: sweep.grid: expected a mapping of swept keys to lists of values.")
    for k, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"{where}: sweep.grid.{k}: expected a non-empty list of values.")
    reps = m.get("reps", 1)
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise UserError(f"{where}: sweep.reps: expected a whole number of at least 1, got {reps!r}.")
    out = {"grid": dict(grid), "reps": reps}
    for key in ("exclude", "seeds"):        # the scenario loader checks them
        if m.get(key) is not None:
            out[key] = m[key]
    return out


def _plot(where: str, value: Any, sweep: dict[str, Any] | None) -> Plot:
    m = _mapping(where, "plot", value, PLOT_KEYS)
    x = _text(where, "plot.x", m.get("x"))
    y = _text(where, "plot.y", m.get("y"))
    series = m.get("series", [])
    if isinstance(series, str):
        series = [series]
    if not isinstance(series, list) or not all(isinstance(s, str) and s for s in series):
        raise UserError(f"{where}: plot.series: expected a list of swept keys.")
    if x == MESSAGE_SIZE and y != BY_SIZE_Y:
        raise UserError(f"{where}: plot.y: with x {MESSAGE_SIZE} the figure plots {BY_SIZE_Y}, not {y!r}.")
    if sweep is not None:
        for key in [*([] if x == MESSAGE_SIZE else [x]), *series]:
            if key not in sweep["grid"]:
                raise UserError(f"{where}: plot: {key!r} is not a key of sweep.grid "
                                f"({', '.join(sweep['grid'])}).")
    return Plot(x=x, y=y, series=list(series), ratio=_ratio(where, m.get("ratio"), list(series), sweep))


def _table(where: str, value: Any) -> Table | None:
    """table: the metrics are checked against the report's before anything runs (run.check_metric)."""
    if value is None:
        return None
    m = _mapping(where, "table", value, TABLE_KEYS)
    lists: dict[str, list[str]] = {}
    for key in TABLE_KEYS:
        items = m.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            raise UserError(f"{where}: table.{key}: expected a list of names.")
        lists[key] = list(items)
    if not lists["metrics"]:
        raise UserError(f"{where}: table.metrics: expected at least one metric of the report's summary table.")
    return Table(metrics=lists["metrics"], nodes=lists["nodes"])


def _ratio(where: str, value: Any, series: list[str], sweep: dict[str, Any] | None) -> Ratio | None:
    """plot.ratio: pairing by repetition means the same workload in both cells, so it needs seeds: per_rep."""
    if value is None:
        return None
    m = _mapping(where, "plot.ratio", value, RATIO_KEYS)
    key = _text(where, "plot.ratio.key", m.get("key"))
    if key not in series:
        raise UserError(f"{where}: plot.ratio.key: {key!r} is not one of plot.series ({', '.join(series)}).")
    if sweep is None or sweep.get("seeds") != "per_rep":
        raise UserError(f"{where}: plot.ratio: needs sweep.seeds: per_rep (the same workload in the cells it pairs).")
    for side in ("of", "to"):
        if m.get(side) not in sweep["grid"][key]:
            raise UserError(f"{where}: plot.ratio.{side}: {m.get(side)!r} is not a value of sweep.grid.{key}.")
    return Ratio(key=key, of=m["of"], to=m["to"])
