"""A reproduction's statements: the paper's claims as numbers with tolerances, checked on every repetition.

    statements:
      - paper: "o1's queue grows about 0.5 msg/s"     # the paper's words, printed beside ours
        cells: {gateway.gamma: 0, gateway.actions: []}  # the cells it is about (swept key: value); absent: all
        measure: slope                                  # slope | rate | at | band
        series: gw:gateway.outgoing.o1.queue            # NODE:dotted.path in nodes/NODE/metrics.jsonl
        from: 100s                                      # window start, model s from the workload's start (0)
        to: 3600s                                       # window end (default: the workload's end)
        at: 3600s                                       # measure at: the last sample at or before it
        after: gateway.threshold                        # the window starts at the first sample above it
        after_series: gw:gateway.outgoing.o1.queue      # ... of this series (default: `series`)
        min: 0.45                                       # tolerance; a number or an expression
        max: 0.55

  slope  the least-squares slope of the series over the window, per model second
  rate   (last - first) / (t_last - t_first) of a counter over the window, per model second
  at     the series' value at `at`
  band   the series' smallest and largest value over the window (with `after`: from the first crossing on)

A bound or `after` may be an expression over the cell's resolved scenario (its scenario.yaml: model seconds,
fractions), e.g. "gateway.threshold * (1 + gateway.escalate)": + - * / and parentheses, numbers and dotted
keys. A statement holds when every repetition's value is within [min, max]; a repetition whose window has no
samples (a quick run shorter than `at`) is n/a, and a statement with no repetition measured is n/a.

Every problem in the file is one UserError sentence naming the file and the key.
"""
from __future__ import annotations

import ast
import csv
import json
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from node import jsonlines
from node.errors import UserError
from testbed.units import parse_duration

MEASURES = ("slope", "rate", "at", "band")
KEYS = ("paper", "cells", "measure", "series", "from", "to", "at", "after", "after_series", "min", "max")
COLUMNS = ("statement", "paper", "measure", "series", "cell", "rep", "value", "min", "max", "holds")
_OPS: dict[type, Callable[[float, float], float]] = {ast.Add: operator.add, ast.Sub: operator.sub,
                                                     ast.Mult: operator.mul, ast.Div: operator.truediv}

Bound = float | str          # a number, or an expression over the cell's scenario


@dataclass
class Series:
    node: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.node}:{'.'.join(self.path)}"


@dataclass
class Statement:
    paper: str
    measure: str
    series: Series
    cells: dict[str, Any]
    start: float = 0.0
    end: float | None = None
    at: float | None = None
    after: Bound | None = None
    after_series: Series | None = None
    min: Bound | None = None
    max: Bound | None = None


@dataclass
class Result:
    """One statement on one repetition: value (lo, hi for a band) and the bounds it was held to."""
    statement: int
    cell: str
    rep: str
    value: tuple[float, float] | float | None
    lo: float | None
    hi: float | None
    note: str = ""

    @property
    def holds(self) -> bool | None:
        if self.value is None:
            return None
        lo_v, hi_v = self.value if isinstance(self.value, tuple) else (self.value, self.value)
        return (self.lo is None or lo_v >= self.lo) and (self.hi is None or hi_v <= self.hi)

    def text(self) -> str:
        if self.value is None:
            return f"n/a ({self.note})" if self.note else "n/a"
        if isinstance(self.value, tuple):
            return f"{_fmt(self.value[0])}..{_fmt(self.value[1])}"
        return _fmt(self.value)


# ---- the file -------------------------------------------------------------------------------------------

