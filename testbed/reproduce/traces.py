"""The series a reproduction's statements measure, over time: the paper's time plots (EMG's Figs. 10, 11).

For every series the statements name, one line per repetition of each cell a statement is about, over the
workload (model seconds from its start): the value itself, or for a series measured as a `rate` (a counter)
its rate over WINDOW model seconds. Written beside the figure as NAME-series.csv (`series, cell, rep, t,
value`) and NAME-series.png (one panel per series).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from testbed.reproduce import statements as claims

COLUMNS = ("series", "cell", "rep", "t", "value")
WINDOW = 10.0       # model s: a counter's rate over time is taken over this window


def rows(sts: list[claims.Statement], out: Path) -> list[list[Any]]:
    """(series, cell, rep, t, value) for each series the statements name, on the repetitions they are about."""
    try:
        doc = json.loads((Path(out) / "experiment.json").read_text())
    except (OSError, ValueError):
        return []
    wanted: dict[str, tuple[claims.Series, bool]] = {}
    for st in sts:
        counter = st.measure == "rate"
        wanted.setdefault(str(st.series), (st.series, counter))
    table: list[list[Any]] = []
    for cell in doc.get("cells", []):
        params = dict(cell.get("params") or {})
        for name, (series, counter) in wanted.items():
            if not any(str(st.series) == name and all(params.get(k) == v for k, v in st.cells.items())
                       for st in sts):
                continue
            for rep in cell.get("reps", []):
                rep_dir = Path(out) / str(rep.get("dir", ""))
                scenario = claims.load_scenario(rep_dir)
                window = claims.workload_window(rep_dir, scenario) if scenario else None
                if window is None:
                    continue
                origin, length = window
                pts = [(t, v) for t, v in claims.samples(rep_dir, series, origin,
                                                         float(scenario.get("time_scale") or 1.0))
                       if 0 <= t <= length]
                for t, v in (_rates(pts) if counter else pts):
                    table.append([name, cell.get("id", ""), rep.get("rep", ""), round(t, 2), round(v, 4)])
    return table


def _rates(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A counter's rate over the WINDOW before each sample (from the first sample at least WINDOW in)."""
    out: list[tuple[float, float]] = []
    j = 0
    for t, v in pts:
        while j < len(pts) and pts[j][0] <= t - WINDOW:
            j += 1
        if j > 0:
            t0, v0 = pts[j - 1]
            out.append((t, (v - v0) / (t - t0)))
    return out


def write(sts: list[claims.Statement], out: Path, csv_path: Path, png_path: Path, title: str) -> bool:
    """The CSV and the PNG; False (nothing written) when no repetition had a series to draw."""
    table = rows(sts, out)
    if not table:
        return False
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(table)
    import matplotlib
    matplotlib.use("Agg")          # no display on the machine that runs the sweep
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r[0] for r in table))
    rated = {str(st.series) for st in sts if st.measure == "rate"}
    fig, axes = plt.subplots(len(names), 1, figsize=(7, 3.2 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        lines = dict.fromkeys((r[1], r[2]) for r in table if r[0] == name)
        for cell, rep in lines:
            own = [r for r in table if r[0] == name and r[1] == cell and r[2] == rep]
            ax.plot([r[3] for r in own], [r[4] for r in own], linewidth=0.8, label=f"{cell} rep {rep}")
        ax.set_ylabel(f"{name}\n(rate per model s over {WINDOW:g} s)" if name in rated else name, fontsize="small")
        ax.set_xlabel("model s from the workload's start")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    axes[0, 0].set_title(title, fontsize="small", wrap=True)
    fig.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return True
