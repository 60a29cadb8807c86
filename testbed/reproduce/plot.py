"""The figure's PNG: mean with its 95% CI per x, one line per series (the report's sweep plot, generalised)."""
from __future__ import annotations

import math
from pathlib import Path

from testbed.reproduce.spec import MESSAGE_SIZE, Plot
from testbed.reproduce.table import Point, as_float, is_number, natural_key


def write_png(pts: list[Point], plot: Plot, title: str, path: Path, y_label: str | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")          # no display on the machine that runs the sweep
    import matplotlib.pyplot as plt

    numeric = all(is_number(pt.x) for pt in pts)
    categories = [str(x) for x in sorted(dict.fromkeys(pt.x for pt in pts), key=natural_key)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for series in dict.fromkeys(pt.series for pt in pts):
        own = [pt for pt in pts if pt.series == series]
        xs = [as_float(pt.x) if numeric else categories.index(str(pt.x)) for pt in own]
        ys = [pt.mean for pt in own]
        # asymmetric error bars from the bounds; none where the CI is undefined (one repetition)
        low = [0.0 if math.isnan(pt.ci_lo) else max(0.0, pt.mean - pt.ci_lo) for pt in own]
        high = [0.0 if math.isnan(pt.ci_hi) else max(0.0, pt.ci_hi - pt.mean) for pt in own]
        ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=series)
    if not numeric:
        ax.set_xticks(range(len(categories)), categories)
    ax.set_xlabel("message size (fragments)" if plot.x == MESSAGE_SIZE else plot.x)
    methods = {pt.method for pt in pts if pt.method}
    centre = "geometric mean, 95% CI t on logs" if methods == {"t on logs"} else "mean, 95% CI"
    ax.set_ylabel(f"{y_label or plot.y}\n({centre})")
    ax.set_title(title, fontsize="small", wrap=True)
    ax.grid(alpha=0.3)
    if pts:
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