def parse(where: str, value: Any, swept: list[str]) -> list[Statement]:
    """The `statements:` list of a reproduction file; `swept`: the keys a statement's cells may name."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise UserError(f"{where}: statements: expected a list of statements.")
    return [_statement(f"{where}: statements[{i}]", item, swept) for i, item in enumerate(value)]


def _statement(where: str, item: Any, swept: list[str]) -> Statement:
    if not isinstance(item, dict):
        raise UserError(f"{where}: expected a mapping.")
    unknown = [str(k) for k in item if k not in KEYS]
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} (expected: {', '.join(KEYS)}).")
    paper = item.get("paper")
    if not isinstance(paper, str) or not paper.strip():
        raise UserError(f"{where}.paper: expected the paper's statement as a non-empty string.")
    measure = item.get("measure")
    if measure not in MEASURES:
        raise UserError(f"{where}.measure: expected one of {', '.join(MEASURES)}, got {measure!r}.")
    cells = item.get("cells") or {}
    if not isinstance(cells, dict):
        raise UserError(f"{where}.cells: expected a mapping of swept keys to values.")
    for key in cells:
        if key not in swept:
            raise UserError(f"{where}.cells: {key!r} is not a swept key ({', '.join(swept) or 'none'}).")
    st = Statement(paper=paper.strip(), measure=measure, series=_series(f"{where}.series", item.get("series")),
                   cells=dict(cells))
    st.start = _time(f"{where}.from", item.get("from", 0))
    if item.get("to") is not None:
        st.end = _time(f"{where}.to", item["to"])
        if st.end <= st.start:
            raise UserError(f"{where}.to: must be after from ({st.start:g} s).")
    if measure == "at":
        if item.get("at") is None:
            raise UserError(f"{where}.at: measure at needs the model time to measure at.")
        st.at = _time(f"{where}.at", item["at"])
    elif item.get("at") is not None:
        raise UserError(f"{where}.at: only for measure at.")
    if item.get("after") is not None:
        st.after = _bound(f"{where}.after", item["after"])
    if item.get("after_series") is not None:
        if st.after is None:
            raise UserError(f"{where}.after_series: needs after (the value it must pass).")
        st.after_series = _series(f"{where}.after_series", item["after_series"])
    st.min = _bound(f"{where}.min", item["min"]) if item.get("min") is not None else None
    st.max = _bound(f"{where}.max", item["max"]) if item.get("max") is not None else None
    if st.min is None and st.max is None:
        raise UserError(f"{where}: needs min, max or both (the tolerance).")
    if isinstance(st.min, float) and isinstance(st.max, float) and st.min > st.max:
        raise UserError(f"{where}.min: {st.min:g} is above max {st.max:g}.")
    return st


def _series(where: str, value: Any) -> Series:
    if not isinstance(value, str) or ":" not in value:
        raise UserError(f"{where}: expected NODE:dotted.path of its metrics lines, like "
                        f"gw:gateway.outgoing.o1.queue, got {value!r}.")
    node, _, path = value.partition(":")
    parts = tuple(path.split("."))
    if not node or not path or any(not p for p in parts):
        raise UserError(f"{where}: expected NODE:dotted.path, got {value!r}.")
    return Series(node=node, path=parts)


def _time(where: str, value: Any) -> float:
    try:
        seconds = parse_duration(value)
    except (ValueError, TypeError) as exc:
        raise UserError(f"{where}: {exc}") from None
    if seconds < 0:
        raise UserError(f"{where}: must not be negative.")
    return float(seconds)


def _bound(where: str, value: Any) -> Bound:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise UserError(f"{where}: must be a finite number.")
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: expected a number or an expression over scenario keys.")
    try:
        _check(ast.parse(value, mode="eval").body)
    except (SyntaxError, ValueError) as exc:
        raise UserError(f"{where}: {value!r} is not an expression of numbers, dotted scenario keys, + - * / "
                        f"and parentheses ({exc}).") from None
    return value


def _check(node: ast.AST) -> None:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        _check(node.left)
        _check(node.right)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand)
    elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        pass
    elif _dotted(node) is None:
        raise ValueError(f"{type(node).__name__} is not allowed")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def evaluate(bound: Bound, scenario: dict[str, Any]) -> float:
    """A bound's value for one cell; ValueError naming the key when the scenario lacks a number there."""
    if isinstance(bound, float):
        return bound
    return _eval(ast.parse(bound, mode="eval").body, scenario)


def _eval(node: ast.AST, scenario: dict[str, Any]) -> float:
    if isinstance(node, ast.BinOp):
        return _OPS[type(node.op)](_eval(node.left, scenario), _eval(node.right, scenario))
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, scenario)
    if isinstance(node, ast.Constant):
        return float(node.value)
    key = _dotted(node) or ""
    value = lookup(scenario, tuple(key.split(".")))
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"the scenario has no number at {key}")
    return float(value)


