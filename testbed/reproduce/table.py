"""The figure's table: the report's per-cell summary (report/summary.csv) by the plot's x and series, or,
for x = message_size, the report's mean delay per message-size bucket (report/delay_by_size.csv).

The report keeps one row per cell, mode and metric with the mean over repetitions, its 95% confidence
interval and n. The CI is read as whatever the report gives: a half-width column `ci95`, or the bounds
`ci95_lo` / `ci95_hi`. Each cell's parameters (its swept values) come from experiment.json.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from node.errors import UserError
from node.natural import natural_key   # the x order of points and ratio rows (also read from here)
from testbed.reproduce.spec import MESSAGE_SIZE, Plot

# value: what the CI bounds (the report's ci_centre: the geometric mean for t on logs), else the mean
COLUMNS = ("x", "series", "value", "ci_lo", "ci_hi", "n", "ci_method", "cell")
# a figure by message size also says, beside each mean delay, which share of the bucket's accepted copies it
# covers (the rest were not delivered by the run's end: censored), with its Wilson 95% interval
SHARE_COLUMNS = ("accepted", "delivered_share", "delivered_share_lo", "delivered_share_hi")
# reps.csv: one row per repetition, what a reader needs to trust a point (the value behind it, whether the
# host was saturated or the run stalled, what it cost)
REP_COLUMNS = ("cell", "rep", "seed", "status", "value", "accepted", "delivered", "late", "lost", "stalled",
               "host_cpu_mean", "host_cpu_max", "saturated", "wall_s")


@dataclass
class Point:
    x: Any
    series: str
    mean: float
    ci_lo: float
    ci_hi: float
    n: int
    cell: str
    method: str = ""
    # (accepted, delivered share, its lo, hi) for a point by message size; None otherwise
    share: tuple[float, float, float, float] | None = None

    def row(self) -> list[Any]:
        return [self.x, self.series, _round(self.mean), _round(self.ci_lo), _round(self.ci_hi), self.n,
                self.method, self.cell]

    def share_row(self) -> list[Any]:
        if self.share is None:
            return ["", "", "", ""]
        accepted, *share = self.share
        return ["" if math.isnan(accepted) else int(accepted), *(_round(v) for v in share)]


def cell_params(experiment_json: Path) -> dict[str, dict[str, Any]]:
    """cell name -> its parameters (the swept values, the mode in force)."""
    try:
        doc = json.loads(Path(experiment_json).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {experiment_json}: {exc}.") from None
    return {c["id"]: dict(c.get("params") or {}) for c in doc.get("cells", []) if isinstance(c, dict) and "id" in c}


def report_table(plot: Plot) -> str:
    """The report's CSV the figure reads."""
    return "delay_by_size.csv" if plot.x == MESSAGE_SIZE else "summary.csv"