def lookup(doc: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


# ---- one repetition -------------------------------------------------------------------------------------

def samples(rep_dir: Path, series: Series, origin: float, scale: float) -> list[tuple[float, float]]:
    """(model s from `origin`, value) of a series, in time order; lines without a number there are skipped."""
    out: list[tuple[float, float]] = []
    # a torn last line after kill -9 is skipped: the checker reports it, a statement only reads what is there
    for rec in jsonlines.objects(Path(rep_dir) / "nodes" / series.node / "metrics.jsonl"):
        if not isinstance(rec.get("ts"), (int, float)):
            continue
        value = lookup(rec, series.path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(((float(rec["ts"]) - origin) / scale, float(value)))
    out.sort()
    return out


def workload_window(rep_dir: Path, scenario: dict[str, Any]) -> tuple[float, float] | None:
    """(wall ts of the workload's start, its length in model s): the workload_end event less the duration."""
    duration = scenario.get("duration")
    scale = scenario.get("time_scale") or 1.0
    for rec in jsonlines.objects(Path(rep_dir) / "events.jsonl"):
        if rec.get("event") == "workload_end" and isinstance(duration, (int, float)):
            return float(rec["ts"]) - float(duration) * float(scale), float(duration)
    return None


def measure(st: Statement, rep_dir: Path, scenario: dict[str, Any]) -> tuple[tuple[float, float] | float | None, str]:
    """The statement's value on one repetition, or None and why."""
    window = workload_window(rep_dir, scenario)
    if window is None:
        return None, "no workload_end event"
    origin, length = window
    scale = float(scenario.get("time_scale") or 1.0)
    start, end = st.start, st.end if st.end is not None else length
    if st.after is not None:
        try:
            level = evaluate(st.after, scenario)
        except ValueError as exc:
            return None, str(exc)
        crossing = next((t for t, v in samples(rep_dir, st.after_series or st.series, origin, scale)
                         if t >= start and v > level), None)
        if crossing is None:
            return None, f"never above {_fmt(level)}"
        start = crossing
    points = samples(rep_dir, st.series, origin, scale)
    if st.measure == "at":
        at = st.at if st.at is not None else end
        if at > length:
            return None, f"the workload ends at {_fmt(length)} s"
        before = [v for t, v in points if t <= at]
        return (before[-1], "") if before else (None, "no sample")
    inside = [(t, v) for t, v in points if start <= t <= end]
    if st.measure == "band":
        return ((min(v for _, v in inside), max(v for _, v in inside)), "") if inside else (None, "no sample")
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None, "fewer than two samples in the window"
    if st.measure == "rate":
        (t0, v0), (t1, v1) = inside[0], inside[-1]
        return (v1 - v0) / (t1 - t0), ""
    return slope(inside), ""


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of value over time."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / var


# ---- an experiment --------------------------------------------------------------------------------------

def check(statements: list[Statement], out: Path) -> list[Result]:
    """Every statement on every complete repetition of the experiment in `out` whose cell it is about."""
    try:
        doc = json.loads((Path(out) / "experiment.json").read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {Path(out) / 'experiment.json'}: {exc}.") from None
    results: list[Result] = []
    for cell in doc.get("cells", []):
        params = dict(cell.get("params") or {})
        for i, st in enumerate(statements):
            if any(params.get(k) != v for k, v in st.cells.items()):
                continue
            for rep in cell.get("reps", []):
                rep_dir = Path(out) / str(rep.get("dir", ""))
                scenario = load_scenario(rep_dir)
                result = Result(statement=i, cell=str(cell.get("id", "")), rep=str(rep.get("rep", "")),
                                value=None, lo=None, hi=None)
                if rep.get("status") != "complete" or scenario is None:
                    result.note = "repetition not complete"
                else:
                    try:
                        result.lo = None if st.min is None else evaluate(st.min, scenario)
                        result.hi = None if st.max is None else evaluate(st.max, scenario)
                        result.value, result.note = measure(st, rep_dir, scenario)
                    except ValueError as exc:
                        result.note = str(exc)
                results.append(result)
    return results


def verdicts(statements: list[Statement], results: list[Result]) -> list[bool | None]:
    """Per statement: True when every measured repetition holds, False when one does not, None: none measured."""
    out: list[bool | None] = []
    for i in range(len(statements)):
        held = [r.holds for r in results if r.statement == i and r.holds is not None]
        out.append(None if not held else all(held))
    return out


def write_csv(statements: list[Statement], results: list[Result], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in results:
            st = statements[r.statement]
            holds = "" if r.holds is None else ("yes" if r.holds else "no")
            w.writerow([r.statement + 1, st.paper, st.measure, str(st.series), r.cell, r.rep, r.text(),
                        "" if r.lo is None else _fmt(r.lo), "" if r.hi is None else _fmt(r.hi), holds])


def lines(statements: list[Statement], results: list[Result]) -> list[str]:
    """What `testbed reproduce` prints: per statement the paper's words, ours per repetition, and whether it
    holds."""
    out: list[str] = []
    for i, (st, verdict) in enumerate(zip(statements, verdicts(statements, results))):
        mine = [r for r in results if r.statement == i]
        word = {True: "holds", False: "DOES NOT HOLD", None: "n/a"}[verdict]
        out.append(f"statement {i + 1}: {st.paper}: {word}")
        for r in mine:
            tol = f"[{'' if r.lo is None else _fmt(r.lo)}, {'' if r.hi is None else _fmt(r.hi)}]"
            out.append(f"  {r.cell} rep {r.rep}: {st.measure} {st.series} = {r.text()} {tol}")
        if not mine:
            out.append("  no cell of this run is one it is about")
    return out


def load_scenario(rep_dir: Path) -> dict[str, Any] | None:
    """The repetition's resolved scenario (scenario.yaml: model seconds, fractions); None when unreadable."""
    try:
        doc = yaml.safe_load((rep_dir / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return doc if isinstance(doc, dict) else None


def _fmt(value: float) -> str:
    return f"{value:.4g}"