def points(table_csv: Path, params: dict[str, dict[str, Any]], plot: Plot) -> list[Point]:
    """One point per cell that has the metric plot.y (per cell and size bucket for x = message_size),
    sorted by series then x."""
    try:
        with open(table_csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise UserError(f"cannot read the report's table {table_csv}: {exc.strerror or exc}.") from None
    by_size = plot.x == MESSAGE_SIZE
    if not by_size:
        metrics = sorted({r.get("metric", "") for r in rows})
        if plot.y not in metrics:
            raise UserError(f"plot.y {plot.y!r} is not a metric of {table_csv} (metrics: {', '.join(metrics)}).")
    out: list[Point] = []
    for r in rows:
        cell = r.get("cell", "")
        if cell not in params or (not by_size and r.get("metric") != plot.y):
            continue
        p = params[cell]
        centre = as_float(r.get("ci_centre"))
        mean = centre if not math.isnan(centre) else as_float(r.get(plot.y if by_size else "mean"))
        lo, hi = _bounds(r, mean)
        series = ", ".join(f"{k.split('.')[-1]}={p.get(k)}" for k in plot.series) or "all"
        n = as_float(r.get("n"))
        share = (tuple(as_float(r.get(c)) for c in SHARE_COLUMNS)
                 if by_size and "delivered_share" in r else None)
        out.append(Point(x=r.get("bucket") if by_size else p.get(plot.x), series=series, mean=mean, ci_lo=lo, ci_hi=hi,
                         n=0 if math.isnan(n) else int(n), cell=cell, method=r.get("ci_method") or "",
                         share=share))  # type: ignore[arg-type]
    out.sort(key=lambda pt: (pt.series, natural_key(pt.x)))
    return out


def experiment_time_scale(experiment_json: Path) -> float:
    """The experiment's time_scale (wall seconds per model second); 1 when it does not say."""
    try:
        value = as_float(json.loads(Path(experiment_json).read_text()).get("time_scale"))
    except (OSError, ValueError, AttributeError):
        return 1.0
    return value if value > 0 else 1.0


def in_model_seconds(pts: list[Point], time_scale: float) -> list[Point]:
    """Delays the report measured in wall seconds, as model seconds: a figure of delays is read against the
    paper's, whose clock is the model's."""
    if time_scale == 1.0:
        return pts
    return [replace(pt, mean=pt.mean / time_scale, ci_lo=pt.ci_lo / time_scale, ci_hi=pt.ci_hi / time_scale)
            for pt in pts]


def write_csv(pts: list[Point], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        shares = any(pt.share is not None for pt in pts)
        w.writerow([*COLUMNS, *(SHARE_COLUMNS if shares else ())])
        for pt in pts:
            w.writerow([*pt.row(), *(pt.share_row() if shares else ())])


def _bounds(row: dict[str, str], mean: float) -> tuple[float, float]:
    """The CI as bounds, from ci95_lo/ci95_hi when the report has them, else mean -/+ the ci95 half-width."""
    lo, hi = as_float(row.get("ci95_lo")), as_float(row.get("ci95_hi"))
    if not (math.isnan(lo) or math.isnan(hi)):
        return lo, hi
    half = as_float(row.get("ci95"))
    return mean - half, mean + half       # NaN with one repetition: no interval


def _round(value: float) -> float:
    """Four significant digits: the CSV is read by people, and the CIs are far wider than that."""
    return value if math.isnan(value) or value == 0 else float(f"{value:.4g}")


def as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and not math.isnan(as_float(value))


def rep_rows(out: Path, plot: Plot) -> list[dict[str, Any]]:
    """One row per repetition of the experiment in `out` (REP_COLUMNS): its entry in experiment.json, its
    summary.json and, unless the figure is by message size, its plot.y from the report's runs.csv."""
    try:
        doc = json.loads((out / "experiment.json").read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {out / 'experiment.json'}: {exc}.") from None
    values: dict[tuple[str, str], str] = {}
    if plot.x != MESSAGE_SIZE:
        try:
            with open(out / "report" / "runs.csv", newline="") as f:
                values = {(r.get("cell", ""), r.get("rep", "")): r.get(plot.y, "") for r in csv.DictReader(f)}
        except OSError:
            pass        # no report yet: the rows still say what each rep cost
    rows: list[dict[str, Any]] = []
    for cell in doc.get("cells", []):
        for rep in cell.get("reps", []):
            s = _summary(out / str(rep.get("dir", "")))
            sat = s.get("saturation") if isinstance(s.get("saturation"), dict) else {}
            wall = rep.get("wall_s")
            rows.append({"cell": cell.get("id", ""), "rep": rep.get("rep", ""), "seed": rep.get("seed", ""),
                         "status": rep.get("status", ""),
                         "value": _cell_text(values.get((str(cell.get("id", "")), str(rep.get("rep", ""))), "")),
                         **{k: s.get(k, "") for k in ("accepted", "delivered", "late", "lost", "stalled")},
                         "host_cpu_mean": sat.get("mean_cpu", ""), "host_cpu_max": sat.get("max_cpu", ""),
                         "saturated": sat.get("saturated", ""),
                         "wall_s": round(wall, 1) if isinstance(wall, (int, float)) else ""})
    return rows


RATIO_COLUMNS = ("x", "series", "ratio", "ci_lo", "ci_hi", "n", "ci_method", "per_rep", "of_cell", "to_cell")


def ratios(rows: list[dict[str, Any]], params: dict[str, dict[str, Any]], plot: Plot) -> list[list[Any]]:
    """plot.ratio per x and series: the ratio of the two cells' values repetition by repetition, its
    geometric mean and 95% CI by t on logs (RATIO_COLUMNS)."""
    from spark_analysis.stats import ci95

    r = plot.ratio
    if r is None:
        return []
    values = {(row["cell"], str(row["rep"])): row["value"] for row in rows if is_number(row.get("value"))}
    out: list[list[Any]] = []
    for cell, p in params.items():
        if p.get(r.key) != r.of:
            continue
        twin = {**p, r.key: r.to}
        other = next((c for c, q in params.items() if q == twin), None)
        if other is None:
            continue
        reps = sorted((rep for c, rep in values if c == cell), key=natural_key)
        per_rep = [values[(cell, rep)] / values[(other, rep)] for rep in reps
                   if (other, rep) in values and values[(other, rep)] > 0]
        iv = ci95(per_rep, positive=True)
        series = ", ".join(f"{k.split('.')[-1]}={p.get(k)}" for k in plot.series if k != r.key) or "all"
        out.append([p.get(plot.x), series, _round(iv.centre), _round(iv.lo), _round(iv.hi), iv.n, iv.method,
                    " ".join(f"{v:.3g}" for v in per_rep), cell, other])
    out.sort(key=lambda row: (row[1], natural_key(row[0])))
    return out


def write_ratios(table: list[list[Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(RATIO_COLUMNS)
        w.writerows(table)


def write_reps(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=REP_COLUMNS)
        w.writeheader()
        w.writerows(rows)


def _summary(rep_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((rep_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _cell_text(value: str) -> Any:
    number = as_float(value)
    return "" if math.isnan(number) else _round(number)


def metric_table(summary_csv: Path, params: dict[str, dict[str, Any]], metrics: list[str],
                 reps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell: its swept values, n, the saturated repetitions (k/n: the point is not to be trusted
    when k > 0) and for each metric its value (the CI's centre) and 95% bounds, from the report's summary table."""
    try:
        with open(summary_csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise UserError(f"cannot read the report's table {summary_csv}: {exc.strerror or exc}.") from None
    by_cell: dict[str, dict[str, dict[str, str]]] = {}
    for r in rows:
        by_cell.setdefault(r.get("cell", ""), {})[r.get("metric", "")] = r
    keys = list(dict.fromkeys(k for p in params.values() for k in p))
    out: list[dict[str, Any]] = []
    for cell in sorted(params, key=natural_key):
        own = [r for r in reps if r.get("cell") == cell]
        saturated = sum(1 for r in own if r.get("saturated") is True)
        row: dict[str, Any] = {"cell": cell, **{k: params[cell].get(k, "") for k in keys},
                               "reps": len(own), "saturated": f"{saturated}/{len(own)}"}
        for metric in metrics:
            r = by_cell.get(cell, {}).get(metric, {})
            centre = as_float(r.get("ci_centre"))
            value = centre if not math.isnan(centre) else as_float(r.get("mean"))
            lo, hi = _bounds(r, value) if r else (math.nan, math.nan)
            n = as_float(r.get("n"))
            row.update({metric: _round(value), f"{metric}_lo": _round(lo), f"{metric}_hi": _round(hi),
                        f"{metric}_n": "" if math.isnan(n) else int(n)})
        out.append(row)
    return out


def write_metric_table(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        if not rows:
            return
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
